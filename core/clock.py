"""Time, as one object every part that reads or waits on it is given.

A :class:`Clock` tells the wall time (``now``: seconds since the epoch, for
what is stored or compared across processes: quota windows, job leases), the
monotonic time (``monotonic``: for intervals within this process: budgets,
caches, pacing) and waits (``sleep``).  :data:`SYSTEM_CLOCK` is the real one;
tests hand in ``tests.fakes.clock.FakeClock`` instead, so nothing waits for
real time to pass.
"""

from __future__ import annotations

import asyncio
import time
from datetime import UTC, datetime
from typing import Protocol


class Clock(Protocol):
    def now(self) -> float:
        """Wall time: seconds since the epoch (``time.time``)."""
        ...

    def monotonic(self) -> float:
        """Seconds on a clock that never goes back (``time.monotonic``)."""
        ...

    async def sleep(self, seconds: float) -> None:
        """Wait ``seconds`` (``asyncio.sleep``)."""
        ...


class SystemClock:
    """The real time."""

    def now(self) -> float:
        return time.time()

    def monotonic(self) -> float:
        return time.monotonic()

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(seconds)


SYSTEM_CLOCK = SystemClock()


def utc(clock: Clock) -> datetime:
    """``clock``'s wall time as an aware UTC datetime (what the store keeps)."""
    return datetime.fromtimestamp(clock.now(), UTC)
