"""Is what a model returned an answer to the task it was given?

A model server that answers 200 with its HTML error page, a JSON
``{"error": …}``, nothing at all, or a picture where speech was asked for has
failed, however politely.  :func:`check_output` is the one check every
backend's result passes (the executor calls it after ``backend.run`` returns,
before post-processing): it raises :class:`core.errors.TaskFailed`
(retryable, so the executor tries the next candidate) with a
:class:`~core.errors.TaskCode` naming the model and what came back
(``OUTPUT_WRONG_KIND``, ``got="html"``, ``expected="audio"``: the adapters
word it "model x/y returned an HTML page instead of audio").  The server's
own words are logged, never put in the error: it reaches the user and the
language model.

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

import io
import json
import logging
import math
from collections.abc import Iterable

from PIL import Image

from core.errors import TaskCode, TaskFailed
from core.mediatypes import HTML, MediaType, TooManyPixels, describe, sniff, verify_image
from core.results import Blob, TaskResult
from core.tasks import AUDIO, IMAGE, TASKS, TEXT, VIDEO
from core.threads import work

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

_MEDIA = (IMAGE, AUDIO, VIDEO)
_ERROR_KEYS = ("error", "errors", "detail", "message")
_BLANK_SCAN = 64  # bytes looked at before scanning a whole body for non-blank
_TEXT_SCAN = 65_536  # an error body longer than this is just "plain text"


def check_output(
    task: str, model_id: str, result: TaskResult, *, max_pixels: int = OUTPUT_MAX_PIXELS
) -> None:
    """Raise TaskFailed unless ``result`` is a real answer to ``task``."""
    for blob in result.media:
        _check_blob(model_id, blob, max_pixels)
    _check_shapes(model_id, result, max_pixels)
    _check_required(task, model_id, result)


async def check_output_async(task: str, model_id: str, result: TaskResult) -> None:
    """:func:`check_output`, in a worker thread when it has media to decode:
    audio or video, or pictures (masks included) over :data:`INLINE_IMAGE_BYTES`
    or :data:`INLINE_IMAGE_PIXELS`."""
    pictures = [b.data for b in result.media if b.kind == IMAGE]
    pictures += [s.mask for s in result.segments if s.mask]
    heavy = any(b.kind != IMAGE for b in result.media)
    if heavy or sum(map(len, pictures)) > INLINE_IMAGE_BYTES or not all(map(_small, pictures)):
        await work(check_output, task, model_id, result)
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


def _wrong(model: str, expected: str, got: str, found: MediaType | None = None) -> TaskFailed:
    """``model`` returned ``got`` instead of ``expected`` (with the format
    and kind of what it returned, when it is media or damaged)."""
    err = TaskFailed(TaskCode.OUTPUT_WRONG_KIND, model=model, expected=expected, got=got)
    if found is not None and got in ("media", "damaged"):
        err.fields["format"] = found.ext
        if got == "media":
            err.fields["kind"] = found.kind
    return err


def _check_blob(who: str, blob: Blob, max_pixels: int) -> None:
    kind = blob.kind
    if kind not in _MEDIA:
        raise TaskFailed(TaskCode.OUTPUT_UNKNOWN_KIND, model=who, kind=kind)
    data = blob.data
    if not data[:_BLANK_SCAN].strip() and not data.strip():
        raise _wrong(who, kind, "empty")
    found = sniff(data)
    if found is not None and found.kind not in (IMAGE, AUDIO, VIDEO):
        _log_body(who, data)
        got = _what_text(data, found)
        if got == "document":
            raise TaskFailed(
                TaskCode.OUTPUT_WRONG_KIND,
                model=who,
                expected=kind,
                got=got,
                format=found.ext,
                content=describe(found),
            )
        raise _wrong(who, kind, got)
    if kind == IMAGE:
        _check_image(who, data, found, max_pixels)
    elif kind == AUDIO:
        _check_audio(who, data, found)
    else:
        _check_video(who, data, found)


def _check_image(who: str, data: bytes, found: MediaType | None, max_pixels: int) -> None:
    if found is None or found.kind != IMAGE:
        raise _wrong(who, IMAGE, *_what_media(found))
    try:
        verify_image(data, found, max_pixels)
    except TooManyPixels as exc:
        err = TaskFailed(TaskCode.OUTPUT_IMAGE_TOO_LARGE, model=who, limit=exc.limit)
        if exc.size is not None:
            err.fields["width"], err.fields["height"] = exc.size
        raise err from None
    except ValueError as exc:
        raise TaskFailed(TaskCode.OUTPUT_IMAGE_DAMAGED, model=who, format=found.ext) from exc


def _check_audio(who: str, data: bytes, found: MediaType | None) -> None:
    from core.experts.audio import measure_audio  # codecs load on first use

    if found is not None and found.kind == IMAGE:
        raise _wrong(who, AUDIO, *_what_media(found))
    try:
        measure_audio(data, max_seconds=OUTPUT_MAX_AUDIO_SECONDS)
    except ValueError as exc:
        raise _wrong(who, AUDIO, "damaged" if found else "not_media", found) from exc


def _check_video(who: str, data: bytes, found: MediaType | None) -> None:
    from core.experts.video import NoVideoStream, measure_video

    if found is not None and found.kind == IMAGE and found.mime != "image/gif":
        raise _wrong(who, VIDEO, *_what_media(found))
    try:
        measure_video(data, max_seconds=OUTPUT_MAX_VIDEO_SECONDS)
    except NoVideoStream:
        raise _wrong(who, VIDEO, "no_video") from None
    except ValueError as exc:
        raise _wrong(who, VIDEO, "damaged" if found else "not_media", found) from exc


def _what_media(found: MediaType | None) -> tuple[str, MediaType | None]:
    """``got`` for media of another kind (and the type, for its format)."""
    return ("unknown", None) if found is None else ("media", found)


def _what_text(data: bytes, found: MediaType) -> str:
    """``got`` for a body that is text or a document, not media."""
    if found == HTML:
        return "html"
    if found.kind != TEXT:
        return "document"
    text = data[:_TEXT_SCAN].decode("utf-8", errors="replace").strip()
    try:
        parsed = json.loads(text)
    except ValueError:
        return "xml" if text.startswith("<") else "text"
    if isinstance(parsed, dict) and any(k in parsed for k in _ERROR_KEYS):
        return "json_error"
    return "json"


def _log_body(who: str, data: bytes) -> None:
    head = data[:300].decode("utf-8", errors="replace")
    log.warning("model %s answered with %r", who, head)


# --- structured parts ----------------------------------------------------------


def _finite(x: object) -> bool:
    return isinstance(x, int | float) and not isinstance(x, bool) and math.isfinite(x)


def _named(x: object) -> bool:
    return isinstance(x, str) and bool(x.strip())


def _check_shapes(who: str, result: TaskResult, max_pixels: int) -> None:
    if result.text is not None and not isinstance(result.text, str):
        raise TaskFailed(TaskCode.OUTPUT_NOT_TEXT, model=who)
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
            raise TaskFailed(TaskCode.OUTPUT_BAD_MASK, model=who) from exc


def _all(who: str, what: str, checks: Iterable[tuple[bool, ...]]) -> None:
    if not all(all(c) for c in checks):
        raise TaskFailed(TaskCode.OUTPUT_BAD_SHAPE, model=who, part=what)


def _check_required(task: str, who: str, result: TaskResult) -> None:
    spec = TASKS.get(task)
    if spec is None or task in MAY_BE_EMPTY:
        return
    if task in LABEL_TASKS:
        if not result.labels:
            raise TaskFailed(TaskCode.OUTPUT_MISSING, model=who, part="labels")
        return
    if task in ANSWER_TASKS:
        if not any(a.answer.strip() for a in result.answers) and not (result.text or "").strip():
            raise TaskFailed(TaskCode.OUTPUT_MISSING, model=who, part="answer")
        return
    if task == "image-segmentation":
        if not result.segments and result.media_of(IMAGE) is None:
            raise TaskFailed(TaskCode.OUTPUT_MISSING, model=who, part="segments")
        return
    if spec.output in _MEDIA:
        if result.media_of(spec.output) is None:
            err = TaskFailed(TaskCode.OUTPUT_MISSING, model=who, part=spec.output)
            other = next(iter(result.media), None)
            if other is not None:
                err.fields["got"] = other.kind
            raise err
        return
    if not (result.as_text() or "").strip():
        raise TaskFailed(TaskCode.OUTPUT_MISSING, model=who, part="text")
