"""The AI-app chat's words: the status line for each state, a task card for
each task state, the plan's title."""

from __future__ import annotations

from adapters.chat.board import Board, Opening
from adapters.slack.assistant import card_of, plan_title, status_line
from core.types import (
    QueuePosition,
    Restarting,
    Stage,
    StageStarted,
    StillWaiting,
    TasksChanged,
    TaskState,
    TaskStatus,
)

DONE, FAILED, SKIPPED, RUNNING = (
    TaskStatus.DONE,
    TaskStatus.FAILED,
    TaskStatus.SKIPPED,
    TaskStatus.RUNNING,
)


def board(*events: object, opening: Opening = Opening.STARTING) -> Board:
    b = Board(opening=opening)
    for e in events:
        b.apply(e)  # type: ignore[arg-type]
    return b


def test_the_status_line_follows_the_request() -> None:
    tasks = (TaskState(0, "text-to-image", "m", DONE), TaskState(1, "summarization", "n", RUNNING))
    assert status_line(board()) == "is reading your message…"
    assert status_line(board(opening=Opening.DOWNLOADING)) == "is downloading your files…"
    assert status_line(board(QueuePosition(2))) == "is queued: 2 requests ahead of you…"
    assert status_line(board(StageStarted(Stage.SELECTING, planned=3))) == (
        "is choosing models for 3 tasks…"
    )
    assert status_line(board(TasksChanged(tasks))) == "is running tasks (1/2 finished)…"
    waiting = board(StageStarted(Stage.ANSWERING), StillWaiting(Stage.ANSWERING, 42.0))
    assert status_line(waiting) == "is still waiting for the language model (42 s)…"
    assert status_line(board(Restarting())).startswith("is restarting")
    assert status_line(board(StageStarted(Stage.DONE))) == ""


def test_a_card_per_task_state() -> None:
    assert card_of(TaskState(0, "text-to-image", None, TaskStatus.PENDING)) == (
        "0. text-to-image",
        "pending",
        None,
    )
    assert card_of(TaskState(1, "summarization", "acme/s", DONE)) == (
        "1. summarization · acme/s",
        "complete",
        None,
    )
    failed = card_of(TaskState(2, "text-to-speech", "acme/t", FAILED, "HTTP  503\nbusy"))
    assert failed == ("2. text-to-speech · acme/t", "error", "HTTP 503 busy")
    skipped = card_of(TaskState(3, "image-to-text", None, SKIPPED, "task 2 failed"))
    assert skipped[1:] == ("error", "skipped: task 2 failed")


def test_the_plan_title_says_how_it_ended() -> None:
    running = [TaskState(0, "a", None, RUNNING), TaskState(1, "b", None, DONE)]
    assert plan_title(running) == "Plan: 2 tasks"
    assert plan_title([TaskState(0, "a", None, DONE)]) == "Ran 1 task"
    ended = [TaskState(0, "a", None, DONE), TaskState(1, "b", None, FAILED)]
    assert plan_title(ended) == "Ran 2 tasks, 1 did not finish"
