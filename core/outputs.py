"""Is what a model returned an answer to the task it was given?

A model server that answers 200 with its HTML error page, a JSON
``{"error": …}``, nothing at all, or a picture where speech was asked for has
failed, however politely.  :func:`check_output` is the one check every
backend's result passes (the executor calls it after ``backend.run`` returns,
before post-processing): it raises :class:`core.errors.TaskFailed`
(retryable, so the executor tries the next candidate) with a message naming
the model and what came back — "model x/y returned an HTML page instead of
audio".  The server's own words are logged, never put in the message: the
message reaches the user and the language model.

Rules, by what the task produces (:mod:`core.tasks`):

* every media blob decodes as its kind: an image with Pillow under
  :data:`OUTPUT_MAX_PIXELS` (its own limit, not the ``MAX_IMAGE_PIXELS``
  setting for uploads), audio with soundfile/PyAV (at least one sample),
  video with PyAV (at least one frame; an animated GIF counts);
* an image, audio or video task returns at least one blob of that kind;
* classification tasks return labels, question answering an answer (or a
  text), segmentation segments (masks must be images), every other text task
  a non-empty text; object detection and token classification may return
  nothing (an empty scene, a sentence without names), but what they return
  must have the right shape (names, finite scores and coordinates).

CPU-bound when there is media to decode: :func:`check_output_async` runs
it in a worker thread then, and on the event loop when the result is text
and numbers or a small picture (a thread hop costs more than checking those).
"""

from __future__ import annotations

import asyncio
import io
import json
import logging
import math
from collections.abc import Iterable

from PIL import Image

from core.errors import TaskFailed
from core.mediatypes import HTML, MediaType, TooManyPixels, describe, sniff, verify_image
from core.results import Blob, TaskResult
from core.tasks import AUDIO, IMAGE, TASKS, TEXT, VIDEO

log = logging.getLogger(__name__)

# A model's output image is opened only under this many pixels (a decompression
# bomb guard).  Its own limit: the uploads' MAX_IMAGE_PIXELS is an operator's
# choice about what people may send, and lowering it must not fail generation.
OUTPUT_MAX_PIXELS = 40_000_000
OUTPUT_MAX_AUDIO_SECONDS = 1800.0  # decoding stops here; a longer answer is still accepted
OUTPUT_MAX_VIDEO_SECONDS = 600.0
# Pictures this small are checked on the event loop (well under a millisecond:
# less than the hop to a worker thread); larger ones, audio and video in a thread.
INLINE_IMAGE_BYTES = 16 * 1024
INLINE_IMAGE_PIXELS = 256 * 256

LABEL_TASKS = frozenset(
    {
        "text-classification",
        "image-classification",
        "audio-classification",
        "video-classification",
    }
)
ANSWER_TASKS = frozenset(
    {"question-answering", "visual-question-answering", "document-question-answering"}
)
# An empty list is a real answer here: nothing in the picture, no names in the text.
MAY_BE_EMPTY = frozenset({"object-detection", "token-classification"})

_NOUN = {IMAGE: "an image", AUDIO: "audio", VIDEO: "a video"}
_ERROR_KEYS = ("error", "errors", "detail", "message")
_BLANK_SCAN = 64  # bytes looked at before scanning a whole body for non-blank
_TEXT_SCAN = 65_536  # an error body longer than this is just "plain text"


def check_output(
    task: str, model_id: str, result: TaskResult, *, max_pixels: int = OUTPUT_MAX_PIXELS
) -> None:
    """Raise TaskFailed unless ``result`` is a real answer to ``task``."""
    who = f"model {model_id}"
    for blob in result.media:
        _check_blob(who, blob, max_pixels)
    _check_shapes(who, result, max_pixels)
    _check_required(task, who, result)


async def check_output_async(task: str, model_id: str, result: TaskResult) -> None:
    """:func:`check_output`, in a worker thread when it has media to decode:
    audio or video, or pictures (masks included) over :data:`INLINE_IMAGE_BYTES`
    or :data:`INLINE_IMAGE_PIXELS`."""
    pictures = [b.data for b in result.media if b.kind == IMAGE]
    pictures += [s.mask for s in result.segments if s.mask]
    heavy = any(b.kind != IMAGE for b in result.media)
    if heavy or sum(map(len, pictures)) > INLINE_IMAGE_BYTES or not all(map(_small, pictures)):
        await asyncio.to_thread(check_output, task, model_id, result)
    else:
        check_output(task, model_id, result)


def _small(data: bytes) -> bool:
    """Whether a picture's header says it is at most :data:`INLINE_IMAGE_PIXELS`
    (a few compressed bytes can stand for a huge picture)."""
    try:
        with Image.open(io.BytesIO(data)) as im:  # the header only: nothing decoded
            width, height = im.size
    except Exception:  # unreadable: the check in the thread says what it is
        return False
    return width * height <= INLINE_IMAGE_PIXELS


# --- media ---------------------------------------------------------------------


def _check_blob(who: str, blob: Blob, max_pixels: int) -> None:
    kind = blob.kind
    noun = _NOUN.get(kind)
    if noun is None:
        raise TaskFailed(f"{who} returned a file of an unknown kind ({kind})")
    data = blob.data
    if not data[:_BLANK_SCAN].strip() and not data.strip():
        raise TaskFailed(f"{who} returned an empty response instead of {noun}")
    found = sniff(data)
    if found is not None and found.kind not in (IMAGE, AUDIO, VIDEO):
        _log_body(who, data)
        raise TaskFailed(f"{who} returned {_what_text(data, found)} instead of {noun}")
    if kind == IMAGE:
        _check_image(who, data, found, max_pixels)
    elif kind == AUDIO:
        _check_audio(who, data, found)
    else:
        _check_video(who, data, found)


