"""diffusers adapters of the local backend: text-to-image, image-to-image,
ControlNet and text-to-video.  Same contract as
:mod:`core.experts.local_tasks`; diffusers and torch are imported inside the
functions.

A ControlNet is given the control image its name says it was trained on,
made by :mod:`core.experts.local_control` (canny and scribble edges, depth and
normal maps from ``LoadContext.depth_model``, segmentation maps from
``LoadContext.seg_model``); except for canny, that image is returned after the
drawing, so people see what steered it.  ControlNets whose preprocessor cannot
run here get the photo as it is, and ``extra["control"]`` says so.
"""

from __future__ import annotations

import inspect
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from PIL import Image

from core.errors import TaskCode, TaskFailed
from core.experts.local_control import (
    NEEDS_MODEL,
    SHOWN,
    canny,
    control_image,
    depth_control,
    label,
    missing_detector,
    no_helper_model,
    preprocessor,
)
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

__all__ = ["DIFFUSERS_ADAPTERS", "canny", "depth_control"]  # the last two from local_control


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


def _model_name(path: Path) -> str:
    """The name a model directory goes by: its own, or for a Hub cache snapshot
    (``models--owner--name/snapshots/<commit>``) the cache folder's."""
    return path.parent.parent.name if path.parent.name == "snapshots" else path.name


_preprocessor = preprocessor  # the name earlier callers import


def _helper_dir(kind: str, ref: str, ctx: LoadContext) -> Path:
    """Where the model making a ``kind`` ControlNet's control image is."""
    where = ctx.resolve(ref)
    if where is None:
        setting, ptask = NEEDS_MODEL[kind]
        raise TaskFailed(TaskCode.HELPER_MISSING, kind=kind, task=ptask, model=ref, setting=setting)
    return where


def _load_controlnet(path: Path, ctx: LoadContext) -> _Loaded:
    """A full ControlNet pipeline directory, or a bare ControlNet plus the
    Stable Diffusion base (``controlnet_base``) it was trained against; for a
    depth, normal or seg ControlNet, the model making its control image too
    (looked up first: failing costs nothing then)."""
    name = _model_name(path)
    kind = preprocessor(name)
    helper_dir = None
    if kind in NEEDS_MODEL:
        ref = ctx.seg_model if kind == "seg" else ctx.depth_model
        if ref is None:
            no_helper_model(name, kind)
            kind = "none"
        else:
            helper_dir = _helper_dir(kind, ref, ctx)
    extra: dict[str, Any] = {
        "preprocessor": kind,
        "label": label(kind, missing_detector(name) if kind == "none" else None),
    }
    if (path / "model_index.json").is_file():
        pipe = _diffusion(path, ctx, "StableDiffusionControlNetPipeline")
    else:
        from diffusers import ControlNetModel

        base = ctx.resolve(ctx.controlnet_base)
        if base is None:
            raise TaskFailed(TaskCode.BASE_MISSING, model=ctx.controlnet_base)
        net = ControlNetModel.from_pretrained(path, dtype=ctx.dtype(), local_files_only=True)
        pipe = _diffusion(base, ctx, "StableDiffusionControlNetPipeline", controlnet=net)
    if helper_dir is not None:
        extra["helper"] = pipeline_loader(NEEDS_MODEL[kind][1])(helper_dir, ctx)
    return _Loaded(pipe, ctx, extra)


def _run_controlnet(loaded: _Loaded, inputs: TaskInputs) -> TaskResult:
    side, multiple = _default_side(loaded.pipe)
    kind = loaded.extra["preprocessor"]
    control = control_image(
        kind, _fit(need_image(inputs), side, multiple), loaded.extra.get("helper")
    )
    out = loaded.pipe(prompt=need_text(inputs), image=control, **_steps(loaded.ctx))
    media: tuple[Blob, ...] = (png_blob(out.images[0]),)
    if kind in SHOWN:  # the generated image first: it is what later tasks take
        media += (png_blob(control),)
    return TaskResult(media=media, extra={"control": loaded.extra["label"]})


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
