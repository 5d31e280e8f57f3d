"""One status message per request, edited at most once per interval.

The agent reports progress as fast as it likes; :meth:`StatusMessage.show`
only records the latest text, and one background task pushes it to Discord
no more often than the interval allows (skipping intermediate states).
:meth:`StatusMessage.close` always renders the final state.  A failed edit is
logged and never breaks the request: the answer matters more than the status.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable

import discord

log = logging.getLogger(__name__)

Editor = Callable[[str], Awaitable[None]]


class StatusMessage:
    def __init__(self, edit: Editor, interval: float = 1.0, request_id: str = "") -> None:
        self._edit = edit
        self._interval = interval
        self._request_id = request_id
        self._wanted: str | None = None
        self._shown: str | None = None
        self._last_edit = float("-inf")
        self._dirty = asyncio.Event()
        self._closing = False
        self._task: asyncio.Task[None] | None = None
        self.edits = 0

    def show(self, text: str) -> None:
        """Ask for ``text`` to be shown; returns at once (latest text wins)."""
        if self._closing:
            return
        self._wanted = text
        self._dirty.set()
        if self._task is None:
            self._task = asyncio.create_task(self._pump(), name="discord-status")

    async def close(self, final: str) -> None:
        """Show ``final`` (respecting the interval) and stop."""
        self._wanted = final
        self._closing = True
        self._dirty.set()
        if self._task is None:
            self._task = asyncio.create_task(self._pump(), name="discord-status")
        await self._task

    def cancel(self) -> None:
        """Stop without a final edit (the request itself was cancelled)."""
        if self._task is not None:
            self._task.cancel()

    async def _pump(self) -> None:
        while True:
            await self._dirty.wait()
            wait = self._last_edit + self._interval - time.monotonic()
            if wait > 0:
                await asyncio.sleep(wait)  # rate limit, not synchronisation
            self._dirty.clear()
            text = self._wanted
            if text is not None and text != self._shown:
                self._last_edit = time.monotonic()
                try:
                    await self._edit(text)
                    self._shown = text
                    self.edits += 1
                except discord.HTTPException:
                    log.warning("status edit failed request=%s", self._request_id, exc_info=True)
            if self._closing and not self._dirty.is_set():
                return
