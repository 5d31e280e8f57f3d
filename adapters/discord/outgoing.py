"""Generated files out: read through the agent, fitted to the upload limit.

Images over the limit are re-encoded/downscaled (``fit_image``, in a worker
thread: it is CPU-bound); anything else too big is named in the answer
instead of failing the whole reply.
"""

from __future__ import annotations

import asyncio
import logging
import mimetypes
from collections.abc import Sequence
from pathlib import PurePosixPath

from adapters.discord.render import OutFile, human_size
from core.experts.images import fit_image
from core.types import AgentAPI, Resource

log = logging.getLogger(__name__)


def _renamed(handle: str, mime: str) -> str:
    """``image.png`` re-encoded as JPEG becomes ``image.jpg``."""
    ext = {"image/jpeg": ".jpg"}.get(mime) or mimetypes.guess_extension(mime) or ""
    path = PurePosixPath(handle)
    return path.name if not ext or path.suffix == ext else f"{path.stem}{ext}"


def _is_image(resource: Resource) -> bool:
    return resource.kind == "image" or resource.mime.startswith("image/")


async def prepare_files(
    agent: AgentAPI, resources: Sequence[Resource], limit: int, request_id: str = ""
) -> tuple[list[OutFile], list[str]]:
    """The files to upload, and a note for each one that could not be."""
    files: list[OutFile] = []
    notes: list[str] = []

    def too_big(res: Resource, size: int) -> None:
        notes.append(
            f"`{res.handle}` ({human_size(size)}) is too large to upload here "
            f"(limit {human_size(limit)})."
        )

    for res in resources:
        if res.size > limit and not _is_image(res):
            too_big(res, res.size)  # don't even read it
            continue
        data = await agent.read_file(res)
        if len(data) <= limit:
            files.append(OutFile(PurePosixPath(res.handle).name, data, res.mime))
            continue
        if not _is_image(res):
            too_big(res, len(data))
            continue
        try:
            fitted, mime = await asyncio.to_thread(fit_image, data, limit)
        except ValueError:
            log.warning("request %s: could not fit %s", request_id, res.handle, exc_info=True)
            too_big(res, len(data))
            continue
        log.info(
            "request %s: %s downscaled %d → %d bytes",
            request_id,
            res.handle,
            len(data),
            len(fitted),
        )
        files.append(OutFile(_renamed(res.handle, mime), fitted, mime))
    return files, notes


def with_notes(text: str, notes: Sequence[str]) -> str:
    if not notes:
        return text
    return "\n".join([text.rstrip(), "", *(f"📎 {n}" for n in notes)])
