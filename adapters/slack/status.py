"""One status message per request, edited at most once per interval.

The agent reports progress far faster than Slack allows edits (``chat.update``
is rate-limited per channel), and it must never wait on Slack.  So
:meth:`StatusMessage.show` only records the newest text and makes sure a
single background flusher is running; the flusher edits the message with the
latest text no sooner than ``interval`` after the previous edit, and
:meth:`StatusMessage.finish` waits for the final text to be on screen.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time

import aiohttp
from slack_sdk.errors import SlackApiError, SlackClientError
from slack_sdk.web.async_client import AsyncWebClient

log = logging.getLogger(__name__)


class StatusMessage:
    def __init__(
        self,
        client: AsyncWebClient,
        channel: str,
        thread_ts: str | None,
        *,
        interval: float = 1.0,
        request_id: str = "",
    ) -> None:
        self._client = client
        self._channel = channel
        self._thread_ts = thread_ts
        self._interval = interval
        self._request_id = request_id
        self.ts: str | None = None
        self._shown: str | None = None
        self._latest: str | None = None
        self._last_edit = 0.0
        self._flusher: asyncio.Task[None] | None = None

    async def start(self, text: str) -> None:
        """Post the message (the one call that may raise: no status, no turn)."""
        response = await self._client.chat_postMessage(
            channel=self._channel, thread_ts=self._thread_ts, text=text, unfurl_links=False
        )
        self.ts = response["ts"]
        self._shown = self._latest = text
        self._last_edit = time.monotonic()

    async def show(self, text: str) -> None:
        """Schedule ``text`` to be shown; returns at once."""
        self._latest = text
        if self.ts is not None and self._flusher is None and text != self._shown:
            self._flusher = asyncio.create_task(self._flush())

    async def finish(self, text: str) -> None:
        """Show ``text`` as the final state and wait until it is on screen."""
        self._latest = text
        if self.ts is None:
            # The status was never posted: say it as a plain message instead.
            await self._post_plain(text)
            return
        if self._flusher is None and text != self._shown:
            self._flusher = asyncio.create_task(self._flush())
        if self._flusher is not None:
            await asyncio.shield(self._flusher)

    async def aclose(self) -> None:
        """Stop a pending edit (used when the turn is cancelled)."""
        if self._flusher is not None:
            self._flusher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._flusher

    async def _flush(self) -> None:
        try:
            while self._latest is not None and self._latest != self._shown:
                wait = self._last_edit + self._interval - time.monotonic()
                if wait > 0:
                    await asyncio.sleep(wait)
                text = self._latest
                self._last_edit = time.monotonic()
                await self._edit(text)
                self._shown = text
        finally:
            self._flusher = None

    async def _edit(self, text: str) -> None:
        try:
            await self._client.chat_update(channel=self._channel, ts=self.ts, text=text)
        except (SlackApiError, SlackClientError, aiohttp.ClientError, TimeoutError) as exc:
            # A lost status edit must not fail the turn; the next state replaces it.
            log.warning("slack request %s: status edit failed: %s", self._request_id, exc)

    async def _post_plain(self, text: str) -> None:
        try:
            await self._client.chat_postMessage(
                channel=self._channel, thread_ts=self._thread_ts, text=text
            )
        except (SlackApiError, SlackClientError, aiohttp.ClientError, TimeoutError) as exc:
            log.error("slack request %s: could not post %r: %s", self._request_id, text, exc)
