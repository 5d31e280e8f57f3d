"""How status is shown: one status message per request, edited at most once
per interval, the newest state winning.

The agent reports progress (and the answer, word by word) far faster than
Discord or Slack allow edits, and it must never wait on the platform.
:meth:`StatusMessage.show` only records the newest text and makes sure one
background flusher runs; the flusher pushes the latest text no sooner than
``interval`` after the previous push, skipping the states in between.
:meth:`StatusMessage.close` always shows the final text and waits until it
is out.  A failed edit is logged and never breaks the request (the answer
matters more than the status; the next state replaces it anyway).

With an interval of 0 (the terminal) every state is shown, in order, at once.
Time comes from an injectable :class:`~core.clock.Clock` (its ``monotonic``), so
tests check the pacing on a fake clock.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

from adapters.chat.surface import MONOTONIC, Clock, Surface

log = logging.getLogger(__name__)


class StatusMessage:
    def __init__(
        self,
        surface: Surface,
        *,
        interval: float,
        clock: Clock = MONOTONIC,
        request_id: str = "",
    ) -> None:
        self._surface = surface
        self._interval = interval
        self._clock = clock
        self._request_id = request_id
        self._opened = False
        self._closing = False
        self._shown: str | None = None
        self._latest: str | None = None
        self._last_push = float("-inf")
        self._flusher: asyncio.Task[None] | None = None
        self.edits = 0

    @property
    def opened(self) -> bool:
        return self._opened

    async def open(self, text: str) -> None:
        """Post the status message (raises when the platform refuses: then
        there is nowhere to show the turn)."""
        await self._surface.post_status(text)
        self._opened = True
        self._shown = self._latest = text
        self._last_push = self._clock.monotonic()

    async def show(self, text: str) -> None:
        """Ask for ``text`` to be shown; returns at once (the newest text wins)."""
        if not self._closing and self._opened:
            await self._offer(text)

    async def close(self, text: str) -> None:
        """Show ``text`` as the final state (respecting the interval) and wait
        until it is out.  A status never posted is posted now instead."""
        self._closing = True
        if not self._opened:
            try:
                await self._surface.post_status(text)
            except Exception:  # the platform refused twice: the log is all that is left
                log.exception("request %s: could not show %r", self._request_id, text)
            return
        await self._offer(text)
        if self._flusher is not None:
            await asyncio.shield(self._flusher)

    async def _offer(self, text: str) -> None:
        if self._interval <= 0:  # every state, in order, at once
            if text != self._shown:
                await self._push(text)
            return
        self._latest = text
        if self._flusher is None and text != self._shown:
            self._flusher = asyncio.create_task(self._flush(), name="status-flush")

    def cancel(self) -> None:
        """Stop without a final edit (the request itself was stopped)."""
        self._closing = True
        if self._flusher is not None:
            self._flusher.cancel()

    async def aclose(self) -> None:
        """Drop a pending edit (the request itself was stopped) and wait for it."""
        self._closing = True
        if self._flusher is not None:
            self._flusher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._flusher

    async def _flush(self) -> None:
        try:
            while self._latest is not None and self._latest != self._shown:
                wait = self._last_push + self._interval - self._clock.monotonic()
                if wait > 0:
                    await self._clock.sleep(wait)  # rate limit, not synchronisation
                text = self._latest
                self._last_push = self._clock.monotonic()
                await self._push(text)
        finally:
            self._flusher = None

    async def _push(self, text: str) -> None:
        try:
            await self._surface.edit_status(text)
            self.edits += 1
        except Exception as exc:  # a lost edit must not fail the turn
            log.warning(
                "request %s: status edit failed: %s: %s",
                self._request_id,
                type(exc).__name__,
                exc,
            )
        self._shown = text
