"""The words people read: one renderer, each platform's markup."""

from __future__ import annotations

from adapters.chat.board import Board, Opening
from adapters.chat.render import Renderer, human_size, seconds
from adapters.cli import RENDERER as TERMINAL
from adapters.discord.surface import MESSAGE_LIMIT, RENDERER
from core.types import (
    AnswerDelta,
    AnswerDiscarded,
    ModelChoice,
    PlannedStep,
    PlanPreview,
    QueuePosition,
    Reply,
    ReplyStatus,
    Restarting,
    Stage,
    StageStarted,
    StillWaiting,
    TaskRecord,
    TasksChanged,
    TaskState,
    TaskStatus,
)

TASKS = (
    TaskState(0, "text-to-image", "acme/t2i", TaskStatus.DONE),
    TaskState(1, "image-to-text", "acme/i2t", TaskStatus.RUNNING),
    TaskState(2, "summarization", None, TaskStatus.FAILED, error="boom\nbad"),
)


def board(*events: object) -> Board:
    b = Board()
    for e in events:
        b.apply(e)  # type: ignore[arg-type]
    return b


def status(b: Board, renderer: Renderer = RENDERER) -> str:
    return renderer.status(b, MESSAGE_LIMIT)


def test_each_stage_says_what_it_does() -> None:
    assert status(Board()) == "⏳ **Reading your message**…"
    assert status(Board(opening=Opening.DOWNLOADING)) == "⏳ **Downloading your files**…"
    assert status(board(StageStarted(Stage.PLANNING))).startswith("🧠 **Reading the conversation")
    assert status(board(StageStarted(Stage.PLANNING, resumed=True))) == (
        "🧠 **Resuming where I stopped**…"
    )
    assert status(board(StageStarted(Stage.SELECTING, planned=3))) == (
        "🔎 **Choosing models for 3 tasks**…"
    )
    assert status(board(StageStarted(Stage.ANSWERING))) == "✍️ **Writing the answer**…"


def test_running_shows_the_count_and_each_task_with_model_and_icon() -> None:
    lines = status(board(StageStarted(Stage.SELECTING, planned=3), TasksChanged(TASKS))).split("\n")
    assert lines == [
        "⚙️ **Running tasks (2/3 finished)**…",
        "✅ 0. text-to-image · `acme/t2i`",
        "⏳ 1. image-to-text · `acme/i2t`",
        "❌ 2. summarization · choosing a model… — boom bad",
    ]


def test_waiting_and_queue_notices() -> None:
    slow = board(StageStarted(Stage.PLANNING), StillWaiting(Stage.PLANNING, 12.4, attempt=2))
    assert status(slow) == "🧠 **Still waiting for the language model (12 s, attempt 2)**"
    # a notice of a stage that is over is not shown
    assert "Still" not in status(board(slow_after := StillWaiting(Stage.SELECTING, 3.0)))
    assert slow_after.waited == 3.0
    assert RENDERER.notice(QueuePosition(0), MESSAGE_LIMIT) == (
        "🕒 **Queued: you're next (I'm busy with other requests)**"
    )
    assert RENDERER.notice(QueuePosition(2), MESSAGE_LIMIT) == (
        "🕒 **Queued: 2 requests ahead of you**"
    )
    assert "previous request" in RENDERER.notice(QueuePosition(0, True), MESSAGE_LIMIT)
    assert RENDERER.notice(Restarting(), MESSAGE_LIMIT).startswith("🔄 **I'm restarting")


def test_the_answer_written_so_far_is_shown_under_the_status_and_withdrawn() -> None:
    b = board(StageStarted(Stage.ANSWERING, tasks=TASKS[:1]), AnswerDelta("A fox "))
    b.apply(AnswerDelta("is a canid."))
    assert status(b).endswith("\n\nA fox is a canid.")
    assert "A fox" not in RENDERER.status(b, MESSAGE_LIMIT, with_answer=False)
    b.apply(AnswerDiscarded("broke off"))
    assert "A fox" not in status(b)
    long = board(StageStarted(Stage.ANSWERING), AnswerDelta("word " * 1000))
    assert len(status(long)) <= MESSAGE_LIMIT and status(long).endswith("…")


def test_many_tasks_stay_within_a_message() -> None:
    tasks = tuple(
        TaskState(i, "text-to-image", "m/" + "x" * 80, TaskStatus.DONE) for i in range(60)
    )
    text = status(board(TasksChanged(tasks)))
    assert len(text) <= MESSAGE_LIMIT and text.endswith("more")


def test_final_and_failed_states() -> None:
    reply = Reply("hi", tasks=(TaskRecord(0, "summarization", "acme/s", TaskStatus.DONE),))
    assert RENDERER.final(reply, 2.345, MESSAGE_LIMIT) == (
        "✅ **Done in 2.3 s**\n✅ 0. summarization · `acme/s`"
    )
    assert RENDERER.failed("no <luck>", (), MESSAGE_LIMIT) == "❌ no <luck>"
    assert RENDERER.sorry("abc123").startswith("Sorry, something went wrong on my side")
    assert "`abc123`" in RENDERER.sorry("abc123")


def test_the_terminal_prints_stage_labels_and_indented_tasks() -> None:
    text = TERMINAL.status(board(StageStarted(Stage.PLANNING), TasksChanged(TASKS[:1])), 10_000)
    assert text.split("\n") == [
        "[running] Running tasks (1/1 finished)",
        "  ✅ 0. text-to-image · acme/t2i",
    ]


def test_plan_and_models() -> None:
    preview = PlanPreview(
        (
            PlannedStep(0, "text-to-image", (), {"text": "a cat"}, "acme/t2i", "most downloaded"),
            PlannedStep(1, "image-to-text", (0,), {"image": "<resource>-0"}, None, None),
        )
    )
    text = RENDERER.plan(preview)
    assert "2 tasks" in text and "`0` **text-to-image** → `acme/t2i`" in text
    assert "`1` **image-to-text** after 0 → no model" in text and "'a cat'" in text
    assert RENDERER.plan(PlanPreview(())).endswith("I would answer this directly.")
    # a failed /plan is an error, not "no tasks needed"
    failed = PlanPreview((), status=ReplyStatus.FAILED, note="The language model is down")
    assert RENDERER.plan(failed) == "❌ The language model is down"
    models = {"summarization": [ModelChoice("acme/s", "summarization", 1234, "short")]}
    assert RENDERER.models(models) == "**summarization**\n• `acme/s` (1,234 downloads) — short"
    assert "No models" in RENDERER.models({})


def test_one_printer_for_sizes_and_seconds() -> None:
    assert [human_size(n) for n in (512, 2048, 5 * 1024 * 1024 + 1, 3 << 30)] == [
        "512 bytes",
        "2 KB",
        "5 MB",
        "3 GB",
    ]
    assert [seconds(s) for s in (0.34, 2.0, 45.2)] == ["0.3 s", "2 s", "45 s"]
