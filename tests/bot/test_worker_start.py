"""The CLI worker started on first use (bot.worker_start): an ``ask`` that ran
in its own process starts ``python -m bot serve`` for the next ones, when a
person runs it at a terminal (or CLI_WORKER_START=always); the next ask is
handed to it and prints the same object; the worker stops by itself when
idle.  Whether a command ran in the worker is read from the worker's log."""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import json
import os
import signal
import subprocess
from collections.abc import AsyncIterator
from pathlib import Path
from typing import ClassVar

import pytest

from bot import worker_client, worker_start
from tests.fakes import process_env
from tests.fakes.agent_fixture import serve_all
from tests.fakes.hf_fake import FakeHF
from tests.fakes.openai_fake import FakeLLM

WITHIN = 60.0  # a hang guard, not a duration under test
DRAW = '[{"task": "text-to-image", "id": 0, "dep": [-1], "args": {"text": "a fox"}}]'


class Terminal:
    """stdin as a person's terminal, or not."""

    def __init__(self, tty: bool) -> None:
        self.tty = tty

    def isatty(self) -> bool:
        return self.tty


def origin(**env: str) -> worker_client.Origin:
    return worker_client.Origin("/nowhere", env, None)


@pytest.mark.parametrize(
    ("value", "mode"),
    [
        (None, "auto"),
        ("always", "always"),
        ("NEVER", "never"),
        ("off", "never"),
        ("0", "never"),
        ("yes", "always"),
        ("sometimes", "auto"),
    ],
)
def test_the_setting_reads_as_auto_always_or_never(value: str | None, mode: str) -> None:
    env = {} if value is None else {"CLI_WORKER_START": value}
    assert worker_start.mode(origin(**env)) == mode


def test_auto_starts_a_worker_only_for_a_person_at_a_terminal() -> None:
    assert worker_start.wanted(origin(), Terminal(True))  # type: ignore[arg-type]
    assert not worker_start.wanted(origin(), Terminal(False))  # type: ignore[arg-type]
    assert not worker_start.wanted(origin(), None)  # a script, a test, a pipe
    always, never = origin(CLI_WORKER_START="always"), origin(CLI_WORKER_START="never")
    assert worker_start.wanted(always, Terminal(False))  # type: ignore[arg-type]
    assert not worker_start.wanted(never, Terminal(True))  # type: ignore[arg-type]


