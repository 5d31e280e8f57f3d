"""diffusers adapters of the local backend: text-to-image, image-to-image,
ControlNet and text-to-video.  Same contract as
:mod:`core.experts.local_tasks`; diffusers and torch are imported inside the
functions.

A ControlNet is given the control image its name says it was trained on:
canny edges (a numpy preprocessor, so no OpenCV is needed), or a depth map
from the local depth-estimation model ``LoadContext.depth_model`` (the depth
map is returned too, so people see what steered the drawing).  Other
ControlNets, and depth ones when no depth model is set, get the photo as it is.
"""

from __future__ import annotations

import inspect
import logging
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image

from core.errors import TaskFailed
from core.experts.local_tasks import (
    Adapter,
    LoadContext,
    need_image,
    need_text,
    pipeline_loader,
    png_blob,
)
from core.experts.video import encode_video
from core.results import Blob, TaskInputs, TaskResult

log = logging.getLogger(__name__)

# Depth models whose output grows with distance; MiDaS-style ones (DPT, Depth
# Anything's relative checkpoints) give inverse depth, near = large, which is
# what depth ControlNets were trained on.
_METRIC_DEPTH = ("glpn", "zoedepth", "depth_pro")


@dataclass(slots=True)
class _Loaded:
    """A pipeline with the context it was loaded in (diffusers calls need the steps)."""

    pipe: Any
    ctx: LoadContext
    extra: dict[str, Any]


def _diffusion(path: Path, ctx: LoadContext, cls_name: str = "DiffusionPipeline", **kw: Any) -> Any:
    import diffusers

    cls = getattr(diffusers, cls_name)
    diffusers.utils.logging.disable_progress_bar()
    pipe = cls.from_pretrained(path, dtype=ctx.dtype(), local_files_only=True, **kw)
    pipe.set_progress_bar_config(disable=True)
    return pipe.to(ctx.device)


def _steps(ctx: LoadContext) -> dict[str, Any]:
    return {} if ctx.steps is None else {"num_inference_steps": ctx.steps}


def _load_t2i(path: Path, ctx: LoadContext) -> _Loaded:
    return _Loaded(_diffusion(path, ctx), ctx, {})


def _run_t2i(loaded: _Loaded, inputs: TaskInputs) -> TaskResult:
    out = loaded.pipe(prompt=need_text(inputs), **_steps(loaded.ctx))
    return TaskResult(media=(png_blob(out.images[0]),))


def _load_i2i(path: Path, ctx: LoadContext) -> _Loaded:
    from diffusers import AutoPipelineForImage2Image

    pipe = _diffusion(path, ctx)
    if "image" not in inspect.signature(pipe.__call__).parameters:  # a text-to-image model
        pipe = AutoPipelineForImage2Image.from_pipe(pipe)
        pipe.set_progress_bar_config(disable=True)
    return _Loaded(pipe, ctx, {})


def _fit(im: Image.Image, side: int, multiple: int) -> Image.Image:
    """``im`` scaled so its longer side is about ``side``, each side a multiple of ``multiple``."""
    scale = side / max(im.size)
    w, h = (max(multiple, round(v * scale / multiple) * multiple) for v in im.size)
    return im.resize((w, h), Image.Resampling.BICUBIC)


def _default_side(pipe: Any) -> tuple[int, int]:
    """The pipeline's native image side and the multiple its sizes must be."""
    factor = int(getattr(pipe, "vae_scale_factor", 8))
    unet = getattr(pipe, "unet", None)
    if unet is None:  # transformer-based pipelines (SD3, Flux…)
        return int(getattr(pipe, "default_sample_size", 128)) * factor, factor * 2
    cfg = unet.config
    return int(cfg.sample_size) * factor, factor * 2 ** (len(cfg.block_out_channels) - 1)


def _run_i2i(loaded: _Loaded, inputs: TaskInputs) -> TaskResult:
    side, multiple = _default_side(loaded.pipe)
    image = _fit(need_image(inputs), side, multiple)
    out = loaded.pipe(prompt=inputs.text or "", image=image, **_steps(loaded.ctx))
    return TaskResult(media=(png_blob(out.images[0]),))


def canny(im: Image.Image, low: float = 100.0, high: float = 200.0) -> Image.Image:
    """Canny edges (white on black, RGB) with numpy only: blur, Sobel,
    non-maximum suppression, double threshold and hysteresis, as OpenCV's
    ``cv2.Canny(img, 100, 200)`` that ControlNet's canny models were trained on."""
    g = np.asarray(im.convert("L"), dtype=np.float32)
    k = np.array([1, 4, 6, 4, 1], dtype=np.float32) / 16
    pad = np.pad(g, 2, mode="edge")
    g = sum(k[i] * pad[:, i : i + g.shape[1]] for i in range(5))
    g = sum(k[i] * g[i : i + pad.shape[0] - 4, :] for i in range(5))
    p = np.pad(g, 1, mode="edge")
    gx = (p[:-2, 2:] + 2 * p[1:-1, 2:] + p[2:, 2:]) - (p[:-2, :-2] + 2 * p[1:-1, :-2] + p[2:, :-2])
    gy = (p[2:, :-2] + 2 * p[2:, 1:-1] + p[2:, 2:]) - (p[:-2, :-2] + 2 * p[:-2, 1:-1] + p[:-2, 2:])
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
    return Image.fromarray(np.stack([edges] * 3, axis=-1), mode="RGB")


