"""The boundary types' JSON: one pydantic TypeAdapter each (core.types), every
value back as it was, and the shapes stored or sent kept readable."""

from __future__ import annotations

import json
import typing
from datetime import UTC, datetime
from pathlib import Path

import pytest
from pydantic import ValidationError

from core.types import (
    EVENT_ADAPTER,
    PLAN_PREVIEW_ADAPTER,
    PLANNED_STEPS,
    REPLY_ADAPTER,
    AnswerDelta,
    AnswerDiscarded,
    DiscardReason,
    Event,
    Finished,
    PlanChange,
    PlannedStep,
    PlanNote,
    PlanPreview,
    QueuePosition,
    Reply,
    ReplyStatus,
    Resource,
    Restarting,
    Stage,
    StageStarted,
    StillWaiting,
    TaskRecord,
    TasksChanged,
    TaskState,
    TaskStatus,
    Timings,
    Usage,
)

STEPS = (
    PlannedStep(0, "text-to-image", (), {"text": "a cat"}, "acme/t2i", "most downloaded"),
    PlannedStep(1, "image-to-text", (0,), {"image": "<resource>-0"}, None, None, 2.5, 60.0, 0.0012),
)

REPLY = Reply(
    "Two cats.",
    files=(
        Resource(
            "image-1.png", "image", "image/png", Path("/m/3f/a2.png"), "3fa2", 12, "generated", 0
        ),
    ),
    tasks=(
        TaskRecord(
            0,
            "text-to-image",
            "acme/t2i",
            TaskStatus.DONE,
            started=datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC),
            ended=datetime(2026, 1, 2, 3, 4, 7, tzinfo=UTC),
            args={"text": "a cat"},
            dep=(-1,),
            reason="most downloaded",
            result={"generated image": "image-1.png", "scores": [0.5, 1]},
            files=("image-1.png",),
            backend="remote",
        ),
        TaskRecord(1, "image-to-text", None, TaskStatus.SKIPPED, error="its input failed"),
    ),
    timings=Timings(planning=1.25, total=3.5),
    usage=Usage(2, 300, 40),
    request_id="abc123",
    status=ReplyStatus.FALLBACK,
    plan_notes=(PlanNote(PlanChange.FILE, 1, "dog.png", "cat.png", "image"),),
)

TASKS = (
    TaskState(0, "text-to-image", "acme/t2i", TaskStatus.DONE),
    TaskState(1, "image-to-text", None, TaskStatus.FAILED, "timed out"),
)

EVENTS: list[Event] = [
    StageStarted(Stage.PLANNING),
    StageStarted(Stage.SELECTING, resumed=True, planned=2, tasks=TASKS),
    StillWaiting(Stage.ANSWERING, 12.5, attempt=2, tasks=TASKS),
    QueuePosition(3, conversation_busy=True),
    TasksChanged(TASKS),
    AnswerDelta("Two "),
    AnswerDiscarded(DiscardReason.ECHOED),
    Restarting(),
    Finished(REPLY),
]


def test_every_event_kind_round_trips() -> None:
    assert {type(e) for e in EVENTS} == set(typing.get_args(Event))  # every kind is here
    for event in EVENTS:
        text = EVENT_ADAPTER.dump_json(event)
        back = EVENT_ADAPTER.validate_json(text)
        assert back == event and type(back) is type(event)
        assert EVENT_ADAPTER.validate_python(EVENT_ADAPTER.dump_python(event, mode="json")) == event


def test_each_event_says_its_kind() -> None:
    kinds = {json.loads(EVENT_ADAPTER.dump_json(e))["kind"] for e in EVENTS}
    assert kinds == {
        "stage_started",
        "still_waiting",
        "queue_position",
        "tasks_changed",
        "answer_delta",
        "answer_discarded",
        "restarting",
        "finished",
    }
    assert json.loads(EVENT_ADAPTER.dump_json(AnswerDelta("hi"))) == {
        "kind": "answer_delta",
        "text": "hi",
    }
    assert repr(AnswerDelta("hi")) == "AnswerDelta(text='hi')"  # the tag is no argument


def test_an_event_of_no_known_kind_is_refused() -> None:
    with pytest.raises(ValidationError):
        EVENT_ADAPTER.validate_json(b'{"kind": "nope"}')
    with pytest.raises(ValidationError):
        EVENT_ADAPTER.validate_json(b'{"text": "no kind"}')


def test_events_still_match_by_class_and_fields() -> None:
    match EVENT_ADAPTER.validate_json(EVENT_ADAPTER.dump_json(QueuePosition(2))):
        case QueuePosition(ahead=ahead, conversation_busy=busy):
            assert (ahead, busy) == (2, False)
        case _:
            pytest.fail("not a QueuePosition")
    assert TasksChanged(TASKS).finished == 2


def test_planned_steps_round_trip() -> None:
    data = PLANNED_STEPS.dump_python(list(STEPS), mode="json")
    assert data[1] == {
        "id": 1,
        "task": "image-to-text",
        "dep": [0],
        "args": {"image": "<resource>-0"},
        "model": None,
        "reason": None,
        "typical_seconds": 2.5,
        "max_seconds": 60.0,
        "cost_usd": 0.0012,
    }
    assert tuple(PLANNED_STEPS.validate_json(PLANNED_STEPS.dump_json(list(STEPS)))) == STEPS


def test_planned_steps_stored_without_their_estimates_still_load() -> None:
    """The steps as the Discord job payload stored them before (six fields)."""
    old = [{"id": 0, "task": "t", "dep": [], "args": {"text": "x"}, "model": None, "reason": None}]
    assert PLANNED_STEPS.validate_python(old) == [
        PlannedStep(0, "t", (), {"text": "x"}, None, None)
    ]


def test_a_plan_preview_round_trips() -> None:
    for preview in (
        PlanPreview(STEPS, Usage(1, 100, 20)),
        PlanPreview((), Usage(), ReplyStatus.REFUSED, "over your quota"),
    ):
        back = PLAN_PREVIEW_ADAPTER.validate_json(PLAN_PREVIEW_ADAPTER.dump_json(preview))
        assert back == preview


def test_a_reply_round_trips() -> None:
    back = REPLY_ADAPTER.validate_json(REPLY_ADAPTER.dump_json(REPLY))
    assert back == REPLY
    assert isinstance(back.timings, Timings) and dict(back.timings) == {
        "planning": 1.25,
        "total": 3.5,
    }
    assert back.files[0].path == Path("/m/3f/a2.png")
    assert back.fallback and not back.error
