"""A fake clock for the status pacing (:class:`adapters.chat.surface.Clock`).

Time stands still until something sleeps on it: ``sleep(s)`` moves it on by
``s`` at once (and yields to the loop), so paced code runs at full speed and
the test reads, in clock time, when each edit was made and how far apart.
"""

from __future__ import annotations

import asyncio


class PacingClock:
    def __init__(self) -> None:
        self.t = 0.0
        self.sleeps: list[float] = []

    def now(self) -> float:
        return self.t

    async def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.t += max(0.0, seconds)
        await asyncio.sleep(0)
