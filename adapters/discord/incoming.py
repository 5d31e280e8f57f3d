"""User attachments in: checked before download, fetched only from Discord's
CDN, streamed with a byte cap (:mod:`adapters.chat.download`).

:func:`refusal` is pure (declared sizes, hosts, count) so it runs before the
interaction is deferred and a refusal can be ephemeral right away.
"""

from __future__ import annotations

import mimetypes
from collections.abc import Sequence
from typing import Protocol
from urllib.parse import urlsplit

import aiohttp

from adapters.chat.download import download_all, fetch_capped, too_large
from adapters.chat.messages import ChatCode, error_text
from adapters.discord.config import DiscordConfig
from core.errors import ErrorCode, InputRejected
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


CDN = "Discord's CDN"  # where an attachment must come from


def refusal(attachments: Sequence[AttachmentLike], config: DiscordConfig) -> InputRejected | None:
    """Why these attachments are refused, or None."""
    cap = config.max_attachment_bytes
    if len(attachments) > config.max_attachments:
        return InputRejected(
            ErrorCode.TOO_MANY_FILES, count=len(attachments), limit=config.max_attachments
        )
    for att in attachments:
        if att.size > cap:
            return InputRejected(
                ErrorCode.FILE_TOO_LARGE, file=att.filename, size=att.size, limit=cap
            )
        if not _allowed_url(att.url, config):
            return InputRejected(ChatCode.NOT_HOSTED, file=att.filename, source=CDN)
    return None


def check_attachments(attachments: Sequence[AttachmentLike], config: DiscordConfig) -> str | None:
    """:func:`refusal` in words for the user, or None."""
    refused = refusal(attachments, config)
    return error_text(refused) if refused is not None else None


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
        raise InputRejected(ChatCode.NOT_HOSTED, file=att.filename, source=CDN)
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
