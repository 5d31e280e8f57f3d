"""The event loop every ``python -m bot`` process runs on: uvloop's.

uvloop (libuv under asyncio's own interface) runs the same coroutines,
transports and futures as asyncio's pure-Python loop, with its scheduling,
timers and socket reads in C.  A request through the job queue spent about
9 % fewer instructions on it one at a time and 6 % fewer in a burst of 50
(callgrind, ``benchmarks.concurrency_cpu``; ``docs/speed.md``).  Every
library the bot uses runs on it: aiohttp, asyncpg (written for it), the
SQLite driver's thread hand-offs (``call_soon_threadsafe``), discord.py,
slack-bolt.

uvloop does not build on Windows, so the dependency is not installed there
and the bot runs on asyncio's loop.  The benchmarks that measure the bot in
their own process (``benchmarks.concurrency_worker``, ``concurrency_cpu``,
``request_floor``'s replay, ``python -m benchmarks``) run on this loop too.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


def loop_factory() -> Callable[[], asyncio.AbstractEventLoop] | None:
    """uvloop's ``new_event_loop`` where it is installed, else None (asyncio's)."""
    try:
        import uvloop
    except ImportError:
        return None
    return uvloop.new_event_loop


def run(main: Coroutine[Any, Any, T]) -> T:
    """``asyncio.run(main)`` on the bot's event loop (see the module docstring)."""
    with asyncio.Runner(loop_factory=loop_factory()) as runner:  # None: as asyncio.run
        return runner.run(main)
