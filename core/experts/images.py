"""Image post-processing the experts and adapters share (Pillow, NumPy).

Pure, CPU-bound functions: callers run them in a worker thread
(``core.threads.work``).  Everything takes and returns bytes so results can go
straight into a :class:`core.results.Blob` or the store.  Unreadable input
raises ``ValueError``.
"""

from __future__ import annotations

import colorsys
import io
import zlib
from collections.abc import Sequence

import numpy as np
from PIL import Image, ImageDraw, ImageFont, ImageOps, UnidentifiedImageError

from core.mediatypes import sniff
from core.results import Box, Segment

# Distinct, readable colours; further labels get colours derived from a hash.
_PALETTE = (
    (230, 25, 75),
    (60, 180, 75),
    (0, 130, 200),
    (245, 130, 48),
    (145, 30, 180),
    (70, 240, 240),
    (240, 50, 230),
    (210, 245, 60),
    (250, 190, 212),
    (0, 128, 128),
    (170, 110, 40),
    (128, 0, 0),
)
# Anchor colours of the "inferno" colour map, dark (near) to bright (far).
_INFERNO = (
    (0, 0, 4),
    (40, 11, 84),
    (101, 21, 110),
    (159, 42, 99),
    (212, 72, 66),
    (245, 125, 21),
    (250, 193, 39),
    (252, 255, 164),
)


def _open(data: bytes) -> Image.Image:
    try:
        im = Image.open(io.BytesIO(data))
        im.load()
    except (
        UnidentifiedImageError,
        OSError,
        ValueError,
        SyntaxError,
        Image.DecompressionBombError,
    ) as exc:
        raise ValueError(f"not a readable image: {exc}") from exc
    # Pipelines apply the EXIF orientation too, so coordinates line up.
    return ImageOps.exif_transpose(im)


def _open_rgb(data: bytes) -> Image.Image:
    return _open(data).convert("RGB")


def _png(im: Image.Image) -> bytes:
    buf = io.BytesIO()
    im.save(buf, format="PNG")
    return buf.getvalue()


def label_colours(labels: Sequence[str]) -> dict[str, tuple[int, int, int]]:
    """One colour per distinct label, in order of first appearance."""
    out: dict[str, tuple[int, int, int]] = {}
    for label in labels:
        if label in out:
            continue
        n = len(out)
        if n < len(_PALETTE):
            out[label] = _PALETTE[n]
        else:
            hue = (zlib.crc32(label.encode()) % 360) / 360
            r, g, b = colorsys.hsv_to_rgb(hue, 0.8, 0.95)
            out[label] = (round(r * 255), round(g * 255), round(b * 255))
    return out


def _font(size: int) -> ImageFont.ImageFont | ImageFont.FreeTypeFont:
    try:
        return ImageFont.load_default(size=size)
    except (ImportError, OSError):  # Pillow built without FreeType
        return ImageFont.load_default()


def _ink(colour: tuple[int, int, int]) -> tuple[int, int, int]:
    """Black or white, whichever reads better on ``colour``."""
    r, g, b = colour
    return (0, 0, 0) if 0.299 * r + 0.587 * g + 0.114 * b > 150 else (255, 255, 255)


