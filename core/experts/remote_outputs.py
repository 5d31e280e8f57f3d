"""Turning the hosted-inference client's outputs into :mod:`core.results` parts.

The client returns one element, a list, or a list of lists of its own output
dataclasses, decoded PIL images, raw bytes, or (for the tasks we POST
ourselves) JSON.  A response of the wrong shape raises a plain exception
(``ValueError``, ``TypeError``, ``KeyError``, ``AttributeError``, …); the
expert turns those into :class:`core.errors.TaskFailed`.
"""

from __future__ import annotations

import base64
import io
import json
from typing import Any

from PIL import Image

from core.mediatypes import sniff
from core.postprocess import depth_result
from core.results import Answer, Blob, Label, TaskResult
from core.threads import work


def sniff_mime(data: bytes, fallback: str = "application/octet-stream") -> str:
    """The media type of ``data`` from its magic bytes (servers' headers lie)."""
    found = sniff(data)
    return found.mime if found and found.kind in ("image", "audio", "video") else fallback


def as_list(out: Any) -> list[Any]:
    """Flatten the client's outputs, which are one element, a list, or a list of lists."""
    if not isinstance(out, list):
        return [out]
    if out and isinstance(out[0], list):
        return [x for sub in out for x in sub]
    return out


def labels_of(out: Any) -> tuple[Label, ...]:
    items = [Label(str(e.label), float(e.score)) for e in as_list(out)]
    return tuple(sorted(items, key=lambda x: -x.score))


def answers_of(out: Any) -> tuple[Answer, ...]:
    items = [
        Answer(str(e.answer), None if e.score is None else float(e.score))
        for e in as_list(out)
        if e.answer is not None
    ]
    return tuple(sorted(items, key=lambda a: -(a.score or 0.0)))


def encode_image(img: Image.Image) -> tuple[bytes, str]:
    """Bytes of a decoded image, in its own format when that is a web format:
    the very bytes it was read from when it still holds them (the Hub client
    opens a provider's answer from its bytes, lazily), else encoded again.
    Encoding a provider's PNG again decoded and compressed every pixel for
    the same picture: 60 ms for 512×512, 380 ms for 1024×1024 here, on the
    path to the next task and to the answer."""
    fmt = img.format if img.format in ("PNG", "JPEG", "WEBP", "GIF") else "PNG"
    if fmt == img.format and (source := _source_bytes(img)) is not None:
        return source, Image.MIME[fmt]
    if fmt == "JPEG" and img.mode not in ("RGB", "L"):
        img = img.convert("RGB")
    buf = io.BytesIO()
    img.save(buf, format=fmt)
    return buf.getvalue(), Image.MIME[fmt]


def _source_bytes(img: Image.Image) -> bytes | None:
    """The file ``img`` was opened from, when it was opened from bytes in
    memory and not loaded since (Pillow lets go of the file as it loads the
    pixels, and an image changed since is another object); None otherwise."""
    fp = getattr(img, "fp", None)
    return (fp.getvalue() or None) if isinstance(fp, io.BytesIO) else None


async def image_blob(img: Image.Image) -> Blob:
    data, mime = await work(encode_image, img)
    return Blob("image", mime, data)


def media_blob(kind: str, data: Any, fallback: str) -> Blob:
    """The client's raw answer as a blob of ``kind``.  Whether the bytes really
    are that (not empty, not an error page) is :func:`core.outputs.check_output`'s
    call, which names what came back."""
    if not isinstance(data, bytes):
        raise TypeError(f"expected {kind} bytes")
    return Blob(kind, sniff_mime(data, fallback), data)


def read_depth(raw: bytes) -> TaskResult:
    """The hosted depth answer ``{"predicted_depth": [[…]], "depth": "<base64 PNG>"}``
    (either field will do; the raw values are preferred) as a depth result."""
    out = json.loads(raw)
    if isinstance(out, list) and len(out) == 1:  # some servers wrap one result in a list
        out = out[0]
    if not isinstance(out, dict):
        raise ValueError("expected a JSON object")
    if out.get("predicted_depth") is not None:
        return depth_result(out["predicted_depth"])
    if isinstance(out.get("depth"), str):
        return depth_result(base64.b64decode(out["depth"].split(",")[-1], validate=True))
    raise KeyError("predicted_depth")
