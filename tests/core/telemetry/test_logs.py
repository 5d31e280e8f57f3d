"""LOG_FORMAT=json: one JSON object a line, with the request's context taken
from the context the agent enters at the start of a turn."""

from __future__ import annotations

import asyncio
import io
import json
import logging
import subprocess
import sys
from collections.abc import Callable, Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from core.telemetry.context import request_context
from core.telemetry.logs import STAGE_LOGGER, ContextFilter, formatter, log_stage
from core.types import ConversationKey, Request
from tests.fakes.process_env import ROOT, clean_env

log = logging.getLogger("tests.telemetry")
Lines = Callable[[], list[dict[str, Any]]]


def request(request_id: str = "abc123", user: str = "u42") -> Request:
    return Request(
        ConversationKey("discord", "g1", "c1", "t1"), user, "draw a fox", request_id=request_id
    )


@pytest.fixture
def json_lines() -> Iterator[Lines]:
    """What the JSON handler (as LOG_FORMAT=json installs it) wrote, parsed."""
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(formatter("json"))
    handler.addFilter(ContextFilter())
    loggers = [log, logging.getLogger(STAGE_LOGGER)]
    levels = [lg.level for lg in loggers]
    for lg in loggers:
        lg.addHandler(handler)
        lg.setLevel(logging.INFO)
    try:
        yield lambda: [json.loads(line) for line in stream.getvalue().splitlines()]
    finally:
        for lg, level in zip(loggers, levels, strict=True):
            lg.removeHandler(handler)
            lg.setLevel(level)


async def test_json_lines_carry_the_request_context_in_its_tasks_and_threads(
    json_lines: Lines,
) -> None:
    async def in_a_task() -> None:
        log.info("planning %d tasks", 2)

    with request_context(request()):
        log.info("turn started")
        await asyncio.create_task(in_a_task())
        await asyncio.to_thread(log.warning, "decoded in a thread")
    log.info("after the turn")

    inside, task, thread, after = json_lines()
    for line in (inside, task, thread):
        assert line["request_id"] == "abc123"
        assert line["conversation"] == "discord:g1/c1/t1"
        assert line["user"] == "u42"
        assert line["platform"] == "discord"
        assert line["server"] == "g1"
        assert line["logger"] == "tests.telemetry"
        assert datetime.fromisoformat(line["ts"]).utcoffset() is not None  # UTC, with offset
    assert (inside["level"], inside["message"]) == ("INFO", "turn started")
    assert task["message"] == "planning 2 tasks"
    assert (thread["level"], thread["message"]) == ("WARNING", "decoded in a thread")
    assert after["message"] == "after the turn"
    assert not {"request_id", "conversation", "user", "platform", "server"} & after.keys()


async def test_concurrent_turns_each_log_their_own_request(json_lines: Lines) -> None:
    async def turn(request_id: str) -> None:
        with request_context(request(request_id, user=f"user-{request_id}")):
            for step in range(3):
                log.info("%s step %d", request_id, step)
                await asyncio.sleep(0)  # let the other turn run in between

    await asyncio.gather(turn("r1"), turn("r2"))
    lines = json_lines()
    assert len(lines) == 6
    assert [line["request_id"] for line in lines] == ["r1", "r2"] * 3  # interleaved…
    for line in lines:  # …yet each line names its own request and user
        assert line["message"].startswith(line["request_id"])
        assert line["user"] == f"user-{line['request_id']}"


def test_a_stage_line_has_its_time_and_fields_as_keys(json_lines: Lines) -> None:
    with request_context(request()):
        log_stage("planning", 1.23456, tasks=3, reasked=False)
    (line,) = json_lines()
    assert line["logger"] == STAGE_LOGGER
    assert line["level"] == "INFO"
    assert line["message"] == "request abc123: planning took 1.23s tasks=3 reasked=False"
    assert line["stage"] == "planning"
    assert line["seconds"] == 1.235
    assert line["tasks"] == 3
    assert line["reasked"] is False
    assert line["request_id"] == "abc123"


def test_a_traceback_is_one_field_of_one_line(json_lines: Lines) -> None:
    try:
        raise ValueError("boom")
    except ValueError:
        log.exception("request crashed")
    (line,) = json_lines()
    assert line["message"] == "request crashed"
    assert line["level"] == "ERROR"
    assert "ValueError: boom" in line["exc_info"]


def test_text_stays_the_terminal_format() -> None:
    record = logging.LogRecord("core.agent", logging.INFO, __file__, 1, "hello %s", ("you",), None)
    text = formatter("text").format(record)
    assert text.endswith(" INFO core.agent: hello you")
    assert not text.startswith("{")


def run_bot(tmp_path: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "bot", *args],
        env=clean_env(tmp_path) | {"DATA_DIR": str(tmp_path)} | env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_the_cli_writes_json_lines_with_log_format_json(tmp_path: Path) -> None:
    done = run_bot(tmp_path, "db", "upgrade", LOG_FORMAT="json", LOG_LEVEL="INFO")
    assert done.returncode == 0, done.stderr
    lines = [json.loads(line) for line in done.stderr.splitlines() if line.strip()]
    assert lines, "INFO lines expected on stderr"
    assert all({"ts", "level", "logger", "message"} <= line.keys() for line in lines)
    assert any(line["logger"].startswith("bot") for line in lines)

    text = run_bot(tmp_path, "db", "upgrade", LOG_LEVEL="INFO")  # the default: text
    assert text.returncode == 0, text.stderr
    first = text.stderr.splitlines()[0]
    assert not first.startswith("{") and " INFO " in first


def test_an_unknown_log_format_is_refused_in_one_line(tmp_path: Path) -> None:
    done = run_bot(tmp_path, "db", "upgrade", LOG_FORMAT="yaml")
    assert done.returncode == 2
    assert done.stderr.startswith("error: invalid configuration: LOG_FORMAT")
    assert "Traceback" not in done.stderr
