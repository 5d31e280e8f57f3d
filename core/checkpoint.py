"""Writing a turn's checkpoint on its job: :class:`CheckpointWriter`.

A checkpoint is the turn's :class:`~core.turn_state.TurnState` as JSON
(:func:`~core.turn_state.dump_state`), stored on the job's row.  The steps
of a turn ask for a write after each thing worth keeping (the uploads
stored, the plan and its models, each task finished); the reply's own
checkpoint is written with the saved turn, in its transaction
(:func:`core.turn_save.persist`).
"""

from __future__ import annotations

import asyncio

from core.execution import OutcomeListener, TaskOutcome
from core.store.media import MediaStore
from core.turn_state import TurnState, dump_state
from core.types import Job


class CheckpointWriter:
    """Writes one turn's state on its job (nothing without a job).

    Group commit: one write at a time, each with the newest state.  A write
    asked for while one is under way does not queue a write of its own:
    the next write carries the state of every caller who asked meanwhile,
    and each caller returns once a write begun after it asked has finished
    (its state is in the checkpoint then: a finished task's result is
    stored before the task is reported as kept).  A slower write never
    overwrites a newer one.  A wide plan whose tasks finish together writes
    once, not once per task."""

    def __init__(self, job: Job | None, state: TurnState, media: MediaStore) -> None:
        self.job = job
        self.state = state
        self.media = media
        self._lock = asyncio.Lock()
        self._asked = 0  # writes asked for so far (each caller's number)
        self._written = 0  # every write up to this number is in a finished write

    async def save(self) -> None:
        if self.job is None:
            return
        self._asked += 1
        mine = self._asked
        async with self._lock:
            if self._written >= mine:
                return  # a write that began after this caller asked carried its state
            # No await from here to the write's start: the state taken is that
            # of every write asked for so far.
            covers = self._asked
            await self.job.save_checkpoint(dump_state(self.state, self.media))
            self._written = covers

    def task_finished(self) -> OutcomeListener | None:
        """What the executor calls as each task ends: keep it, then write."""

        async def on_finished(o: TaskOutcome) -> None:
            self.state.finished(o)
            await self.save()

        return on_finished if self.job is not None else None
