"""Download the files a user shared with a message, safely.

Slack serves ``url_private`` only with ``Authorization: Bearer <bot token>``;
without the ``files:read`` scope (or the header) it answers ``200`` with its
HTML login page, which a naive bot would hand on as "the image".  So: the
token goes only to Slack's own hosts, the declared size is checked before
the download and the stream is capped after, and bytes that sniff as HTML
are an error that says how to fix the app's scopes.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any

import aiohttp

from adapters.slack.config import SlackConfig
from core.errors import InputRejected
from core.mediatypes import sniff
from core.types import Attachment

log = logging.getLogger(__name__)

_CHUNK = 64 * 1024


def _size_text(n: int) -> str:
    for unit, scale in (("GB", 1 << 30), ("MB", 1 << 20), ("KB", 1 << 10)):
        if n >= scale:
            return f"{n / scale:.1f}".removesuffix(".0") + f" {unit}"
    return f"{n} bytes"


async def download_files(
    files: Sequence[Mapping[str, Any]],
    config: SlackConfig,
    session: aiohttp.ClientSession | None = None,
) -> tuple[Attachment, ...]:
    """Fetch every shared file; raise :class:`InputRejected` (a message for
    the user) on the first one that is too large, unreachable or not what it
    claims to be."""
    if not files:
        return ()
    timeout = aiohttp.ClientTimeout(total=config.download_timeout)
    own = session is None
    session = session or aiohttp.ClientSession(timeout=timeout)
    try:
        return tuple([await download_file(session, f, config) for f in files])
    finally:
        if own:
            await session.close()


async def download_file(
    session: aiohttp.ClientSession, file: Mapping[str, Any], config: SlackConfig
) -> Attachment:
    name = str(file.get("name") or file.get("title") or file.get("id") or "file")
    declared = str(file.get("mimetype") or "application/octet-stream")
    if file.get("mode") == "external" or file.get("is_external"):
        raise InputRejected(f"{name} is a link to an external service; upload the file itself")
    size = file.get("size")
    cap = config.max_file_bytes
    if isinstance(size, int) and size > cap:
        raise InputRejected(f"{name} is {_size_text(size)}; the limit is {_size_text(cap)}")
    url = file.get("url_private_download") or file.get("url_private")
    if not url:
        raise InputRejected(f"{name} can't be downloaded (Slack sent no file URL)")
    if not config.may_send_token_to(url):
        raise InputRejected(f"{name} is not hosted by Slack, so it was not downloaded")

    headers = {"Authorization": f"Bearer {config.bot_token}"}
    try:
        async with session.get(url, headers=headers, allow_redirects=True) as response:
            if response.status != 200:
                raise InputRejected(
                    f"{name} could not be downloaded from Slack (HTTP {response.status})"
                )
            length = response.content_length
            if length is not None and length > cap:
                raise InputRejected(
                    f"{name} is {_size_text(length)}; the limit is {_size_text(cap)}"
                )
            data = await _read_capped(response, cap, name)
            served = (response.content_type or "").lower()
    except aiohttp.ClientError as exc:
        log.warning("slack file %s: download failed: %s", file.get("id"), exc)
        raise InputRejected(f"{name} could not be downloaded from Slack") from exc

    found = sniff(data)
    if declared != "text/html" and (
        (found is not None and found.mime == "text/html") or served == "text/html"
    ):
        raise InputRejected(
            f"Slack sent a web page instead of {name}: the app is missing the "
            "`files:read` scope. Ask a workspace admin to add it and reinstall the app."
        )
    mime = found.mime if found is not None and found.mime != "text/plain" else declared
    return Attachment(name=name, mime=mime, data=data)


async def _read_capped(response: aiohttp.ClientResponse, cap: int, name: str) -> bytes:
    """Read the body, refusing as soon as it grows past ``cap``."""
    buf = bytearray()
    async for chunk in response.content.iter_chunked(_CHUNK):
        buf += chunk
        if len(buf) > cap:
            raise InputRejected(f"{name} is larger than the limit of {_size_text(cap)}")
    return bytes(buf)
