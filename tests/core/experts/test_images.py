"""Image post-processing: boxes, masks, depth, fitting and sizes."""

from __future__ import annotations

import io

import numpy as np
import pytest
from PIL import Image

from core.experts.images import (
    depth_to_image,
    draw_boxes,
    fit_image,
    image_size,
    label_colours,
    mask_overlay,
)
from core.mediatypes import sniff
from core.results import Box, Segment

GREY = (100, 100, 100)


def _png(im: Image.Image) -> bytes:
    buf = io.BytesIO()
    im.save(buf, format="PNG")
    return buf.getvalue()


def _pixels(data: bytes) -> np.ndarray:
    return np.asarray(Image.open(io.BytesIO(data)).convert("RGB")).astype(int)


def test_draw_boxes_marks_edges_and_leaves_the_rest() -> None:
    src = _png(Image.new("RGB", (200, 120), GREY))
    out = _pixels(draw_boxes(src, [Box("cat", 0.93, 50, 50, 150, 110)]))
    assert out.shape == (120, 200, 3)
    for x, y in [(50, 80), (150, 80), (100, 50), (100, 110)]:  # the four edges
        assert tuple(out[y, x]) != GREY, (x, y)
    for x, y in [(100, 80), (5, 115), (195, 5), (180, 100)]:  # inside and far away
        assert tuple(out[y, x]) == GREY, (x, y)
    assert (out[:50, 50:150] != GREY).any()  # the caption sits above the box


def test_draw_boxes_clamps_and_colours_per_label() -> None:
    src = _png(Image.new("RGB", (100, 80), GREY))
    boxes = [Box("dog", 0.5, -30, -30, 400, 300), Box("cat", 0.9, 10, 40, 40, 70)]
    out = _pixels(draw_boxes(src, boxes))
    assert out.shape == (80, 100, 3)
    dog, cat = label_colours(["dog", "cat"]).values()
    assert dog != cat
    assert tuple(out[79, 50]) == dog  # the clamped bottom edge is visible
    assert tuple(out[55, 10]) == cat


def test_label_colours_are_distinct_beyond_the_palette() -> None:
    colours = label_colours([f"label{i}" for i in range(20)] + ["label0"])
    assert len(colours) == 20
    assert len(set(colours.values())) == 20


def test_mask_overlay_tints_inside_only() -> None:
    src = _png(Image.new("RGB", (64, 48), GREY))
    mask = Image.new("L", (32, 24), 0)  # half size: resized to the image
    mask.paste(255, (0, 0, 16, 24))  # left half of the image
    out = _pixels(mask_overlay(src, [Segment("sky", 0.9, _png(mask)), Segment("x", None, None)]))
    assert out.shape[1] == 64 and out.shape[0] > 48  # legend strip below
    image = out[:48]
    colour = np.array(label_colours(["sky"])["sky"])
    inside, outside = image[:, :32], image[:, 32:]
    assert (outside == GREY).all()
    assert (np.abs(inside - (colour + GREY) / 2) <= 1).all()


def test_mask_overlay_without_masks_returns_the_image() -> None:
    src = _png(Image.new("RGB", (20, 10), GREY))
    assert (_pixels(mask_overlay(src, [Segment("a", 0.1)])) == GREY).all()


def test_depth_to_image_from_array_and_png() -> None:
    depth = np.tile(np.linspace(0.0, 5.0, 40, dtype=np.float32), (30, 1))
    depth[0, 0] = np.nan
    out = _pixels(depth_to_image(depth[None]))
    assert out.shape == (30, 40, 3)
    assert out[5, 0].sum() < out[5, -1].sum()  # near is dark, far is bright
    sixteen = Image.fromarray((np.arange(600).reshape(20, 30) * 100).astype(np.uint16))
    assert _pixels(depth_to_image(_png(sixteen))).shape == (20, 30, 3)
    assert _pixels(depth_to_image(np.ones((4, 4)))).shape == (4, 4, 3)
    with pytest.raises(ValueError):
        depth_to_image(np.zeros(5))


def test_fit_image_gets_noise_png_under_the_limit() -> None:
    noise = np.random.default_rng(1).integers(0, 256, (1200, 1200, 3), dtype=np.uint8)
    src = _png(Image.fromarray(noise))
    assert len(src) > 4_000_000
    out, mime = fit_image(src, 1_000_000)
    assert len(out) <= 1_000_000
    assert mime == "image/jpeg" == sniff(out).mime
    assert Image.open(io.BytesIO(out)).convert("RGB").size[0] > 0


def test_fit_image_keeps_small_files_and_transparency() -> None:
    small = _png(Image.new("RGB", (10, 10), GREY))
    assert fit_image(small, 10_000) == (small, "image/png")
    rgba = np.random.default_rng(2).integers(0, 256, (300, 300, 4), dtype=np.uint8)
    out, mime = fit_image(_png(Image.fromarray(rgba, "RGBA")), 60_000)
    assert mime == "image/webp" and len(out) <= 60_000
    assert Image.open(io.BytesIO(out)).mode == "RGBA"


def test_fit_image_max_side_and_impossible() -> None:
    src = _png(Image.new("RGB", (400, 100), GREY))
    out, mime = fit_image(src, 1_000_000, max_side=100)
    assert image_size(out) == (100, 25) and mime == "image/png"
    with pytest.raises(ValueError):
        fit_image(_png(Image.new("RGB", (64, 64), GREY)) + b"x" * 2000, 50)


def test_image_size_applies_exif_rotation() -> None:
    im = Image.new("RGB", (40, 10), GREY)
    exif = im.getexif()
    exif[0x0112] = 6  # rotated 90°
    buf = io.BytesIO()
    im.save(buf, format="JPEG", exif=exif)
    assert image_size(buf.getvalue()) == (10, 40)
    assert image_size(_png(im)) == (40, 10)
    with pytest.raises(ValueError):
        image_size(b"not an image")
