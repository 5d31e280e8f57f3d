"""Per-task adapters of the local backend: load a model directory, run it, normalise.

Each adapter is a pair of plain, blocking functions (the backend calls them in
a worker thread): ``load(path, ctx)`` builds a ``transformers`` or
``diffusers`` pipeline from a directory, and ``run(pipe, inputs)`` turns one
call's output into a :class:`TaskResult`.  torch, transformers and diffusers
are imported inside the functions: the base install has none of them.

This module holds the shared pieces (load context, input checks, helpers)
and the tasks that run through a ``transformers`` pipeline.  transformers 5
dropped the summarization, translation, text2text, image-to-text,
question-answering and VQA pipelines; those adapters call the model classes
directly, as the pipelines used to, and live in :mod:`core.experts.local_direct`.
The diffusers adapters live in :mod:`core.experts.local_diffusion`.
"""

from __future__ import annotations

import io
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image, ImageOps

from core.errors import TaskCode, TaskFailed
from core.experts.audio import decode_audio
from core.experts.video import decode_video_frames
from core.postprocess import depth_result
from core.results import Blob, Box, Entity, Label, Segment, TaskInputs, TaskResult

TOP_K = 5
MAX_NEW_TOKENS = 128


@dataclass(frozen=True, slots=True)
class LoadContext:
    """What a loader needs besides the directory."""

    device: str  # "cpu", "cuda", "cuda:1"…
    resolve: Callable[[str], Path | None]  # a model id → its local directory
    controlnet_base: str  # the Stable Diffusion model a bare ControlNet plugs into
    steps: int | None = None  # diffusion steps; None = the pipeline's default
    depth_model: str | None = None  # the depth-estimation model a depth ControlNet's input needs
    seg_model: str | None = None  # the segmentation model a seg ControlNet's input needs

    @property
    def half(self) -> bool:
        return self.device.startswith("cuda")

    def dtype(self) -> Any:
        import torch

        return torch.float16 if self.half else torch.float32


@dataclass(frozen=True, slots=True)
class Adapter:
    library: str  # the package the loader needs besides torch
    load: Callable[[Path, LoadContext], Any]
    run: Callable[[Any, TaskInputs], TaskResult]


# --- inputs --------------------------------------------------------------------


def _unreadable(kind: str, exc: Exception) -> TaskFailed:
    return TaskFailed(TaskCode.INPUT_UNREADABLE, retryable=False, kind=kind, said=str(exc))


def need_text(inputs: TaskInputs) -> str:
    if not inputs.text or not inputs.text.strip():
        raise TaskFailed(TaskCode.NEEDS_ARGUMENT, retryable=False, kind="text")
    return inputs.text


def need_image(inputs: TaskInputs) -> Image.Image:
    if inputs.image is None:
        raise TaskFailed(TaskCode.NEEDS_ARGUMENT, retryable=False, kind="image")
    try:
        im = Image.open(io.BytesIO(inputs.image.data))
        im.load()
    except (OSError, ValueError, Image.DecompressionBombError) as exc:
        raise _unreadable("image", exc) from exc
    return ImageOps.exif_transpose(im).convert("RGB")


def _audio(inputs: TaskInputs, sampling_rate: int) -> dict[str, Any]:
    if inputs.audio is None:
        raise TaskFailed(TaskCode.NEEDS_ARGUMENT, retryable=False, kind="audio")
    try:
        samples, sr = decode_audio(inputs.audio.data, target_sr=sampling_rate)
    except ValueError as exc:
        raise _unreadable("audio", exc) from exc
    return {"raw": samples, "sampling_rate": sr}


def png_bytes(im: Image.Image) -> bytes:
    buf = io.BytesIO()
    im.save(buf, format="PNG")
    return buf.getvalue()


def png_blob(im: Image.Image) -> Blob:
    return Blob(kind="image", mime="image/png", data=png_bytes(im.convert("RGB")))


def _labels(raw: Any) -> tuple[Label, ...]:
    if raw and isinstance(raw[0], list):  # one list per input
        raw = raw[0]
    items = [Label(str(d["label"]), float(d["score"])) for d in raw]
    return tuple(sorted(items, key=lambda x: -x.score))


def generated_text(raw: Any) -> str:
    """The text of a generation pipeline's first output (a string or a chat)."""
    first = raw[0] if isinstance(raw, list) else raw
    if isinstance(first, list):
        first = first[0]
    text = first.get("generated_text", "") if isinstance(first, dict) else first
    if isinstance(text, list):  # chat input: the conversation with the reply last
        text = text[-1].get("content", "") if text else ""
    return str(text).strip()


# --- transformers pipelines ----------------------------------------------------------


def pipeline_loader(ptask: str) -> Callable[[Path, LoadContext], Any]:
    def load(path: Path, ctx: LoadContext) -> Any:
        from transformers import pipeline
        from transformers.utils import logging as tf_logging

        tf_logging.disable_progress_bar()  # a server's log, not a terminal
        # ``path`` is always an existing directory, which transformers reads
        # without asking the Hub.  (pipeline() forwards local_files_only to
        # the pipeline class too, where most reject it, so it is not passed.)
        return pipeline(ptask, model=str(path), device=ctx.device, dtype=ctx.dtype())  # type: ignore[call-overload]

    return load


def _run_text_cls(pipe: Any, inputs: TaskInputs) -> TaskResult:
    return TaskResult(labels=_labels(pipe(need_text(inputs), top_k=TOP_K)))


def _run_token_cls(pipe: Any, inputs: TaskInputs) -> TaskResult:
    raw = pipe(need_text(inputs), aggregation_strategy="simple")
    return TaskResult(
        entities=tuple(
            Entity(
                word=str(d["word"]),
                group=str(d.get("entity_group") or d.get("entity")),
                score=float(d["score"]),
                start=None if d.get("start") is None else int(d["start"]),
                end=None if d.get("end") is None else int(d["end"]),
            )
            for d in raw
        )
    )


