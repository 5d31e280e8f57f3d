"""User attachments in: checked before download, fetched only from Discord's
CDN, streamed with a byte cap (:mod:`adapters.chat.download`).

:func:`check_attachments` is pure (declared sizes, hosts, count) so it runs
before the interaction is deferred and a refusal can be ephemeral right away.
"""

from __future__ import annotations

import mimetypes
from collections.abc import Sequence
from typing import Protocol
from urllib.parse import urlsplit

import aiohttp

from adapters.chat.download import download_all, fetch_capped, too_large
from adapters.chat.render import human_size
from adapters.discord.config import DiscordConfig
from core.errors import InputRejected
from core.types import Attachment


class AttachmentLike(Protocol):
    """What we read of a ``discord.Attachment`` (so tests need no client)."""

    @property
    def filename(self) -> str: ...

    @property
    def size(self) -> int: ...

    @property
    def url(self) -> str: ...

    @property
    def content_type(self) -> str | None: ...


def _allowed_url(url: str, config: DiscordConfig) -> bool:
    parts = urlsplit(url)
    return parts.scheme in config.cdn_schemes and (parts.hostname or "") in config.cdn_hosts


def check_attachments(attachments: Sequence[AttachmentLike], config: DiscordConfig) -> str | None:
    """Why these attachments are refused (a message for the user), or None."""
    if len(attachments) > config.max_attachments:
        return f"Please attach at most {config.max_attachments} files."
    for att in attachments:
        if att.size > config.max_attachment_bytes:
            return (
                f"{att.filename} is {human_size(att.size)}; the limit is "
                f"{human_size(config.max_attachment_bytes)}."
            )
        if not _allowed_url(att.url, config):
            return f"{att.filename} is not hosted on Discord's CDN."
    return None


def _mime(att: AttachmentLike) -> str:
    if att.content_type:
        return att.content_type.split(";")[0].strip()
    guessed, _ = mimetypes.guess_type(att.filename)
    return guessed or "application/octet-stream"


async def download(
    session: aiohttp.ClientSession, att: AttachmentLike, config: DiscordConfig
) -> Attachment:
    """Fetch one attachment, never reading more than the cap (the declared size
    may lie; the stream is cut at the cap either way)."""
    if not _allowed_url(att.url, config):
        raise InputRejected(f"{att.filename} is not hosted on Discord's CDN.")
    cap = config.max_attachment_bytes
    if att.size > cap:
        raise too_large(att.filename, att.size, cap)
    data, _ = await fetch_capped(
        session,
        att.url,
        name=att.filename,
        cap=cap,
        source="Discord",
        seconds=config.download_timeout,
    )
    return Attachment(name=att.filename, mime=_mime(att), data=data)


async def download_each(
    session: aiohttp.ClientSession, attachments: Sequence[AttachmentLike], config: DiscordConfig
) -> tuple[Attachment, ...]:
    """All attachments, concurrently; the first failure cancels the rest."""
    return await download_all([download(session, a, config) for a in attachments])
