"""ControlNet preprocessors: the control image each kind of ControlNet was trained on.

A ControlNet follows one kind of picture: canny edges, a depth map, a normal
map, an ADE20K-coloured segmentation map, scribbles…  Its name says which
(``sd-controlnet-seg``, ``control_v11p_sd15_normalbae``), and this module turns
the user's photo into that picture with what this machine has:

* canny: numpy edges (no OpenCV);
* depth: the local depth-estimation model (``LOCAL_DEPTH_MODEL``);
* normal: the classic "normal from depth" of ControlNet 1.0, numpy Sobel
  gradients of that same depth map;
* seg: the local segmentation model (``LOCAL_SEG_MODEL``), painted in the
  ADE20K palette seg ControlNets learnt;
* scribble and soft edge (HED, PiDiNet): thick canny edges, an approximation
  of the detectors those were trained with, which need their own weights.

OpenPose and M-LSD ControlNets need detectors with weights of their own: they
get the photo as it is, and the result says so.  Everything here is blocking
numpy/Pillow work that the backend runs in a worker thread; models are passed
in already loaded.
"""

from __future__ import annotations

import colorsys
import logging
import re
import zlib
from typing import Any

import numpy as np
from PIL import Image, ImageFilter

log = logging.getLogger(__name__)

# Kinds whose control image comes from a helper model: (setting, pipeline task).
NEEDS_MODEL: dict[str, tuple[str, str]] = {
    "depth": ("LOCAL_DEPTH_MODEL", "depth-estimation"),
    "normal": ("LOCAL_DEPTH_MODEL", "depth-estimation"),
    "seg": ("LOCAL_SEG_MODEL", "image-segmentation"),
}
# Kinds whose control image is worth showing next to the drawing (canny is the
# photo's outline; "none" is the photo itself).
SHOWN = frozenset({"depth", "normal", "seg", "scribble", "softedge"})
# ControlNets whose detector needs weights of its own: why they get the photo.
_NO_DETECTOR = {
    "openpose": "openpose needs a pose detector",
    "dwpose": "openpose needs a pose detector",
    "mlsd": "mlsd needs a line detector",
}
# The start of a word of the name → kind; the first match wins (``normalbae``
# is normal, ``sd-controlnet-hed`` soft edge, a word inside ``finished`` nothing).
_NAMES = (
    ("canny", "canny"),
    ("depth", "depth"),
    ("normal", "normal"),
    ("seg", "seg"),
    ("scribble", "scribble"),
    ("softedge", "softedge"),
    ("hed", "softedge"),
    ("pidi", "softedge"),
)

# Depth models whose output grows with distance; MiDaS-style ones (DPT, Depth
# Anything's relative checkpoints) give inverse depth, near = large, which is
# what depth ControlNets were trained on.
_METRIC_DEPTH = ("glpn", "zoedepth", "depth_pro")
_NORMAL_Z = 2.0 * np.pi  # ControlNet 1.0's constant z: how steep a gradient must be to tilt
_NORMAL_BACKGROUND = 0.4  # the farthest 40 % of the depth range faces the camera (flat)

# ADE20K's colours of common scene classes, which seg ControlNets read as those
# classes; other labels get a bright colour derived from their name.
_ADE_COLOURS: dict[str, tuple[int, int, int]] = {
    "wall": (120, 120, 120),
    "building": (180, 120, 120),
    "sky": (6, 230, 230),
    "floor": (80, 50, 50),
    "tree": (4, 200, 3),
    "ceiling": (120, 120, 80),
    "road": (140, 140, 140),
    "bed": (204, 5, 255),
    "windowpane": (230, 230, 230),
    "window": (230, 230, 230),
    "grass": (4, 250, 7),
    "cabinet": (224, 5, 255),
    "sidewalk": (235, 255, 7),
    "person": (150, 5, 61),
    "earth": (120, 120, 70),
    "door": (8, 255, 51),
    "table": (255, 6, 82),
    "mountain": (143, 255, 140),
}

_warned: set[str] = set()


def _warn_once(key: str, message: str, *args: object) -> None:
    """Log ``message`` the first time ``key`` comes up in this process: a model
    reloaded after eviction should not repeat it."""
    if key not in _warned:
        _warned.add(key)
        log.warning(message, *args)


# --- which preprocessor -------------------------------------------------------


def preprocessor(name: str) -> str:
    """The control image a ControlNet expects, from its name: canny, depth,
    normal, seg, scribble, softedge, or none (the photo as it is)."""
    words = re.split(r"[^a-z0-9]+", name.lower())
    return next((kind for part, kind in _NAMES if any(w.startswith(part) for w in words)), "none")