def _run_text_gen(pipe: Any, inputs: TaskInputs) -> TaskResult:
    raw = pipe(need_text(inputs), max_new_tokens=MAX_NEW_TOKENS, return_full_text=False)
    return TaskResult(text=generated_text(raw))


def run_chat(pipe: Any, inputs: TaskInputs) -> TaskResult:
    if getattr(pipe.tokenizer, "chat_template", None):
        chat = [{"role": "user", "content": need_text(inputs)}]
        return TaskResult(text=generated_text(pipe(chat, max_new_tokens=MAX_NEW_TOKENS)))
    return _run_text_gen(pipe, inputs)


def _run_image_cls(pipe: Any, inputs: TaskInputs) -> TaskResult:
    return TaskResult(labels=_labels(pipe(need_image(inputs), top_k=TOP_K)))


def _run_detection(pipe: Any, inputs: TaskInputs) -> TaskResult:
    raw = pipe(need_image(inputs))
    boxes = tuple(
        Box(
            str(d["label"]),
            float(d["score"]),
            *(float(d["box"][k]) for k in ("xmin", "ymin", "xmax", "ymax")),
        )
        for d in raw
    )
    return TaskResult(boxes=tuple(sorted(boxes, key=lambda b: -b.score)))


def _run_segmentation(pipe: Any, inputs: TaskInputs) -> TaskResult:
    segments = []
    for d in pipe(need_image(inputs)):
        mask = d.get("mask")
        score = d.get("score")
        segments.append(
            Segment(
                label=str(d.get("label") or "segment"),
                score=None if score is None else float(score),
                mask=None if mask is None else png_bytes(mask.convert("L")),
            )
        )
    return TaskResult(segments=tuple(segments))


def _sampling_rate(pipe: Any) -> int:
    return int(getattr(pipe.feature_extractor, "sampling_rate", 16000))


def _run_audio_cls(pipe: Any, inputs: TaskInputs) -> TaskResult:
    return TaskResult(labels=_labels(pipe(_audio(inputs, _sampling_rate(pipe)), top_k=TOP_K)))


def _run_asr(pipe: Any, inputs: TaskInputs) -> TaskResult:
    return TaskResult(text=str(pipe(_audio(inputs, _sampling_rate(pipe)))["text"]).strip())


def on_device(model: Any, batch: Any) -> dict[str, Any]:
    """``batch`` on the model's device, floating tensors in its dtype (fp16 on GPU)."""
    return {
        k: v.to(model.device, model.dtype) if v.is_floating_point() else v.to(model.device)
        for k, v in batch.items()
    }


def softmax_top(logits: Any, id2label: dict[int, str]) -> tuple[Label, ...]:
    probs = logits.float().softmax(-1)[0]
    k = min(TOP_K, probs.shape[-1])
    scores, ids = probs.topk(k)
    return tuple(
        Label(str(id2label.get(int(i), f"LABEL_{int(i)}")), float(s))
        for s, i in zip(scores, ids, strict=True)
    )


def _run_video_cls(pipe: Any, inputs: TaskInputs) -> TaskResult:
    """Frames spread over the whole clip (the pipeline itself reads only a path
    and takes the first frames), then the pipeline's processor and model."""
    import torch

    if inputs.video is None:
        raise TaskFailed(TaskCode.NEEDS_ARGUMENT, retryable=False, kind="video")
    model = pipe.model
    count = int(getattr(model.config, "num_frames", 16) or 16)
    try:
        frames = decode_video_frames(inputs.video.data, num_frames=count)
    except ValueError as exc:
        raise _unreadable("video", exc) from exc
    frames = [frames[min(len(frames) - 1, i * len(frames) // count)] for i in range(count)]
    if pipe.video_processor is not None:
        batch = pipe.video_processor(
            [np.stack(frames)], do_sample_frames=False, return_tensors="pt"
        )
    else:
        batch = pipe.image_processor(list(frames), return_tensors="pt")
    with torch.inference_mode():
        logits = model(**on_device(model, batch)).logits
    return TaskResult(labels=softmax_top(logits, model.config.id2label))


def _run_depth(pipe: Any, inputs: TaskInputs) -> TaskResult:
    """The pipeline's raw ``predicted_depth`` (not its 8-bit ``depth`` image) as
    a colour-mapped PNG, with the value range for the answer."""
    out = pipe(need_image(inputs))
    return depth_result(out["predicted_depth"].detach().float().cpu().numpy())


TF = "transformers"

PIPELINE_ADAPTERS: dict[str, Adapter] = {
    "text-classification": Adapter(TF, pipeline_loader("text-classification"), _run_text_cls),
    "token-classification": Adapter(TF, pipeline_loader("token-classification"), _run_token_cls),
    "text-generation": Adapter(TF, pipeline_loader("text-generation"), _run_text_gen),
    "image-classification": Adapter(TF, pipeline_loader("image-classification"), _run_image_cls),
    "object-detection": Adapter(TF, pipeline_loader("object-detection"), _run_detection),
    "image-segmentation": Adapter(TF, pipeline_loader("image-segmentation"), _run_segmentation),
    "depth-estimation": Adapter(TF, pipeline_loader("depth-estimation"), _run_depth),
    "video-classification": Adapter(TF, pipeline_loader("video-classification"), _run_video_cls),
    "audio-classification": Adapter(TF, pipeline_loader("audio-classification"), _run_audio_cls),
    "automatic-speech-recognition": Adapter(
        TF, pipeline_loader("automatic-speech-recognition"), _run_asr
    ),
}