def test_a_worker_holding_the_socket_lock_is_not_started_twice(tmp_path: Path) -> None:
    sock = tmp_path / "cli.sock"
    assert not worker_start.running(sock)  # no lock file: none ever ran
    fd = os.open(tmp_path / "cli.sock.lock", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        assert not worker_start.running(sock)  # a lock nobody holds: it exited
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # as a serving (or starting) worker does
        assert worker_start.running(sock)
        env = {"CLI_WORKER_START": "always", "CLI_SOCKET": str(sock), "DATA_DIR": str(tmp_path)}
        with pytest.MonkeyPatch.context() as mp:
            for k, v in env.items():
                mp.setenv(k, v)
            assert worker_start.start() == f"a CLI worker already runs at {sock}"
    finally:
        os.close(fd)


def worker_log(data_dir: Path) -> str:
    path = data_dir / "logs" / worker_start.LOG_NAME
    return path.read_text(encoding="utf-8") if path.exists() else ""


async def logged(data_dir: Path, text: str) -> str:
    """Wait until the auto-started worker's log has a line with ``text``."""

    async def seen() -> str:
        while True:
            found = [line for line in worker_log(data_dir).splitlines() if text in line]
            if found:
                return found[0]
            await asyncio.sleep(0.05)

    try:
        return await asyncio.wait_for(seen(), WITHIN)
    except TimeoutError:
        raise AssertionError(f"no {text!r} in the worker's log:\n{worker_log(data_dir)}") from None


@pytest.fixture
async def stop_worker(tmp_path: Path) -> AsyncIterator[None]:
    """Whatever happened: SIGTERM the worker an ask started (its pid is in the lock)."""
    yield
    lock = tmp_path / "cli.sock.lock"
    with contextlib.suppress(OSError, ValueError):
        os.kill(int(lock.read_text().strip()), signal.SIGTERM)


@pytest.mark.usefixtures("stop_worker")
async def test_the_first_ask_starts_a_worker_that_the_next_ask_runs_in(
    tmp_path: Path, llm_fake: FakeLLM, hf_fake: FakeHF
) -> None:
    serve_all(hf_fake)
    # CLI_WORKER_IDLE=0 ("never") is not kept by a worker nobody started by hand
    env = process_env.fake_env(
        tmp_path, llm_fake, hf_fake, DATA_DIR=str(tmp_path), CLI_WORKER_START="always",
        CLI_WORKER_IDLE="0",
    )  # fmt: skip
    llm_fake.reply("plan", DRAW)
    code, first, err = await process_env.run_bot(
        "ask", "draw a fox", "--json", env=env, cwd=tmp_path
    )
    assert code == 0 and "worker" not in err.lower()  # nothing said of it on the terminal
    listening = await logged(tmp_path, "CLI worker listening on")
    assert "stops when idle for 1800s" in listening
    assert "started a CLI worker in the background" in (tmp_path / "logs" / "bot.log").read_text()
    assert worker_log(tmp_path).count("ask ended") == 0  # the first ran in its own process

    llm_fake.reply("plan", DRAW)
    code, second, err = await process_env.run_bot(
        "ask", "draw a fox", "--json", env=env, cwd=tmp_path
    )
    assert code == 0
    await logged(tmp_path, "CLI worker: ask ended")  # the second ran in the worker
    a, b = json.loads(first), json.loads(second)
    assert set(a) == set(b) and a["status"] == b["status"] == "answered"
    assert [t["task"] for t in a["tasks"]] == [t["task"] for t in b["tasks"]]


@pytest.mark.usefixtures("stop_worker")
async def test_a_worker_started_on_first_use_stops_by_itself_when_idle(
    tmp_path: Path, llm_fake: FakeLLM, hf_fake: FakeHF
) -> None:
    serve_all(hf_fake)
    env = process_env.fake_env(
        tmp_path, llm_fake, hf_fake, DATA_DIR=str(tmp_path), CLI_WORKER_START="always",
        CLI_WORKER_IDLE="0.5",
    )  # fmt: skip
    llm_fake.reply("plan", DRAW)
    code, _, _ = await process_env.run_bot("ask", "draw a fox", "--json", env=env, cwd=tmp_path)
    assert code == 0
    await logged(tmp_path, "CLI worker listening on")
    await logged(tmp_path, "no command for 0.5s; stopping")

    async def released() -> None:
        while True:
            if not worker_start.running(tmp_path / "cli.sock"):
                return
            await asyncio.sleep(0.05)

    await asyncio.wait_for(released(), WITHIN)


async def test_an_ask_from_a_script_starts_no_worker(
    tmp_path: Path, llm_fake: FakeLLM, hf_fake: FakeHF
) -> None:
    serve_all(hf_fake)
    env = process_env.fake_env(tmp_path, llm_fake, hf_fake, DATA_DIR=str(tmp_path))
    env.pop("CLI_WORKER_START", None)  # auto: stdin is not a terminal here
    llm_fake.reply("plan", DRAW)
    code, _, _ = await process_env.run_bot("ask", "draw a fox", "--json", env=env, cwd=tmp_path)
    assert code == 0
    assert not (tmp_path / "cli.sock.lock").exists() and worker_log(tmp_path) == ""


class Spawned:
    """subprocess.Popen as the start sees it: what it was asked to run."""

    calls: ClassVar[list[tuple[list[str], dict[str, object]]]] = []

    def __init__(self, args: list[str], **kwargs: object) -> None:
        Spawned.calls.append((args, kwargs))
        self.pid = 4242


def test_the_worker_is_started_in_a_session_of_its_own_with_this_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    logs = tmp_path / "logs"
    logs.mkdir()
    with (logs / worker_start.LOG_NAME).open("wb") as f:
        f.truncate(worker_start.LOG_MAX_BYTES + 1)  # a long-lived worker's log
    for k, v in {"CLI_WORKER_START": "always", "DATA_DIR": str(tmp_path)}.items():
        monkeypatch.setenv(k, v)
    monkeypatch.setenv("CLI_SOCKET", str(tmp_path / "cli.sock"))
    monkeypatch.delenv("CLI_WORKER_IDLE", raising=False)
    monkeypatch.setattr(subprocess, "Popen", Spawned)
    Spawned.calls.clear()
    started = worker_start.start()
    assert started == worker_start.Started(4242, logs / worker_start.LOG_NAME, "1800")
    [(args, kwargs)] = Spawned.calls
    assert args[1:] == ["-m", "bot", "serve"]
    env = kwargs["env"]
    assert isinstance(env, dict) and env["CLI_WORKER_IDLE"] == "1800"  # it stops by itself
    assert env["DATA_DIR"] == str(tmp_path) and kwargs["cwd"] == os.getcwd()
    assert kwargs["start_new_session"] is True  # not stopped by the terminal's Ctrl-C
    old = logs / (worker_start.LOG_NAME + ".1")
    assert old.stat().st_size == worker_start.LOG_MAX_BYTES + 1  # moved aside, one kept