def missing_detector(name: str) -> str | None:
    """Why a ControlNet gets the raw photo when its detector needs weights of
    its own (openpose, mlsd), warning once per model; None for the others."""
    lowered = name.lower()
    reason = next((why for part, why in _NO_DETECTOR.items() if part in lowered), None)
    if reason is not None:
        _warn_once(f"detector:{name}", "ControlNet %s gets the photo as it is: %s", name, reason)
    return reason


def no_helper_model(name: str, kind: str) -> None:
    """Warn (once per model) that a ``kind`` ControlNet runs on the raw photo."""
    setting = NEEDS_MODEL[kind][0]
    _warn_once(
        f"helper:{name}",
        "%s ControlNet %s has no %s: the photo itself is its control",
        kind,
        name,
        setting,
    )


def label(kind: str, reason: str | None = None) -> str:
    """What the result's ``extra["control"]`` says about the control image."""
    if kind in ("scribble", "softedge"):
        return f"{kind} (edge approximation)"
    if kind == "none" and reason:
        return f"none: {reason}"
    return kind


def control_image(kind: str, im: Image.Image, helper: Any = None) -> Image.Image:
    """``im`` turned into a ``kind`` control image (``helper`` is the loaded
    depth or segmentation pipeline the kind needs), the size of ``im``."""
    if kind == "canny":
        return canny(im)
    if kind == "depth":
        return depth_control(helper, im)
    if kind == "normal":
        return normal_control(helper, im)
    if kind == "seg":
        return seg_control(helper, im)
    if kind in ("scribble", "softedge"):
        return scribble_control(im, soft=kind == "softedge")
    return im


# --- edges ----------------------------------------------------------------------


