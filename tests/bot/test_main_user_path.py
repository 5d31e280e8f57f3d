"""What ``python -m bot`` does around a command for the user's path
(docs/speed.md): ``run`` and ``serve`` start every warm-up as the process
starts; an ``ask`` that ran in its own process starts the CLI worker for the
next ones and, run as a program, ends without the interpreter's teardown —
called as a function (a test, an embedding program), it returns."""

from __future__ import annotations

import argparse
from collections.abc import Iterator
from pathlib import Path

import pytest

import bot.__main__ as entry
from bot.settings import Settings, get_settings


@pytest.fixture
def quiet(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[list[str]]:
    """The command itself replaced: what happened around it, in order."""
    seen: list[str] = []
    monkeypatch.setenv("DATA_DIR", str(tmp_path))
    monkeypatch.setenv("CLI_SOCKET", str(tmp_path / "none.sock"))  # no worker to hand over to
    get_settings.cache_clear()
    monkeypatch.setattr(entry, "_setup_logging", lambda *a, **k: None)
    monkeypatch.setattr(entry, "_warm_up_early", lambda: seen.append("warm-ups"))
    monkeypatch.setattr(entry, "_start_worker", lambda: seen.append("worker"))

    async def command(args: argparse.Namespace, settings: Settings) -> int:
        seen.append(args.command)
        return int(getattr(args, "text", "0")) if args.command == "ask" else 0

    monkeypatch.setattr(entry, "_main", command)
    yield seen
    get_settings.cache_clear()


@pytest.mark.parametrize("argv", [["run", "discord"], ["serve"]])
def test_run_and_serve_start_their_warm_ups_before_the_command(
    quiet: list[str], argv: list[str]
) -> None:
    assert entry.main(argv) == 0
    assert quiet == ["warm-ups", argv[0]]


def test_an_ask_that_ran_here_starts_a_worker_and_returns_when_called(quiet: list[str]) -> None:
    assert entry.main(["ask", "0"]) == 0  # called with argv: no os._exit, it returns
    assert quiet == ["ask", "worker"]
    quiet.clear()
    assert entry.main(["ask", "1"]) == 1  # failed, but ran: the next ask may use a worker
    assert quiet == ["ask", "worker"]


def test_an_ask_stopped_by_its_configuration_starts_no_worker(quiet: list[str]) -> None:
    assert entry.main(["ask", "2"]) == 2  # the worker would stop on the same error
    assert entry.main(["ask", "130"]) == 130  # Ctrl-C: the person left
    assert quiet == ["ask", "ask"]


def test_other_commands_neither_warm_up_early_nor_start_a_worker(quiet: list[str]) -> None:
    assert entry.main(["db", "upgrade"]) == 0
    assert quiet == ["db"]
