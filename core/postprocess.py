"""Turn structured expert output into something people can see and hear.

Object detection gets its boxes drawn on the input image and segmentation
gets a coloured mask overlay, each as a new image a later task or turn can
use; :func:`depth_result` makes a colour depth map (the backends call it:
a depth map has no structured form worth keeping).  :func:`deliverable`,
when a result is stored for people: audio a model returns as WAV/FLAC/raw
is re-encoded to OGG/Opus and video that is not MP4 to MP4 (H.264), so both
play on phones (later tasks get the model's own, lossless output).  Runs in
a worker thread (Pillow and codec work is CPU-bound).
"""

from __future__ import annotations

import io
import logging
from dataclasses import replace
from typing import Any

from PIL import Image

from core.results import Blob, TaskInputs, TaskResult
from core.tasks import AUDIO, IMAGE, VIDEO

log = logging.getLogger(__name__)

# Audio types that play in chat apps on phones as they are.
MAX_VIDEO_OUT_FRAMES = 480  # a minute at 8 fps: generated clips are far shorter
PLAYABLE_AUDIO = {"audio/ogg", "audio/mpeg", "audio/mp3", "audio/mp4", "audio/aac"}


def draws(task: str, inputs: TaskInputs, result: TaskResult) -> bool:
    """Whether :func:`enrich` has something to draw for this result: boxes or
    masks, an input picture to draw them on, no picture made already.  Every
    other result passes through untouched (no thread, no drawing library)."""
    if result.media_of(IMAGE) is not None or inputs.image is None:
        return False
    return (task == "object-detection" and bool(result.boxes)) or (
        task == "image-segmentation" and bool(result.segments)
    )


def enrich(task: str, inputs: TaskInputs, result: TaskResult) -> TaskResult:
    """The result with what later tasks and people look at drawn (boxes, masks)."""
    if not draws(task, inputs, result) or inputs.image is None:
        return result
    try:
        from core.experts.images import draw_boxes, mask_overlay  # loaded only to draw

        if task == "object-detection":
            png = draw_boxes(inputs.image.data, result.boxes)
        else:
            png = mask_overlay(inputs.image.data, result.segments)
    except Exception:  # a drawing failure keeps the structured result
        log.exception("post-processing %s failed", task)
        return result
    return replace(result, media=(*result.media, Blob(IMAGE, "image/png", png)))


def deliverable(result: TaskResult) -> TaskResult:
    """The result with its audio and video in formats phones play."""
    return _transcode_video(_transcode_audio(result))


def depth_result(depth: Any) -> TaskResult:
    """A depth-estimation result from raw depth values (an array or nested
    lists) or a depth image (PNG bytes): a colour-mapped PNG people can read at
    a glance, plus the value range so the answer can say how deep the scene
    is.  An image only has grey levels, so its range is marked relative.
    Raises ValueError (or OSError for unreadable bytes) for anything that is
    not a 2-D map."""
    import numpy as np  # here, not at import: only depth maps need it

    from core.experts.images import depth_to_image

    extra: dict[str, Any] = {}
    if isinstance(depth, bytes | bytearray):
        with Image.open(io.BytesIO(depth)) as im:
            values = np.asarray(im, dtype=np.float64)
        if values.ndim == 3:
            values = values[..., :3].mean(axis=-1)
        extra["depth_scale"] = "relative (grey levels of a depth image)"
    else:
        values = np.asarray(depth, dtype=np.float64)
    png = depth_to_image(values)
    finite = values[np.isfinite(values)]
    if finite.size:
        extra["depth_min"] = round(float(finite.min()), 4)
        extra["depth_max"] = round(float(finite.max()), 4)
    return TaskResult(media=(Blob(IMAGE, "image/png", png),), extra=extra)


def _transcode_audio(result: TaskResult) -> TaskResult:
    if not any(m.kind == AUDIO and m.mime not in PLAYABLE_AUDIO for m in result.media):
        return result
    from core.experts.audio import decode_audio, encode_speech

    out: list[Blob] = []
    for m in result.media:
        if m.kind == AUDIO and m.mime not in PLAYABLE_AUDIO:
            try:
                samples, sr = decode_audio(m.data, target_sr=None, mono=False)
                data, mime = encode_speech(samples, sr)
                m = Blob(AUDIO, mime, data, m.handle)
            except Exception:  # keep the original: a WAV still beats nothing
                log.exception("re-encoding %s audio failed", m.mime)
        out.append(m)
    return replace(result, media=tuple(out))


def _transcode_video(result: TaskResult) -> TaskResult:
    """A model's GIF/WebM/… video becomes MP4 (H.264), which every client plays."""
    if not any(m.kind == VIDEO and m.mime != "video/mp4" for m in result.media):
        return result
    from core.experts.video import decode_video_frames, encode_video

    out: list[Blob] = []
    for m in result.media:
        if m.kind == VIDEO and m.mime != "video/mp4":
            try:
                frames = decode_video_frames(m.data, num_frames=MAX_VIDEO_OUT_FRAMES, size=None)
                m = Blob(VIDEO, "video/mp4", encode_video(frames, fps=8), m.handle)
            except Exception:  # keep the original: the user can still download it
                log.exception("re-encoding %s video failed", m.mime)
        out.append(m)
    return replace(result, media=tuple(out))
