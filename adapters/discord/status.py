"""One status message per request, edited at most once per interval.

The pacing is :class:`adapters.throttle.LatestText`; this wrapper adds what is
Discord's: :meth:`StatusMessage.close` always renders the final state, and a
failed edit is logged and never breaks the request (the answer matters more
than the status).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

import discord

from adapters.throttle import LatestText

log = logging.getLogger(__name__)

Editor = Callable[[str], Awaitable[None]]


class StatusMessage:
    def __init__(self, edit: Editor, interval: float = 1.0, request_id: str = "") -> None:
        self._edit = edit
        self._request_id = request_id
        self._closing = False
        self._text = LatestText(self._push, interval)
        self.edits = 0

    def show(self, text: str) -> None:
        """Ask for ``text`` to be shown; returns at once (latest text wins)."""
        if not self._closing:
            self._text.offer(text)

    async def close(self, final: str) -> None:
        """Show ``final`` (respecting the interval) and stop."""
        self._closing = True
        self._text.offer(final)
        await self._text.settle()

    def cancel(self) -> None:
        """Stop without a final edit (the request itself was cancelled)."""
        self._text.cancel()

    async def _push(self, text: str) -> None:
        try:
            await self._edit(text)
            self.edits += 1
        except discord.HTTPException:
            log.warning("status edit failed request=%s", self._request_id, exc_info=True)
