"""A request's state as its checkpoint: one pydantic model, read back as it was
written; files by path inside the media root; a first-version checkpoint
(hand-written JSON, tests/data/checkpoints/v1.json, made by that code) still read."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import pytest
from pydantic import ValidationError

from adapters.chat.messages import task_error_text
from core.catalog import ModelInfo
from core.errors import TaskCode
from core.execution import TaskOutcome
from core.planning import PlannedTask
from core.results import Blob, Box, Label, Segment, TaskResult
from core.store.media import MediaStore
from core.turn_state import TurnState, dump_state, load_state, without_bytes
from core.types import (
    Reply,
    ReplyStatus,
    Resource,
    TaskError,
    TaskRecord,
    TaskStatus,
    Timings,
    Usage,
)

DATA = Path(__file__).resolve().parents[1] / "data" / "checkpoints"


def media() -> MediaStore:
    return MediaStore(Path("/tmp/mediaroot"))


def resource(handle: str, rel: str, source: str = "upload") -> Resource:
    return Resource(handle, "image", "image/png", media().path(rel), "ab", 3, source)


def state() -> TurnState:
    gen = resource("image-1.png", "ef/01/ef01.png", "generated")
    s = TurnState(
        uploads=[resource("photo.png", "ab/cd/abcd.png")],
        plan=[PlannedTask(0, "object-detection", [], {"image": "photo.png"})],
        generated=[gen],
        usage=Usage(2, 100, 20),
        timings={"planning": 1.5},
        reply=Reply(
            "two cats",
            files=(gen,),
            tasks=(TaskRecord(0, "object-detection", "m", TaskStatus.DONE, result={"n": 2}),),
            timings=Timings.of({"total": 3.0}),
            usage=Usage(3, 150, 40),
            request_id="abc",
            status=ReplyStatus.FALLBACK,
        ),
    )
    s.finished(
        TaskOutcome(
            0,
            "object-detection",
            TaskStatus.DONE,
            ModelInfo("m", "object-detection"),
            started=datetime(2026, 1, 1, tzinfo=UTC),
            result=TaskResult(
                labels=(Label("cat", 0.9),),
                boxes=(Box("cat", 0.9, 1, 2, 3, 4),),
                segments=(Segment("cat", None, b"\x89PNG\xff"),),
                media=(Blob("image", "image/png", b"bytes", "image-1.png"),),
            ),
        )
    )
    return s


def test_a_state_is_read_back_as_it_was_written() -> None:
    s = state()
    data = dump_state(s, media())
    json.dumps(data)  # plain JSON, as the job's row stores it
    assert data["v"] == 2
    assert data["uploads"][0]["path"] == "ab/cd/abcd.png"  # relative to the media root
    assert data["paths"] == ["ab/cd/abcd.png", "ef/01/ef01.png"]  # what pruning keeps
    assert "bytes" not in json.dumps(data)  # a task's media by handle, never its bytes
    assert load_state(data, media()) == s


def test_a_finished_tasks_media_is_kept_by_handle() -> None:
    o = state().outcomes[0]
    assert o.result is not None
    assert o.result.media == (Blob("image", "image/png", b"", "image-1.png"),)
    assert without_bytes(o) is o


def test_a_file_outside_the_media_root_is_refused() -> None:
    data = dump_state(state(), media())
    data["uploads"][0]["path"] = "../../etc/passwd"
    with pytest.raises((ValidationError, ValueError)):
        load_state(data, media())


def test_nothing_or_an_unknown_version_starts_over() -> None:
    assert load_state(None, media()) == TurnState()
    assert load_state({"v": 99, "plan": []}, media()) == TurnState()


def test_a_first_version_checkpoint_is_read() -> None:
    s = load_state(json.loads((DATA / "v1.json").read_text()), media())
    assert s.started and s.uploads is not None
    assert s.uploads[0].path == media().path("ab/cd/abcd.png")
    assert s.plan == [PlannedTask(0, "object-detection", [], {"image": "photo.png"})]
    assert s.selections[0].model == "facebook/detr" and s.selections[0].by_llm
    o = s.outcomes[0]
    assert o.model is not None and o.model.id == "facebook/detr"
    assert o.status is TaskStatus.DONE and o.started == datetime(2026, 1, 1, tzinfo=UTC)
    assert o.result is not None
    assert o.result.labels == (Label("cat", 0.9),)
    assert o.result.boxes == (Box("cat", 0.9, 1, 2, 3, 4),)
    assert o.result.segments[0].mask == b"\x89PNG"
    assert o.result.media == (Blob("image", "image/png", b"", "image-1.png"),)
    assert o.result.extra == {"k": [1]}
    assert s.usage == Usage(2, 100, 20) and s.timings == {"planning": 1.5}
    assert s.reply is not None
    assert s.reply.status is ReplyStatus.ANSWERED and s.reply.request_id == "abc123"
    assert s.reply.tasks[0].files == ("image-1.png",)
    assert s.reply.files[0].path == media().path("ef/01/ef01.png")


def test_a_first_version_reply_with_flags_has_a_status() -> None:
    old = {"v": 1, "reply": {"text": "x", "error": True}}
    reply = load_state(old, media()).reply
    assert reply is not None and reply.status is ReplyStatus.FAILED
    old = {"v": 1, "reply": {"text": "x", "fallback": True}}
    reply = load_state(old, media()).reply
    assert reply is not None and reply.status is ReplyStatus.FALLBACK


def failed_outcome() -> TaskOutcome:
    out = TaskOutcome(0, "translation", model=ModelInfo("m/a", "translation"))
    out.fail(
        TaskStatus.FAILED,
        [
            TaskError(TaskCode.TIMED_OUT, {"model": "m/a", "seconds": 0.5}),
            TaskError(
                TaskCode.PROVIDER_NOT_SERVING,
                {"model": "m/b", "provider": "p", "task": "translation", "choices": ("x", "y")},
            ),
        ],
    )
    return out


def test_a_failed_tasks_errors_are_kept_as_data() -> None:
    s = TurnState()
    s.finished(failed_outcome())
    again = load_state(json.loads(json.dumps(dump_state(s, media()))), media())
    o = again.outcomes[0]
    assert [(e.code, e.fields) for e in o.errors] == [
        (TaskCode.TIMED_OUT, {"model": "m/a", "seconds": 0.5}),
        (
            TaskCode.PROVIDER_NOT_SERVING,
            {"model": "m/b", "provider": "p", "task": "translation", "choices": ["x", "y"]},
        ),
    ]
    # the terse form, for logs and the language model
    assert o.error == (
        "timed_out model='m/a' seconds=0.5; provider_not_serving model='m/b' provider='p' "
        "task='translation' choices=('x', 'y')"
    )
    assert o.state().errors == o.errors
    assert task_error_text(o.state()) == (  # what a person reads, worded by the adapters
        "model m/a timed out after 0.5 s; m/b is not served by p for translation "
        "(its providers: x, y)"
    )


def test_a_checkpoint_whose_task_failed_with_a_sentence_still_reads() -> None:
    """A checkpoint written before tasks' errors were data: the sentence is
    its error, shown as it is; no errors."""
    data = dump_state(TurnState(), media())
    data["outcomes"] = {
        "0": {
            "id": 0,
            "task": "translation",
            "status": "failed",
            "model": "m/a",
            "error": "model m/a timed out after 30 s",
        }
    }
    data["reply"] = {
        "text": "x",
        "tasks": [
            {
                "id": 0,
                "task": "translation",
                "model": "m/a",
                "status": "failed",
                "error": "model m/a timed out after 30 s",
            }
        ],
        "status": "fallback",
    }
    s = load_state(data, media())
    o = s.outcomes[0]
    assert (o.status, o.errors) == (TaskStatus.FAILED, ())
    assert task_error_text(o.state()) == "model m/a timed out after 30 s"
    assert s.reply is not None
    assert task_error_text(s.reply.tasks[0]) == "model m/a timed out after 30 s"
