"""The process's pools (core.threads): the bot's own work on threads of its
own, and the loop's default executor sized for the libraries' waits.

Threads are held on events and released by the test: what is asserted is
what completed while they were held, never how long anything took.
"""

from __future__ import annotations

import asyncio
import contextvars
import os
import threading
from concurrent.futures import ThreadPoolExecutor

from core.threads import WAITING_THREADS, WORK_THREADS, wait_in_many_threads, work

OLD_DEFAULT = min(32, (os.cpu_count() or 1) + 4)  # Python's default executor size
NAME = contextvars.ContextVar("NAME", default="unset")


def _thread_name() -> str:
    return threading.current_thread().name


async def test_work_runs_on_its_own_threads_when_the_default_executor_is_full() -> None:
    loop = asyncio.get_running_loop()
    loop.set_default_executor(ThreadPoolExecutor(max_workers=1))
    release = threading.Event()
    polling = loop.run_in_executor(None, release.wait)  # a provider poll, say
    NAME.set("caller's")
    try:
        async with asyncio.timeout(10):  # a bound, not a measurement: stuck otherwise
            name = await work(_thread_name)
            seen = await work(NAME.get)
            total = await work(sum, [1, 2, 3])
        assert name.startswith("work") and seen == "caller's" and total == 6
        assert not polling.done()
    finally:
        release.set()
        await polling


async def test_work_is_as_wide_as_the_old_default_executor() -> None:
    # as much decoding at once as before, no more (the memory admission's bound)
    assert WORK_THREADS._max_workers == OLD_DEFAULT


async def test_the_default_executor_has_room_for_more_waits_than_the_old_one() -> None:
    loop = asyncio.get_running_loop()
    wait_in_many_threads(loop)
    wait_in_many_threads(loop)  # once per loop: the second call keeps the first pool
    assert WAITING_THREADS > OLD_DEFAULT
    held = OLD_DEFAULT + 2
    started = threading.Semaphore(0)
    release = threading.Event()

    def poll() -> None:
        started.release()
        release.wait()

    polls = [loop.run_in_executor(None, poll) for _ in range(held)]
    try:
        async with asyncio.timeout(10):
            for _ in range(held):  # every one of them is in a thread, waiting
                await asyncio.to_thread(started.acquire)
            name = await asyncio.to_thread(_thread_name)
        assert name.startswith("waiting")
        assert not any(p.done() for p in polls)
    finally:
        release.set()
        await asyncio.gather(*polls)
