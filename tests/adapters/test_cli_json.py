"""``ask --json``'s object for a reply (``adapters.cli_json.reply_json``),
made from the reply's JSON (``core.types.REPLY_ADAPTER``): its shape."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

from adapters import cli_json
from core.types import Reply, ReplyStatus, Resource, TaskRecord, TaskStatus, Timings, Usage

STARTED = datetime(2026, 1, 2, 3, 4, 5, 250000, tzinfo=UTC)


def test_a_reply_as_ask_json_prints_it(tmp_path: Path) -> None:
    reply = Reply(
        "A cat.",
        files=(
            Resource("image-1.png", "image", "image/png", tmp_path / "a.png", "ab", 3, "generated"),
        ),
        tasks=(
            TaskRecord(
                0,
                "text-to-image",
                "acme/t2i",
                TaskStatus.DONE,
                started=STARTED,
                ended=STARTED,
                args={"text": "a cat"},
                result={"generated image": "image-1.png"},
                backend="remote",
            ),
            TaskRecord(1, "image-to-text", None, TaskStatus.SKIPPED, error="its input failed"),
        ),
        timings=Timings(planning=0.5, total=2.0),
        usage=Usage(3, 200, 30),
        request_id="r1",
        status=ReplyStatus.FALLBACK,
    )
    data = json.loads(cli_json.line(cli_json.reply_json(reply)))
    started = data["tasks"][0].pop("started")
    assert datetime.fromisoformat(started) == STARTED
    assert datetime.fromisoformat(data["tasks"][0].pop("ended")) == STARTED
    assert data == {
        "answer": "A cat.",
        "status": "fallback",
        "error": True,  # the answer stage failed
        "message": None,
        "fallback": True,
        "request_id": "r1",
        "tasks": [
            {
                "id": 0,
                "task": "text-to-image",
                "model": "acme/t2i",
                "backend": "remote",
                "status": "done",
                "error": None,
            },
            {
                "id": 1,
                "task": "image-to-text",
                "model": None,
                "backend": None,
                "status": "skipped",
                "started": None,
                "ended": None,
                "error": "its input failed",
            },
        ],
        "files": [str((tmp_path / "a.png").resolve())],
        "usage": {"llm_calls": 3, "prompt_tokens": 200, "completion_tokens": 30},
        "timings": {"planning": 0.5, "total": 2.0},
    }


def test_a_reply_and_an_outcome_have_the_same_keys() -> None:
    reply = cli_json.reply_json(Reply("hi"))
    assert reply.keys() == cli_json.outcome_json(cli_json.ERROR, "no").keys()
    assert reply["status"] == "answered" and reply["error"] is False and reply["tasks"] == []