def _check_image(who: str, data: bytes, found: MediaType | None, max_pixels: int) -> None:
    if found is None or found.kind != IMAGE:
        raise TaskFailed(f"{who} returned {_what_media(found)} instead of an image")
    try:
        verify_image(data, found, max_pixels)
    except TooManyPixels as exc:
        raise TaskFailed(f"{who} returned an image too large to open ({exc})") from None
    except ValueError as exc:
        raise TaskFailed(f"{who} returned a damaged {found.ext.upper()} image") from exc


def _check_audio(who: str, data: bytes, found: MediaType | None) -> None:
    from core.experts.audio import measure_audio  # codecs load on first use

    if found is not None and found.kind == IMAGE:
        raise TaskFailed(f"{who} returned {_what_media(found)} instead of audio")
    try:
        measure_audio(data, max_seconds=OUTPUT_MAX_AUDIO_SECONDS)
    except ValueError as exc:
        what = f"a damaged {found.ext.upper()} file" if found else "data that is not audio"
        raise TaskFailed(f"{who} returned {what} instead of audio") from exc


def _check_video(who: str, data: bytes, found: MediaType | None) -> None:
    from core.experts.video import NoVideoStream, measure_video

    if found is not None and found.kind == IMAGE and found.mime != "image/gif":
        raise TaskFailed(f"{who} returned {_what_media(found)} instead of a video")
    try:
        measure_video(data, max_seconds=OUTPUT_MAX_VIDEO_SECONDS)
    except NoVideoStream:
        raise TaskFailed(f"{who} returned a file with no video in it instead of a video") from None
    except ValueError as exc:
        what = f"a damaged {found.ext.upper()} file" if found else "data that is not a video"
        raise TaskFailed(f"{who} returned {what} instead of a video") from exc


def _what_media(found: MediaType | None) -> str:
    if found is None:
        return "data of no known type"
    article = "an" if found.ext[:1].upper() in "AEFHILMNORSX" else "a"
    noun = {IMAGE: "image", AUDIO: "audio file", VIDEO: "video"}.get(found.kind, "file")
    return f"{article} {found.ext.upper()} {noun}"


def _what_text(data: bytes, found: MediaType) -> str:
    """Words for a body that is text or a document, not media."""
    if found == HTML:
        return "an HTML page"
    if found.kind != TEXT:
        return describe(found)
    text = data[:_TEXT_SCAN].decode("utf-8", errors="replace").strip()
    try:
        parsed = json.loads(text)
    except ValueError:
        return "an XML document" if text.startswith("<") else "plain text"
    if isinstance(parsed, dict) and any(k in parsed for k in _ERROR_KEYS):
        return "an error message (JSON)"
    return "JSON data"


def _log_body(who: str, data: bytes) -> None:
    head = data[:300].decode("utf-8", errors="replace")
    log.warning("%s answered with %r", who, head)


# --- structured parts ----------------------------------------------------------


def _finite(x: object) -> bool:
    return isinstance(x, int | float) and not isinstance(x, bool) and math.isfinite(x)


def _named(x: object) -> bool:
    return isinstance(x, str) and bool(x.strip())


def _check_shapes(who: str, result: TaskResult, max_pixels: int) -> None:
    if result.text is not None and not isinstance(result.text, str):
        raise TaskFailed(f"{who} returned a text that is not text")
    _all(who, "labels", ((_named(x.label), _finite(x.score)) for x in result.labels))
    _all(
        who,
        "entities",
        (
            (isinstance(e.word, str), isinstance(e.group, str), _finite(e.score))
            for e in result.entities
        ),
    )
    _all(
        who,
        "boxes",
        (
            (_named(b.label), _finite(b.score), *map(_finite, (b.xmin, b.ymin, b.xmax, b.ymax)))
            for b in result.boxes
        ),
    )
    _all(
        who,
        "answers",
        ((isinstance(a.answer, str), a.score is None or _finite(a.score)) for a in result.answers),
    )
    _all(
        who,
        "segments",
        ((isinstance(s.label, str), s.score is None or _finite(s.score)) for s in result.segments),
    )
    for seg in result.segments:
        if seg.mask is None:
            continue
        found = sniff(seg.mask)
        try:
            if found is None or found.kind != IMAGE:
                raise ValueError("not an image")
            verify_image(seg.mask, found, max_pixels)
        except ValueError as exc:  # TooManyPixels too
            raise TaskFailed(f"{who} returned a segment mask that is not a readable image") from exc


def _all(who: str, what: str, checks: Iterable[tuple[bool, ...]]) -> None:
    if not all(all(c) for c in checks):
        raise TaskFailed(
            f"{who} returned {what} of the wrong shape (missing names, or scores or "
            "coordinates that are not numbers)"
        )


def _check_required(task: str, who: str, result: TaskResult) -> None:
    spec = TASKS.get(task)
    if spec is None or task in MAY_BE_EMPTY:
        return
    if task in LABEL_TASKS:
        if not result.labels:
            raise TaskFailed(f"{who} returned no labels")
        return
    if task in ANSWER_TASKS:
        if not any(a.answer.strip() for a in result.answers) and not (result.text or "").strip():
            raise TaskFailed(f"{who} returned no answer")
        return
    if task == "image-segmentation":
        if not result.segments and result.media_of(IMAGE) is None:
            raise TaskFailed(f"{who} returned no segments")
        return
    if spec.output in _NOUN:
        if result.media_of(spec.output) is None:
            other = next(iter(result.media), None)
            got = f"{_NOUN[other.kind]} but no" if other is not None else "no"
            raise TaskFailed(f"{who} returned {got} {spec.output}")
        return
    if not (result.as_text() or "").strip():
        raise TaskFailed(f"{who} returned no text")
