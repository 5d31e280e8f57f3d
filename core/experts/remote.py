"""Hosted inference: run one task on one Hugging Face model over HTTP.

The expert drives ``huggingface_hub.AsyncInferenceClient`` with a full URL as
``model=`` for every call, so the client never contacts the Hub to look a
model up (a blocking call, and one that fails offline).  The URL is the
model's own ``endpoint`` when the catalog gives one, else
``{HF_INFERENCE_URL}/models/{id}``, else the hosted hf-inference route
(``https://router.huggingface.co/hf-inference/models/{id}``) — the same URL the
client builds itself for ``provider="hf-inference"``.

Whatever goes wrong becomes :class:`core.errors.TaskFailed` with a short
message naming the model and the HTTP status, chosen by exception type and
status code (never by message text, and never with the token in it).

Two exceptions to "the client does it all", both POSTed through
``huggingface_hub``'s own session and error mapping: the installed client
refuses ``text_to_video`` for hf-inference URLs (only third-party providers
have it), so that task is sent as ``{"inputs": prompt, "parameters": {}}`` —
the hf-inference convention the client uses for text-to-image; and the client
has no depth-estimation method at all, so the raw image is sent as it is for
the other image tasks and the JSON answer (``predicted_depth`` values and/or a
base64 ``depth`` PNG) is read by :mod:`core.experts.remote_outputs`.

The task text is split into the call's arguments by
:mod:`core.experts.remote_args`; the client's outputs become result parts in
:mod:`core.experts.remote_outputs`.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import httpx2
from huggingface_hub import (
    AsyncInferenceClient,
    constants,
    get_async_session,
    get_token,
    hf_raise_for_status,
)
from huggingface_hub.errors import HfHubHTTPError
from PIL import Image

from core.catalog import ModelInfo
from core.errors import TaskFailed
from core.experts.remote_args import csv_table, split_question, translation_args
from core.experts.remote_outputs import (
    answers_of,
    as_list,
    encode_image,
    image_blob,
    labels_of,
    media_blob,
    read_depth,
)
from core.results import Box, Entity, Segment, TaskInputs, TaskResult

log = logging.getLogger(__name__)

HOSTED_BASE = constants.INFERENCE_PROXY_TEMPLATE.format(provider="hf-inference")

# What a response that is not JSON of the expected shape (or an image Pillow
# cannot open) raises inside the client or in our normalisation.
_BAD_RESPONSE = (ValueError, TypeError, KeyError, IndexError, AttributeError, OSError)
_UNREACHABLE = (httpx2.HTTPError, httpx2.InvalidURL, httpx2.StreamError)


@dataclass(frozen=True, slots=True)
class _Call:
    """One task call: what a handler needs, with checks that name the task."""

    client: AsyncInferenceClient
    url: str
    model_id: str
    task: str
    inputs: TaskInputs
    post: Callable[[str, dict[str, Any] | bytes], Awaitable[bytes]]

    def text(self) -> str:
        if not self.inputs.text or not self.inputs.text.strip():
            raise TaskFailed(f"{self.task} needs a text", retryable=False)
        return self.inputs.text.strip()

    def image(self) -> bytes:
        if self.inputs.image is None:
            raise TaskFailed(f"{self.task} needs an image", retryable=False)
        return self.inputs.image.data

    def audio(self) -> bytes:
        if self.inputs.audio is None:
            raise TaskFailed(f"{self.task} needs an audio file", retryable=False)
        return self.inputs.audio.data


Handler = Callable[[_Call], Awaitable[TaskResult]]


class RemoteExpert:
    """Runs tasks on the hosted inference API (or a compatible server)."""

    name = "remote"

    def __init__(self, *, token: str | None, base_url: str | None, timeout: float = 120.0) -> None:
        self._base_url = base_url.rstrip("/") if base_url else None
        self._timeout = timeout
        self._token = token or None
        self._client = AsyncInferenceClient(token=self._token, timeout=timeout)
        self._session: httpx2.AsyncClient | None = None  # only for _post

    def can_run(self, task: str, model: ModelInfo | None = None) -> bool:
        return task in _HANDLERS

    def url_for(self, model: ModelInfo) -> str:
        if model.endpoint:
            return model.endpoint
        return f"{self._base_url or HOSTED_BASE}/models/{model.id}"

    async def run(self, task: str, model: ModelInfo, inputs: TaskInputs) -> TaskResult:
        handler = _HANDLERS.get(task)
        if handler is None:
            raise TaskFailed(f"{task} cannot run on the hosted inference API", retryable=False)
        call = _Call(self._client, self.url_for(model), model.id, task, inputs, self._post)
        try:
            async with asyncio.timeout(self._timeout):
                return await handler(call)
        except TaskFailed:
            raise
        except HfHubHTTPError as e:
            status = getattr(getattr(e, "response", None), "status_code", None)
            raise TaskFailed(_http_message(model.id, status)) from e
        except (TimeoutError, httpx2.TimeoutException) as e:  # incl. InferenceTimeoutError
            raise TaskFailed(f"model {model.id} timed out after {self._timeout:g} s") from e
        except _UNREACHABLE as e:
            raise TaskFailed(
                f"could not reach the inference server for model {model.id} ({type(e).__name__})"
            ) from e
        except (*_BAD_RESPONSE, Image.DecompressionBombError) as e:
            raise TaskFailed(
                f"model {model.id} returned a response that could not be read ({type(e).__name__})"
            ) from e

    async def aclose(self) -> None:
        await self._client.close()  # type: ignore[no-untyped-call]
        if self._session is not None:
            await self._session.aclose()
            self._session = None

    async def _post(self, url: str, body: dict[str, Any] | bytes) -> bytes:
        """POST for a task the client has no hf-inference route for: a dict as
        JSON, bytes as the raw body (as the client sends images)."""
        if self._session is None:
            self._session = get_async_session()
        token = self._token or get_token()  # the client's own fallback
        headers = {"authorization": f"Bearer {token}"} if token else {}
        if isinstance(body, bytes):
            response = await self._session.post(
                url, content=body, headers=headers, timeout=self._timeout
            )
        else:
            response = await self._session.post(
                url, json=body, headers=headers, timeout=self._timeout
            )
        hf_raise_for_status(response)
        return response.content


def _http_message(model_id: str, status: int | None) -> str:
    if status == 503:
        return f"model {model_id} is loading or unavailable (HTTP 503)"
    if status == 429:
        return f"model {model_id} is rate limited (HTTP 429)"
    if status in (401, 403):
        return f"model {model_id} refused the credentials (HTTP {status}); check HF_TOKEN"
    if status == 404:
        return f"model {model_id} was not found on the inference server (HTTP 404)"
    if status in (400, 413, 422):
        return f"model {model_id} rejected the input (HTTP {status})"
    if status is not None and status >= 500:
        return f"model {model_id} failed on the server (HTTP {status})"
    return f"model {model_id} call failed (HTTP {status})"


# --- handlers ------------------------------------------------------------


async def _translation(c: _Call) -> TaskResult:
    args = translation_args(c.text(), c.model_id)
    out = await c.client.translation(
        args.text, model=c.url, src_lang=args.src_lang, tgt_lang=args.tgt_lang
    )
    return TaskResult(text=str(out.translation_text))


async def _text_classification(c: _Call) -> TaskResult:
    return TaskResult(labels=labels_of(await c.client.text_classification(c.text(), model=c.url)))


async def _token_classification(c: _Call) -> TaskResult:
    out = await c.client.token_classification(c.text(), model=c.url)
    entities = tuple(
        Entity(
            str(e.word).strip(),
            str(e.entity_group or e.entity or ""),
            float(e.score),
            e.start,
            e.end,
        )
        for e in as_list(out)
    )
    return TaskResult(entities=entities)


async def _text2text(c: _Call) -> TaskResult:
    return TaskResult(text=str(await c.client.text_generation(c.text(), model=c.url)))


async def _text_generation(c: _Call) -> TaskResult:
    # Only the continuation: the hosted pipeline echoes the prompt by default.
    out = await c.client.text_generation(c.text(), model=c.url, return_full_text=False)
    return TaskResult(text=str(out))


async def _summarization(c: _Call) -> TaskResult:
    out = await c.client.summarization(c.text(), model=c.url)
    return TaskResult(text=str(out.summary_text))


async def _question_answering(c: _Call) -> TaskResult:
    question, context = split_question(c.text())
    out = await c.client.question_answering(question=question, context=context, model=c.url)
    return TaskResult(answers=answers_of(out))


async def _tabular_classification(c: _Call) -> TaskResult:
    out = await c.client.tabular_classification(csv_table(c.text()), model=c.url)
    predictions = [str(p) for p in as_list(out)]
    return TaskResult(text=", ".join(predictions), extra={"predictions": predictions})


async def _image_to_text(c: _Call) -> TaskResult:
    out = await c.client.image_to_text(c.image(), model=c.url)
    return TaskResult(text=str(out.generated_text))


async def _text_to_image(c: _Call) -> TaskResult:
    img = await c.client.text_to_image(c.text(), model=c.url)
    return TaskResult(media=(await image_blob(img),))


async def _visual_question_answering(c: _Call) -> TaskResult:
    out = await c.client.visual_question_answering(c.image(), c.text(), model=c.url)
    return TaskResult(answers=answers_of(out))


async def _document_question_answering(c: _Call) -> TaskResult:
    out = await c.client.document_question_answering(c.image(), c.text(), model=c.url)
    return TaskResult(answers=answers_of(out))


async def _image_segmentation(c: _Call) -> TaskResult:
    out = await c.client.image_segmentation(c.image(), model=c.url)
    segments = []
    for e in as_list(out):
        mask, _ = await asyncio.to_thread(encode_image, e.mask)
        segments.append(Segment(str(e.label), None if e.score is None else float(e.score), mask))
    return TaskResult(segments=tuple(segments))


async def _image_classification(c: _Call) -> TaskResult:
    return TaskResult(labels=labels_of(await c.client.image_classification(c.image(), model=c.url)))


async def _image_to_image(c: _Call) -> TaskResult:
    prompt = c.inputs.text.strip() if c.inputs.text and c.inputs.text.strip() else None
    img = await c.client.image_to_image(c.image(), prompt, model=c.url)
    return TaskResult(media=(await image_blob(img),))


async def _object_detection(c: _Call) -> TaskResult:
    out = await c.client.object_detection(c.image(), model=c.url)
    boxes = tuple(
        Box(str(e.label), float(e.score), e.box.xmin, e.box.ymin, e.box.xmax, e.box.ymax)
        for e in as_list(out)
    )
    return TaskResult(boxes=tuple(sorted(boxes, key=lambda b: -b.score)))


async def _depth_estimation(c: _Call) -> TaskResult:
    raw = await c.post(c.url, c.image())
    return await asyncio.to_thread(read_depth, raw)  # a big JSON map: parse off the loop


async def _text_to_video(c: _Call) -> TaskResult:
    data = await c.post(c.url, {"inputs": c.text(), "parameters": {}})
    return TaskResult(media=(media_blob("video", data, "video/mp4"),))


async def _text_to_speech(c: _Call) -> TaskResult:
    data = await c.client.text_to_speech(c.text(), model=c.url)
    return TaskResult(media=(media_blob("audio", data, "audio/flac"),))


async def _audio_classification(c: _Call) -> TaskResult:
    return TaskResult(labels=labels_of(await c.client.audio_classification(c.audio(), model=c.url)))


async def _speech_recognition(c: _Call) -> TaskResult:
    out = await c.client.automatic_speech_recognition(c.audio(), model=c.url)
    return TaskResult(text=str(out.text).strip())


async def _audio_to_audio(c: _Call) -> TaskResult:
    out = as_list(await c.client.audio_to_audio(c.audio(), model=c.url))
    media = tuple(media_blob("audio", e.blob, e.content_type or "audio/flac") for e in out)
    return TaskResult(media=media, extra={"audio_labels": [str(e.label) for e in out]})


_HANDLERS: dict[str, Handler] = {
    "text-classification": _text_classification,
    "token-classification": _token_classification,
    "text2text-generation": _text2text,
    "summarization": _summarization,
    "translation": _translation,
    "question-answering": _question_answering,
    "conversational": _text_generation,
    "text-generation": _text_generation,
    "tabular-classification": _tabular_classification,
    "image-to-text": _image_to_text,
    "text-to-image": _text_to_image,
    "visual-question-answering": _visual_question_answering,
    "image-segmentation": _image_segmentation,
    "document-question-answering": _document_question_answering,
    "image-classification": _image_classification,
    "image-to-image": _image_to_image,
    "object-detection": _object_detection,
    "depth-estimation": _depth_estimation,
    "text-to-video": _text_to_video,
    "text-to-speech": _text_to_speech,
    "audio-classification": _audio_classification,
    "automatic-speech-recognition": _speech_recognition,
    "audio-to-audio": _audio_to_audio,
}
REMOTE_TASKS = frozenset(_HANDLERS)
