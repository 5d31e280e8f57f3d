"""Shared fixtures: every module in tests/fakes/ is a pytest plugin, so a
fake server dropped there is available to all tests as a fixture."""

from __future__ import annotations

import asyncio
import signal
from collections.abc import Callable, Mapping
from pathlib import Path

import pytest

from bot import event_loop

# Fakes import each other; rewrite their asserts no matter which loads first.
pytest.register_assert_rewrite("tests.fakes")

pytest_plugins = sorted(
    f"tests.fakes.{p.stem}"
    for p in (Path(__file__).parent / "fakes").glob("*.py")
    if p.stem != "__init__" and not p.stem.startswith("test_")
)


def pytest_configure(config: pytest.Config) -> None:
    """A suite started in the background by a shell without job control (``cmd &``,
    ``nohup … &``, a CI runner's script) inherits SIGINT ignored, and so would
    every ``python -m bot`` a test starts: the Ctrl-C tests would then wait for a
    process that cannot hear them.  The suite takes Python's default back, so the
    processes it starts do too (an ignored signal stays ignored across exec; a
    handled one is reset to the default)."""
    if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


def pytest_asyncio_loop_factories(
    config: pytest.Config, item: pytest.Item
) -> Mapping[str, Callable[[], asyncio.AbstractEventLoop]]:
    """Every async test runs on the loop ``python -m bot`` runs on
    (bot/event_loop.py: uvloop's, where it is installed)."""
    factory = event_loop.loop_factory()
    return {"uvloop": factory} if factory is not None else {"asyncio": asyncio.new_event_loop}
