"""The one fake :class:`core.clock.Clock` (the core's and the adapters' status pacing).

By default time stands still until something moves it: ``advance(s)`` or
``await sleep(s)`` moves it on by ``s`` at once (``sleep`` also yields to the
loop), so paced code runs at full speed and the test reads, in clock time,
when each thing happened (``t``: how far it moved; ``sleeps``: each wait).
``now()`` is ``wall`` plus that; ``monotonic()`` is that (or, while any
are left, the next of ``readings``: a stopwatch's start and end).

Two knobs for code that shares time with real processes (job leases):
``wall=None`` makes ``now()`` the real time plus what ``advance`` moved, and
``real_monotonic=True`` makes ``monotonic()`` and ``sleep`` the real ones, so
a job queue's heartbeats and surveys still run while a lease is made to
expire.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterable
from datetime import UTC, datetime


class FakeClock:
    def __init__(
        self,
        wall: float | None = 0.0,
        *,
        real_monotonic: bool = False,
        readings: Iterable[float] = (),
    ) -> None:
        self.t = 0.0
        self.sleeps: list[float] = []
        self._wall = wall
        self._real_monotonic = real_monotonic
        self._readings = list(readings)

    def now(self) -> float:
        return (time.time() if self._wall is None else self._wall) + self.t

    def monotonic(self) -> float:
        if self._readings:
            return self._readings.pop(0)
        return time.monotonic() if self._real_monotonic else self.t

    def utc(self) -> datetime:
        """``now()`` as the store keeps times."""
        return datetime.fromtimestamp(self.now(), UTC)

    def advance(self, seconds: float) -> None:
        self.t += seconds

    async def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        if self._real_monotonic:
            await asyncio.sleep(seconds)
            return
        self.t += max(0.0, seconds)
        await asyncio.sleep(0)


# The name the adapters' pacing tests know it by.
PacingClock = FakeClock
