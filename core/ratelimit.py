"""Per-user request budget, so one person cannot queue unbounded model work.

A sliding one-minute window per (platform, user): cheap, in memory, per
process.  Several processes behind one store each keep their own window,
which is enough to stop a flood without a shared counter.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable


class RateLimiter:
    def __init__(self, per_minute: int, *, clock: Callable[[], float] = time.monotonic) -> None:
        self.per_minute = per_minute
        self._clock = clock
        self._seen: dict[str, deque[float]] = {}

    def check(self, who: str) -> float:
        """0 when ``who`` may go ahead now (and counts it), else the seconds to wait."""
        if self.per_minute <= 0:
            return 0.0
        now = self._clock()
        window = self._seen.setdefault(who, deque())
        while window and now - window[0] >= 60.0:
            window.popleft()
        if len(window) >= self.per_minute:
            return 60.0 - (now - window[0])
        window.append(now)
        if len(self._seen) > 10_000:  # forget idle users now and then
            self._seen = {k: v for k, v in self._seen.items() if v and now - v[-1] < 60.0}
        return 0.0
