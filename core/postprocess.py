"""Turn structured expert output into something people can see.

Object detection gets its boxes drawn on the input image and segmentation
gets a coloured mask overlay, each as a new image a later task or turn can
use.  Runs in a worker thread (Pillow work is CPU-bound).
"""

from __future__ import annotations

import logging
from dataclasses import replace

from core.results import Blob, TaskInputs, TaskResult
from core.tasks import IMAGE

log = logging.getLogger(__name__)


def enrich(task: str, inputs: TaskInputs, result: TaskResult) -> TaskResult:
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
