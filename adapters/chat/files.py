"""How an answer and its files are sent, on every platform.

The one size policy: a generated file within the platform's upload limit is
sent as it is; an image over it is re-encoded and downscaled until it fits
(``core.media_files.fit_image``, off the event loop, and renamed for its new
type); any other
file too large is named in the answer instead, with its size and the limit.
The text is split to the platform's message size (never inside a code
block), the files packed into messages by count and total size, the first
group on the last text message.
"""

from __future__ import annotations

import logging
import mimetypes
from collections.abc import Iterable, Sequence
from pathlib import PurePosixPath

from adapters.chat.render import Renderer
from adapters.chat.surface import Limits, OutFile, Outgoing
from adapters.chat.text import split_text
from core.media_files import fit_image
from core.types import AgentAPI, Resource

log = logging.getLogger(__name__)


def _renamed(handle: str, mime: str) -> str:
    """``image.png`` re-encoded as JPEG becomes ``image.jpg``."""
    ext = {"image/jpeg": ".jpg"}.get(mime) or mimetypes.guess_extension(mime) or ""
    path = PurePosixPath(handle)
    return path.name if not ext or path.suffix == ext else f"{path.stem}{ext}"


async def prepare_files(
    agent: AgentAPI,
    resources: Sequence[Resource],
    limit: int,
    renderer: Renderer,
    request_id: str = "",
) -> tuple[list[OutFile], list[str]]:
    """The files to upload, and a note for each one that could not be."""
    files: list[OutFile] = []
    notes: list[str] = []
    for res in resources:
        if res.size > limit and not res.is_image:
            notes.append(renderer.too_large(res.handle, res.size, limit))  # not even read
            continue
        data = await agent.read_file(res)
        if len(data) <= limit:
            files.append(OutFile(PurePosixPath(res.handle).name, data, res.mime))
            continue
        fitted = await fit_image(data, limit) if res.is_image else None
        if fitted is None:
            notes.append(renderer.too_large(res.handle, len(data), limit))
            continue
        small, mime = fitted
        log.info(
            "request %s: %s downscaled %d → %d bytes", request_id, res.handle, len(data), len(small)
        )
        files.append(OutFile(_renamed(res.handle, mime), small, mime))
    return files, notes


def pack_files(files: Iterable[OutFile], limit: int, per_message: int) -> list[tuple[OutFile, ...]]:
    """Group files into messages of at most ``per_message`` files whose total
    size stays within ``limit`` (each file must already fit on its own)."""
    groups: list[list[OutFile]] = []
    total = 0
    for file in files:
        if not groups or len(groups[-1]) >= per_message or total + file.size > limit:
            groups.append([])
            total = 0
        groups[-1].append(file)
        total += file.size
    return [tuple(g) for g in groups]


def compose(text: str, files: Sequence[OutFile], limits: Limits) -> list[Outgoing]:
    """The messages for an answer: the text split, the first file group on the
    last text message, further groups in messages of their own."""
    chunks = split_text(text, limits.message_chars)
    groups = pack_files(files, limits.upload_bytes, limits.files_per_message)
    messages = [Outgoing(c) for c in chunks]
    if groups:
        first = groups.pop(0)
        if messages:
            messages[-1] = Outgoing(messages[-1].text, first)
        else:
            messages.append(Outgoing(None, first))
        messages.extend(Outgoing(None, g) for g in groups)
    return messages


async def answer_messages(
    agent: AgentAPI,
    renderer: Renderer,
    text: str,
    resources: Sequence[Resource],
    limits: Limits,
    request_id: str = "",
) -> list[Outgoing]:
    """The answer text (in the platform's markup) and its files, fitted to
    ``limits``, as the messages to send in order."""
    files, notes = await prepare_files(agent, resources, limits.upload_bytes, renderer, request_id)
    if notes:
        text = "\n".join([text.rstrip(), "", *notes])
    return compose(text, files, limits)