def draw_boxes(image: bytes, boxes: Sequence[Box]) -> bytes:
    """The image as PNG with a coloured rectangle and a "label 0.93" caption per box."""
    im = _open_rgb(image)
    w, h = im.size
    draw = ImageDraw.Draw(im)
    width = max(2, round(min(w, h) / 200))
    font = _font(max(10, min(w, h) // 40))
    colours = label_colours([b.label for b in boxes])
    for box in boxes:
        x0 = min(max(min(box.xmin, box.xmax), 0), w - 1)
        x1 = min(max(max(box.xmin, box.xmax), 0), w - 1)
        y0 = min(max(min(box.ymin, box.ymax), 0), h - 1)
        y1 = min(max(max(box.ymin, box.ymax), 0), h - 1)
        colour = colours[box.label]
        draw.rectangle((x0, y0, x1, y1), outline=colour, width=width)
        caption = f"{box.label} {box.score:.2f}"
        left, top, right, bottom = draw.textbbox((0, 0), caption, font=font)
        tw, th = right - left + 4, bottom - top + 4
        tx = min(x0, max(w - tw, 0))
        ty = y0 - th if y0 - th >= 0 else min(y0 + width, max(h - th, 0))
        draw.rectangle((tx, ty, tx + tw, ty + th), fill=colour)
        draw.text((tx + 2 - left, ty + 2 - top), caption, fill=_ink(colour), font=font)
    return _png(im)


def mask_overlay(image: bytes, segments: Sequence[Segment], *, alpha: float = 0.5) -> bytes:
    """The image as PNG with a translucent colour over each segment's mask.

    A legend strip (swatch + label) is added *below* the image, so no pixel
    outside the masks is touched.  Masks of another size are resized.
    """
    im = _open_rgb(image)
    with_mask = [s for s in segments if s.mask]
    colours = label_colours([s.label for s in with_mask])
    level = round(255 * min(max(alpha, 0.0), 1.0))
    for seg in with_mask:
        assert seg.mask is not None
        mask = _open(seg.mask).convert("L")
        if mask.size != im.size:
            mask = mask.resize(im.size, Image.Resampling.NEAREST)
        im.paste(colours[seg.label], mask=mask.point(lambda v: level if v > 127 else 0))
    if not colours:
        return _png(im)
    return _png(_with_legend(im, colours))


def _with_legend(im: Image.Image, colours: dict[str, tuple[int, int, int]]) -> Image.Image:
    w, h = im.size
    font = _font(max(10, min(max(w, 200), 1200) // 45))
    probe = ImageDraw.Draw(im)
    line = int(probe.textbbox((0, 0), "Ag", font=font)[3]) + 6
    pad, swatch = 6, line - 6
    x, y, spots = pad, pad, []
    for label in colours:
        item = swatch + 4 + round(probe.textlength(label, font=font)) + 2 * pad
        if x > pad and x + item > w:
            x, y = pad, y + line
        spots.append((label, x, y))
        x += item
    out = Image.new("RGB", (w, h + y + line + pad), (255, 255, 255))
    out.paste(im, (0, 0))
    draw = ImageDraw.Draw(out)
    for label, lx, ly in spots:
        draw.rectangle((lx, h + ly, lx + swatch, h + ly + swatch), fill=colours[label])
        draw.text((lx + swatch + 4, h + ly), label, fill=(0, 0, 0), font=font)
    return out


def _colour_map() -> np.ndarray:
    anchors = np.array(_INFERNO, dtype=np.float64)
    xs = np.linspace(0, 255, len(anchors))
    return np.stack(
        [np.interp(np.arange(256), xs, anchors[:, c]) for c in range(3)], axis=1
    ).astype(np.uint8)


def depth_to_image(depth: np.ndarray | bytes) -> bytes:
    """A depth map (array, or an image such as a 16-bit PNG) as a colour PNG."""
    arr = np.asarray(_open(depth), dtype=np.float64) if isinstance(depth, bytes) else depth
    arr = np.squeeze(np.asarray(arr, dtype=np.float64))
    if arr.ndim == 3 and arr.shape[-1] in (3, 4):
        arr = arr[..., :3].mean(axis=-1)
    if arr.ndim != 2 or arr.size == 0:
        raise ValueError(f"a depth map must be 2-D, got shape {np.shape(depth)}")
    finite = np.isfinite(arr)
    if not finite.any():
        arr = np.zeros_like(arr)
    else:
        lo, hi = arr[finite].min(), arr[finite].max()
        arr = np.where(finite, arr, lo)
        arr = (arr - lo) / (hi - lo) if hi > lo else np.zeros_like(arr)
    index = np.clip(np.rint(arr * 255), 0, 255).astype(np.uint8)
    return _png(Image.fromarray(_colour_map()[index], mode="RGB"))


def image_size(data: bytes) -> tuple[int, int]:
    """(width, height) as displayed (EXIF rotation applied), without decoding pixels."""
    try:
        with Image.open(io.BytesIO(data)) as im:
            w, h = im.size
            orientation = im.getexif().get(0x0112, 1)
    except (UnidentifiedImageError, OSError, ValueError, SyntaxError) as exc:
        raise ValueError(f"not a readable image: {exc}") from exc
    return (h, w) if orientation in (5, 6, 7, 8) else (w, h)


def fit_image(data: bytes, max_bytes: int, *, max_side: int | None = None) -> tuple[bytes, str]:
    """Re-encode (and if need be shrink) an image until it is at most ``max_bytes``.

    Returns the original when it already fits.  Otherwise tries JPEG (WEBP
    when the image has transparency) at falling quality, then halves the
    size and tries again.  Raises ValueError when even a tiny image won't fit.
    """
    im = _open(data)
    source = sniff(data)
    source_mime = source.mime if source is not None else "application/octet-stream"
    if len(data) <= max_bytes and (max_side is None or max(im.size) <= max_side):
        return data, source_mime
    alpha = im.mode in ("RGBA", "LA", "PA") or (im.mode == "P" and "transparency" in im.info)
    im = im.convert("RGBA" if alpha else "RGB")
    if max_side is not None and max(im.size) > max_side:
        im.thumbnail((max_side, max_side), Image.Resampling.LANCZOS)
        if source_mime == "image/png":  # a lossless graphic may fit once it is smaller
            out = _encode(im, "PNG", None)
            if len(out) <= max_bytes:
                return out, "image/png"
    lossy = "WEBP" if alpha else "JPEG"
    while True:
        for quality in (85, 70, 55, 40):
            out = _encode(im, lossy, quality)
            if len(out) <= max_bytes:
                return out, f"image/{lossy.lower()}"
        if min(im.size) < 32:
            raise ValueError(f"cannot fit the image into {max_bytes} bytes")
        im = im.resize((max(1, im.width // 2), max(1, im.height // 2)), Image.Resampling.LANCZOS)


def _encode(im: Image.Image, fmt: str, quality: int | None) -> bytes:
    buf = io.BytesIO()
    if fmt == "PNG":
        im.save(buf, format="PNG", optimize=True)
    elif fmt == "WEBP":
        im.save(buf, format="WEBP", quality=quality, method=4)
    else:
        im.save(buf, format="JPEG", quality=quality, optimize=True, progressive=True)
    return buf.getvalue()
