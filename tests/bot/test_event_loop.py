"""The event loop the bot's processes run on (bot/event_loop.py)."""

from __future__ import annotations

import asyncio
import sys

import pytest

from bot import event_loop


async def _loop_module() -> str:
    return type(asyncio.get_running_loop()).__module__


def test_the_bot_runs_on_uvloop_where_it_is_installed() -> None:
    assert event_loop.run(_loop_module()).startswith("uvloop")


def test_without_uvloop_it_runs_on_asyncios_loop(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "uvloop", None)  # as on Windows: not installed
    assert event_loop.loop_factory() is None
    assert event_loop.run(_loop_module()).startswith("asyncio")


def test_run_returns_the_result_and_closes_its_loop() -> None:
    loops: list[asyncio.AbstractEventLoop] = []

    async def main() -> int:
        loops.append(asyncio.get_running_loop())
        await asyncio.sleep(0)
        return 7

    assert event_loop.run(main()) == 7
    assert loops[0].is_closed()


async def test_the_async_tests_run_on_the_bots_loop_too() -> None:
    assert (await _loop_module()).startswith("uvloop")
