"""The one capped downloader for people's attachments.

Each platform decides *whether* a URL may be fetched (its own hosts only)
and with which headers; this reads it without ever holding more than the
cap: a declared ``Content-Length`` over it is refused before the body, and
the stream is cut the moment it grows past it (declared sizes may lie).
Every failure is an :class:`~core.errors.InputRejected` with a code (worded
in :mod:`adapters.chat.messages`); the bytes are checked again by the agent before being trusted.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping, Sequence
from urllib.parse import urljoin, urlsplit

import aiohttp

from adapters.chat.at_once import at_once
from adapters.chat.messages import ChatCode
from core.errors import ErrorCode, InputRejected
from core.types import Attachment

CHUNK = 64 * 1024
MAX_REDIRECTS = 5
_REDIRECTS = frozenset({301, 302, 303, 307, 308})


def too_large(name: str, size: int | None, cap: int) -> InputRejected:
    """``name`` is over ``cap`` bytes (``size``: None when only the stream said so)."""
    if size is None:
        return InputRejected(ErrorCode.FILE_TOO_LARGE, file=name, limit=cap)
    return InputRejected(ErrorCode.FILE_TOO_LARGE, file=name, size=size, limit=cap)


async def fetch_capped(
    session: aiohttp.ClientSession,
    url: str,
    *,
    name: str,
    cap: int,
    source: str,
    seconds: float,
    headers: Callable[[str], Mapping[str, str]] | None = None,
    may_follow: Callable[[str], bool] | None = None,
) -> tuple[bytes, str]:
    """GET ``url`` reading at most ``cap`` bytes within ``seconds``: (the
    body, the served content type).  ``source`` names the platform in
    messages; ``headers(url)`` the headers a URL may be sent (a token only
    to the platform's own hosts).  A redirect is followed only where
    ``may_follow`` allows (at most :data:`MAX_REDIRECTS`), checked before
    anything is sent there; without it, none is."""
    try:
        async with asyncio.timeout(seconds):
            return await _fetch(session, url, name, cap, source, headers, may_follow)
    except (aiohttp.ClientError, TimeoutError) as exc:
        raise InputRejected(ChatCode.DOWNLOAD_FAILED, file=name, source=source) from exc


async def _fetch(
    session: aiohttp.ClientSession,
    url: str,
    name: str,
    cap: int,
    source: str,
    headers: Callable[[str], Mapping[str, str]] | None,
    may_follow: Callable[[str], bool] | None,
) -> tuple[bytes, str]:
    for _ in range(MAX_REDIRECTS + 1):
        sent = dict(headers(url)) if headers is not None else {}
        async with session.get(url, headers=sent, allow_redirects=False) as response:
            location = response.headers.get("Location")
            if response.status in _REDIRECTS and location and may_follow is not None:
                url = urljoin(url, location)
                if not may_follow(url):
                    host = urlsplit(url).hostname or "?"
                    raise InputRejected(
                        ChatCode.REDIRECTED_AWAY, file=name, source=source, host=host
                    )
                continue
            if response.status != 200:
                raise InputRejected(
                    ChatCode.DOWNLOAD_FAILED, file=name, source=source, status=response.status
                )
            if response.content_length is not None and response.content_length > cap:
                raise too_large(name, response.content_length, cap)
            data = bytearray()
            async for chunk in response.content.iter_chunked(CHUNK):
                data.extend(chunk)
                if len(data) > cap:
                    raise too_large(name, None, cap)
            return bytes(data), (response.content_type or "").lower()
    raise InputRejected(ChatCode.TOO_MANY_REDIRECTS, file=name, source=source)


async def download_all(downloads: Sequence[Awaitable[Attachment]]) -> tuple[Attachment, ...]:
    """Every download at once, in order; the first refusal cancels the rest
    and is raised."""
    return tuple(await at_once(downloads, first=InputRejected))
