"""Download the files a user shared with a message, safely.

Slack serves ``url_private`` only with ``Authorization: Bearer <bot token>``;
without the ``files:read`` scope (or the header) it answers ``200`` with its
HTML login page, which a naive bot would hand on as "the image".  So: the
token goes only to Slack's own hosts, the declared size is checked before
the download and the stream is capped after, and bytes that sniff as HTML
are an error that says how to fix the app's scopes.

Redirects are followed by hand, and only to Slack's own hosts
(``slack.com`` and its subdomains such as ``files.slack.com``, the
``*.slack-edge.com`` CDN, or the configured API base for a proxy or the
test fake), at most :data:`MAX_REDIRECTS` of them: a file URL that sends
the download anywhere else is refused, never fetched, and the token goes
only where :meth:`SlackConfig.may_send_token_to` allows.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Any
from urllib.parse import urlsplit

import aiohttp

from adapters.chat.download import MAX_REDIRECTS, fetch_capped, too_large
from adapters.chat.messages import ChatCode
from adapters.slack.config import SlackConfig
from core.errors import InputRejected
from core.types import Attachment

log = logging.getLogger(__name__)

__all__ = ["MAX_REDIRECTS", "download_file", "download_files", "may_follow"]

# What the bytes' magic says they are (``core.media_files.sniff_mime``): a MIME type or None.
Sniff = Callable[[bytes], str | None]
_HTML = (b"<!doctype html", b"<html")


def may_follow(url: str, config: SlackConfig) -> bool:
    """Whether a redirect may be followed to ``url``: Slack's own hosts over
    HTTPS (``slack.com``, ``slack-edge.com`` and their subdomains) or the
    configured API's host and port."""
    parts = urlsplit(url)
    host = (parts.hostname or "").lower()
    if parts.scheme == "https" and any(
        host == d or host.endswith(f".{d}") for d in ("slack.com", "slack-edge.com")
    ):
        return True
    return config.may_send_token_to(url)


def _looks_html(data: bytes) -> bool:
    return data[:64].lstrip().lower().startswith(_HTML)


async def download_files(
    files: Sequence[Mapping[str, Any]],
    config: SlackConfig,
    sniff: Sniff | None = None,
    session: aiohttp.ClientSession | None = None,
) -> tuple[Attachment, ...]:
    """Fetch every shared file; raise :class:`InputRejected` (a message for
    the person) on the first one that is too large, unreachable or not what
    it claims to be."""
    if not files:
        return ()
    own = session is None
    session = session or aiohttp.ClientSession()
    try:
        return tuple([await download_file(session, f, config, sniff) for f in files])
    finally:
        if own:
            await session.close()


async def download_file(
    session: aiohttp.ClientSession,
    file: Mapping[str, Any],
    config: SlackConfig,
    sniff: Sniff | None = None,
) -> Attachment:
    """One file.  The token goes only to Slack's hosts (redirects included);
    ``sniff`` (the agent's) types the bytes, else Slack's declared type stands
    (the agent checks the bytes again either way)."""
    name = str(file.get("name") or file.get("title") or file.get("id") or "file")
    declared = str(file.get("mimetype") or "application/octet-stream")
    if file.get("mode") == "external" or file.get("is_external"):
        raise InputRejected(ChatCode.EXTERNAL_LINK, file=name)
    size = file.get("size")
    cap = config.max_file_bytes
    if isinstance(size, int) and size > cap:
        raise too_large(name, size, cap)
    url = file.get("url_private_download") or file.get("url_private")
    if not url:
        raise InputRejected(ChatCode.NO_FILE_URL, file=name, source="Slack")
    if not config.may_send_token_to(url):
        raise InputRejected(ChatCode.NOT_HOSTED, file=name, source="Slack")
    token = {"Authorization": f"Bearer {config.bot_token}"}
    try:
        data, served = await fetch_capped(
            session,
            url,
            name=name,
            cap=cap,
            source="Slack",
            seconds=config.download_timeout,
            headers=lambda to: token if config.may_send_token_to(to) else {},
            may_follow=lambda to: may_follow(to, config),
        )
    except InputRejected:
        log.warning("slack file %s: not downloaded", file.get("id"), exc_info=True)
        raise
    found = sniff(data) if sniff is not None else ("text/html" if _looks_html(data) else None)
    if declared != "text/html" and "text/html" in (found, served):
        raise InputRejected(ChatCode.SLACK_NO_FILES_SCOPE, file=name)
    mime = found if found is not None and found != "text/plain" else declared
    return Attachment(name=name, mime=mime, data=data)
