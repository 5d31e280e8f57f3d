"""Turn structured expert output into something people can see and hear.

Object detection gets its boxes drawn on the input image and segmentation
gets a coloured mask overlay, each as a new image a later task or turn can
use; audio a model returns as WAV/FLAC/raw is re-encoded to OGG/Opus so it
plays on phones.  Runs in a worker thread (Pillow and codec work is
CPU-bound).
"""

from __future__ import annotations

import logging
from dataclasses import replace

from core.results import Blob, TaskInputs, TaskResult
from core.tasks import AUDIO, IMAGE

log = logging.getLogger(__name__)

# Audio types that play in chat apps on phones as they are.
PLAYABLE_AUDIO = {"audio/ogg", "audio/mpeg", "audio/mp3", "audio/mp4", "audio/aac"}


def enrich(task: str, inputs: TaskInputs, result: TaskResult) -> TaskResult:
    result = _transcode_audio(result)
    if result.media_of(IMAGE) is not None or inputs.image is None:
        return result
    try:
        from core.experts import media

        if task == "object-detection" and result.boxes:
            png = media.draw_boxes(inputs.image.data, result.boxes)
        elif task == "image-segmentation" and result.segments:
            png = media.mask_overlay(inputs.image.data, result.segments)
        else:
            return result
    except Exception:  # a drawing failure keeps the structured result
        log.exception("post-processing %s failed", task)
        return result
    return replace(result, media=(*result.media, Blob(IMAGE, "image/png", png)))


def _transcode_audio(result: TaskResult) -> TaskResult:
    if not any(m.kind == AUDIO and m.mime not in PLAYABLE_AUDIO for m in result.media):
        return result
    from core.experts import media

    out: list[Blob] = []
    for m in result.media:
        if m.kind == AUDIO and m.mime not in PLAYABLE_AUDIO:
            try:
                samples, sr = media.decode_audio(m.data, target_sr=None, mono=False)
                data, mime = media.encode_speech(samples, sr)
                m = Blob(AUDIO, mime, data, m.handle)
            except Exception:  # keep the original: a WAV still beats nothing
                log.exception("re-encoding %s audio failed", m.mime)
        out.append(m)
    return replace(result, media=tuple(out))