def _preprocessor(name: str) -> str:
    """Which control image a ControlNet expects, from its name."""
    lowered = name.lower()
    if "canny" in lowered:
        return "canny"
    return "depth" if "depth" in lowered else "none"


def _model_name(path: Path) -> str:
    """The name a model directory goes by: its own, or for a Hub cache snapshot
    (``models--owner--name/snapshots/<commit>``) the cache folder's."""
    return path.parent.parent.name if path.parent.name == "snapshots" else path.name


def _depth_dir(ref: str, ctx: LoadContext) -> Path:
    """Where the depth model a depth ControlNet's control image comes from is."""
    where = ctx.resolve(ref)
    if where is None:
        raise TaskFailed(
            f"the depth ControlNet needs the depth model {ref} "
            "(LOCAL_DEPTH_MODEL), which is not available locally"
        )
    return where


def depth_control(depth_pipe: Any, im: Image.Image) -> Image.Image:
    """A depth ControlNet's control image: grey levels, near white, far black
    (MiDaS's convention), the size of ``im``."""
    predicted = depth_pipe(im)["predicted_depth"].detach().float().cpu().numpy()
    d = np.nan_to_num(np.squeeze(predicted).astype(np.float64))
    config = depth_pipe.model.config
    if (
        config.model_type in _METRIC_DEPTH
        or getattr(config, "depth_estimation_type", "") == "metric"
    ):
        d = -d  # metric depth: far is large
    span = float(d.max() - d.min())
    grey = ((d - d.min()) / span * 255.0) if span > 0 else np.zeros_like(d)
    out = Image.fromarray(grey.round().astype(np.uint8), mode="L")
    if out.size != im.size:
        out = out.resize(im.size, Image.Resampling.BICUBIC)
    return out.convert("RGB")


def _load_controlnet(path: Path, ctx: LoadContext) -> _Loaded:
    """A full ControlNet pipeline directory, or a bare ControlNet plus the
    Stable Diffusion base (``controlnet_base``) it was trained against; for a
    depth ControlNet, the depth model too (looked up first: failing costs
    nothing then)."""
    extra: dict[str, Any] = {"preprocessor": _preprocessor(_model_name(path))}
    depth_dir = None
    if extra["preprocessor"] == "depth":
        if ctx.depth_model is None:
            log.warning(
                "depth ControlNet %s has no LOCAL_DEPTH_MODEL: the photo itself is its control",
                _model_name(path),
            )
            extra["preprocessor"] = "none"
        else:
            depth_dir = _depth_dir(ctx.depth_model, ctx)
    if (path / "model_index.json").is_file():
        pipe = _diffusion(path, ctx, "StableDiffusionControlNetPipeline")
    else:
        from diffusers import ControlNetModel

        base = ctx.resolve(ctx.controlnet_base)
        if base is None:
            raise TaskFailed(
                f"ControlNet needs its base model {ctx.controlnet_base}, which is not available "
                "locally (put it under LOCAL_MODELS_DIR)"
            )
        net = ControlNetModel.from_pretrained(path, dtype=ctx.dtype(), local_files_only=True)
        pipe = _diffusion(base, ctx, "StableDiffusionControlNetPipeline", controlnet=net)
    if depth_dir is not None:
        extra["depth"] = pipeline_loader("depth-estimation")(depth_dir, ctx)
    return _Loaded(pipe, ctx, extra)


def _run_controlnet(loaded: _Loaded, inputs: TaskInputs) -> TaskResult:
    side, multiple = _default_side(loaded.pipe)
    control = _fit(need_image(inputs), side, multiple)
    kind = loaded.extra["preprocessor"]
    if kind == "canny":
        control = canny(control)
    elif kind == "depth":
        control = depth_control(loaded.extra["depth"], control)
    out = loaded.pipe(prompt=need_text(inputs), image=control, **_steps(loaded.ctx))
    media: tuple[Blob, ...] = (png_blob(out.images[0]),)
    if kind == "depth":  # the generated image first: it is what later tasks take
        media += (png_blob(control),)
    return TaskResult(media=media, extra={"control": kind})


def _run_t2v(loaded: _Loaded, inputs: TaskInputs) -> TaskResult:
    out = loaded.pipe(prompt=need_text(inputs), **_steps(loaded.ctx))
    frames = out.frames[0]
    frames = list(frames) if not isinstance(frames, list) else frames
    fps = 8 if len(frames) >= 8 else max(1, math.ceil(len(frames) / 2))
    return TaskResult(media=(Blob(kind="video", mime="video/mp4", data=encode_video(frames, fps)),))


DIFFUSERS_ADAPTERS: dict[str, Adapter] = {
    "text-to-image": Adapter("diffusers", _load_t2i, _run_t2i),
    "image-to-image": Adapter("diffusers", _load_i2i, _run_i2i),
    "controlnet-sd": Adapter("diffusers", _load_controlnet, _run_controlnet),
    "text-to-video": Adapter("diffusers", _load_t2i, _run_t2v),
}