def _sobel(a: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """3×3 Sobel gradients (x right, y down), as ``cv2.Sobel`` with edge padding."""
    p = np.pad(a, 1, mode="edge")
    gx = (p[:-2, 2:] + 2 * p[1:-1, 2:] + p[2:, 2:]) - (p[:-2, :-2] + 2 * p[1:-1, :-2] + p[2:, :-2])
    gy = (p[2:, :-2] + 2 * p[2:, 1:-1] + p[2:, 2:]) - (p[:-2, :-2] + 2 * p[:-2, 1:-1] + p[:-2, 2:])
    return gx, gy


def canny(im: Image.Image, low: float = 100.0, high: float = 200.0) -> Image.Image:
    """Canny edges (white on black, RGB) with numpy only: blur, Sobel,
    non-maximum suppression, double threshold and hysteresis, as OpenCV's
    ``cv2.Canny(img, 100, 200)`` that ControlNet's canny models were trained on."""
    g = np.asarray(im.convert("L"), dtype=np.float32)
    k = np.array([1, 4, 6, 4, 1], dtype=np.float32) / 16
    pad = np.pad(g, 2, mode="edge")
    g = sum(k[i] * pad[:, i : i + g.shape[1]] for i in range(5))
    g = sum(k[i] * g[i : i + pad.shape[0] - 4, :] for i in range(5))
    gx, gy = _sobel(g)
    mag = np.hypot(gx, gy)
    angle = (np.rad2deg(np.arctan2(gy, gx)) + 180.0) % 180.0
    m = np.pad(mag, 1)
    h, w = mag.shape
    nb = {  # the two neighbours along the gradient, per quantised direction
        0: (m[1:-1, :-2], m[1:-1, 2:]),
        45: (m[:-2, 2:], m[2:, :-2]),
        90: (m[:-2, 1:-1], m[2:, 1:-1]),
        135: (m[:-2, :-2], m[2:, 2:]),
    }
    q = (np.round(angle / 45.0) % 4 * 45).astype(int)
    keep = np.zeros_like(mag, dtype=bool)
    for d, (a, b) in nb.items():
        keep |= (q == d) & (mag >= a) & (mag >= b)
    mag = np.where(keep, mag, 0.0)
    strong, weak = mag >= high, mag >= low
    for _ in range(h * w):  # hysteresis: grow strong edges through weak ones
        s = np.pad(strong, 1)
        grown = weak & (
            s[:-2, :-2]
            | s[:-2, 1:-1]
            | s[:-2, 2:]
            | s[1:-1, :-2]
            | s[1:-1, 2:]
            | s[2:, :-2]
            | s[2:, 1:-1]
            | s[2:, 2:]
            | strong
        )
        if (grown == strong).all():
            break
        strong = grown
    edges = (strong * 255).astype(np.uint8)
    return Image.fromarray(np.stack([edges] * 3, axis=-1))


def scribble_control(im: Image.Image, *, soft: bool = False) -> Image.Image:
    """Thick white strokes on black standing in for a scribble (or, ``soft``,
    blurred like HED's soft edges): canny at half size, which keeps outlines
    and drops fine texture, scaled back and thickened to about 1 % of the side."""
    w, h = im.size
    small = im.resize((max(8, w // 2), max(8, h // 2)), Image.Resampling.BILINEAR)
    edges = canny(small).convert("L").resize(im.size, Image.Resampling.BILINEAR)
    edges = edges.point(lambda v: 255 if v > 0 else 0)
    width = max(3, (max(w, h) // 100) | 1)  # MaxFilter takes odd sizes
    edges = edges.filter(ImageFilter.MaxFilter(width))
    if soft:
        edges = edges.filter(ImageFilter.GaussianBlur(width / 2))
    return edges.convert("RGB")


# --- depth and normals ----------------------------------------------------------------


def near_depth(depth_pipe: Any, im: Image.Image) -> np.ndarray:
    """The depth pipeline's map of ``im`` as nearness: float 0 (far) to 1
    (near), the size of ``im`` (MiDaS's convention, whatever the model's)."""
    predicted = depth_pipe(im)["predicted_depth"].detach().float().cpu().numpy()
    d = np.nan_to_num(np.squeeze(predicted).astype(np.float32))
    config = depth_pipe.model.config
    if (
        config.model_type in _METRIC_DEPTH
        or getattr(config, "depth_estimation_type", "") == "metric"
    ):
        d = -d  # metric depth: far is large
    if d.shape != (im.height, im.width):
        d = np.asarray(Image.fromarray(d).resize(im.size, Image.Resampling.BICUBIC))
    span = float(d.max() - d.min())
    return ((d - d.min()) / span) if span > 0 else np.zeros_like(d)


def depth_control(depth_pipe: Any, im: Image.Image) -> Image.Image:
    """A depth ControlNet's control image: grey levels, near white, far black
    (MiDaS's convention), the size of ``im``."""
    grey = (near_depth(depth_pipe, im) * 255.0).round().astype(np.uint8)
    return Image.fromarray(grey).convert("RGB")


def normals_from_nearness(near: np.ndarray) -> np.ndarray:
    """RGB normals (uint8) of a nearness map, ControlNet 1.0's "normal from
    depth": x and y Sobel gradients, constant z, normalised, 0–255.  Red is
    facing left, green up, blue the camera (so does normalbae's BAE
    convention).  The depth range counts as 255 at 512 px, so the tilt does
    not change with the size; the far background stays flat."""
    relief = 255.0 * max(near.shape) / 512.0
    gx, gy = _sobel(near.astype(np.float64) * relief)
    flat = near < _NORMAL_BACKGROUND
    gx[flat] = 0.0
    gy[flat] = 0.0
    n = np.stack([gx, gy, np.full_like(gx, _NORMAL_Z)], axis=-1)
    n /= np.linalg.norm(n, axis=-1, keepdims=True)
    return np.asarray((n * 127.5 + 127.5).clip(0, 255).astype(np.uint8))


def normal_control(depth_pipe: Any, im: Image.Image) -> Image.Image:
    """A normal ControlNet's control image from the local depth model, the size of ``im``."""
    return Image.fromarray(normals_from_nearness(near_depth(depth_pipe, im)))


# --- segmentation -------------------------------------------------------------------


def _canonical(label: str) -> str:
    """``"Sky-other-merged"`` → ``"sky"``, ``"person, individual"`` → ``"person"``."""
    key = label.lower().split(",")[0].strip()
    return re.sub(r"(-(other|merged|stuff))+$", "", key)


def seg_colour(label: str) -> tuple[int, int, int]:
    """A label's colour in the ADE20K style: ADE's own for common classes,
    else a bright colour fixed by the name (never black, which is unlabelled)."""
    key = _canonical(label)
    if key in _ADE_COLOURS:
        return _ADE_COLOURS[key]
    h = zlib.crc32(key.encode())
    hue, sat, val = (h % 360) / 360, 0.55 + (h >> 9) % 45 / 100, 0.7 + (h >> 16) % 30 / 100
    r, g, b = colorsys.hsv_to_rgb(hue, sat, val)
    return round(r * 255), round(g * 255), round(b * 255)


def seg_control(seg_pipe: Any, im: Image.Image) -> Image.Image:
    """A seg ControlNet's control image: every segment of ``im`` filled with
    its label's colour, larger ones first so small objects stay visible;
    pixels no segment covers stay black."""
    semantic = hasattr(
        getattr(seg_pipe, "image_processor", None), "post_process_semantic_segmentation"
    )
    segments = seg_pipe(im, subtask="semantic") if semantic else seg_pipe(im)
    masks = []
    for seg in segments:
        mask = seg["mask"].convert("L")
        if mask.size != im.size:
            mask = mask.resize(im.size, Image.Resampling.NEAREST)
        masks.append((str(seg.get("label") or "segment"), np.asarray(mask) > 127))
    canvas = np.zeros((im.height, im.width, 3), dtype=np.uint8)
    for name, mask in sorted(masks, key=lambda m: -int(m[1].sum())):
        canvas[mask] = seg_colour(name)
    return Image.fromarray(canvas)
