"""A request's state as its status message shows it: the run's events, folded.

The agent's events carry data only; :class:`Board` keeps what the status
message needs from all of them so far (the stage, the tasks, the notice of
the moment, the answer written so far), and a renderer turns it into text.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from core.types import (
    AnswerDelta,
    AnswerDiscarded,
    Event,
    Finished,
    Notice,
    QueuePosition,
    Restarting,
    Stage,
    StageStarted,
    StillWaiting,
    TasksChanged,
    TaskState,
)


class Opening(StrEnum):
    """What the status says before the agent's first event."""

    STARTING = "starting"
    DOWNLOADING = "downloading"  # the person's files are being fetched
    RESUMING = "resuming"  # a job a stopped process left


@dataclass(slots=True)
class Board:
    opening: Opening = Opening.STARTING
    stage: Stage | None = None  # None: the agent has not started yet
    resumed: bool = False
    planned: int | None = None
    tasks: tuple[TaskState, ...] = ()
    waiting: StillWaiting | None = None
    queue: QueuePosition | None = None
    restarting: bool = False
    answer: str = ""

    @classmethod
    def of_notice(cls, notice: Notice) -> Board:
        board = cls()
        board.apply(notice)
        return board

    def apply(self, event: Event) -> None:
        match event:
            case StageStarted(stage=stage, resumed=resumed, planned=planned, tasks=tasks):
                self.stage, self.queue, self.waiting = stage, None, None
                self.resumed = resumed
                self.planned = planned if planned is not None else self.planned
                self.tasks = tasks or self.tasks
            case StillWaiting(tasks=tasks):
                self.waiting = event
                self.tasks = tasks or self.tasks
            case QueuePosition():
                self.queue = event
            case TasksChanged(tasks=tasks):
                self.tasks = tasks
                if self.stage in (None, Stage.PLANNING, Stage.SELECTING):
                    self.stage, self.waiting = Stage.RUNNING, None
            case AnswerDelta(text=text):
                self.answer += text
                self.waiting = None
            case AnswerDiscarded():
                self.answer = ""
            case Restarting():
                self.restarting = True
            case Finished():
                self.stage, self.waiting = Stage.DONE, None

    @property
    def finished_tasks(self) -> int:
        return TasksChanged(self.tasks).finished
