"""Show the newest text at most once per interval: the status-message pacing
both platforms need.

The agent reports progress far faster than Discord or Slack allow edits, and
it must never wait on the platform.  :meth:`LatestText.offer` only records the
newest text and makes sure one background flusher runs; the flusher pushes the
latest text no sooner than ``interval`` after the previous push, skipping
intermediate states.  :meth:`LatestText.settle` waits until the newest text is
out.  ``push`` must not raise: a lost status edit is the platform wrapper's to
log, and the next state replaces it anyway.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable


class LatestText:
    def __init__(self, push: Callable[[str], Awaitable[None]], interval: float) -> None:
        self._push = push
        self._interval = interval
        self._shown: str | None = None
        self._latest: str | None = None
        self._last_push = float("-inf")
        self._flusher: asyncio.Task[None] | None = None

    def mark_shown(self, text: str) -> None:
        """``text`` is on screen already (just posted): pace from now."""
        self._shown = self._latest = text
        self._last_push = time.monotonic()

    def offer(self, text: str) -> None:
        """Ask for ``text`` to be shown; returns at once (the newest text wins)."""
        self._latest = text
        if self._flusher is None and text != self._shown:
            self._flusher = asyncio.create_task(self._flush(), name="status-flush")

    async def settle(self) -> None:
        """Wait until the newest offered text has been pushed."""
        if self._flusher is not None:
            await asyncio.shield(self._flusher)

    def cancel(self) -> None:
        """Drop a pending push (the request itself was cancelled)."""
        if self._flusher is not None:
            self._flusher.cancel()

    async def aclose(self) -> None:
        """Cancel a pending push and wait for it to stop."""
        if self._flusher is not None:
            self._flusher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._flusher

    async def _flush(self) -> None:
        try:
            while self._latest is not None and self._latest != self._shown:
                wait = self._last_push + self._interval - time.monotonic()
                if wait > 0:
                    await asyncio.sleep(wait)  # rate limit, not synchronisation
                text = self._latest
                self._last_push = time.monotonic()
                await self._push(text)
                self._shown = text
        finally:
            self._flusher = None
