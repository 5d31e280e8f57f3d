"""Media helpers an adapter may import (plain functions, no agent needed):
an image fitted to a platform's upload limit, and the MIME type a file's
bytes say.  (A stored file's bytes are read through the agent,
``AgentAPI.read_file``: only the media store may open its files.)
"""

from __future__ import annotations

from core.mediatypes import sniff
from core.threads import work


async def fit_image(data: bytes, max_bytes: int) -> tuple[bytes, str] | None:
    """An image re-encoded (and downscaled if need be) to at most
    ``max_bytes``, with its MIME type; None when it cannot be made to fit
    (or is no image).  Runs off the event loop."""
    from core.experts.images import fit_image as fit  # numpy: not at start-up (the CLI)

    try:
        return await work(fit, data, max_bytes)
    except ValueError:  # not an image, or cannot be made that small
        return None


def sniff_mime(data: bytes) -> str | None:
    """The MIME type the bytes' magic says, or None when they say nothing."""
    found = sniff(data)
    return found.mime if found is not None else None
