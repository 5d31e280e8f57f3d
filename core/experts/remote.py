"""Hosted inference: run one task on one Hugging Face model over HTTP.

Three routes, all through ``huggingface_hub.AsyncInferenceClient``:

* **Inference Providers** (the default): the call names the Hub model id and
  the provider :class:`~core.experts.providers.ProviderDirectory` picked
  (the user's order on the Hub, ``HF_PROVIDER``, or the catalog entry's pin);
  the client builds that provider's payload and speaks its protocol (fal-ai's
  queue, replicate's predictions, polled video jobs).  The chat tasks
  (conversational, text-generation, text2text-generation) are chat
  completions; image-to-text, visual and document question answering are chat
  completions with the image in the message, on a vision-language model.
* a catalog entry's own ``endpoint`` URL, and
* ``HF_INFERENCE_URL``, a self-hosted server speaking the task API, which
  replaces the service for every hosted call: ``{url}/models/{id}``.

The service's answers are handled here (:meth:`RemoteExpert._call`): 503
"loading" with ``estimated_time`` and 429 with ``Retry-After`` are waited for
(bounded, within the task's deadline) and tried again; 404/410 put the model
on the process's skip list; 402 says the credits are used up and where to top
up; every other failure becomes :class:`core.errors.TaskFailed` with a
:class:`~core.errors.TaskCode` and the model and the HTTP status as its
fields (``MODEL_HTTP``, ``TIMED_OUT`` …; the adapters word them) — chosen by
exception type and status code, never with the token in it.

Two exceptions to "the client does it all" on the task-API routes, both
POSTed through ``huggingface_hub``'s own session and error mapping: the
client has no hf-inference text-to-video route, so that task is sent as
``{"inputs": prompt, "parameters": {}}``; and it has no depth-estimation
method, so the raw image is sent and the JSON answer read by
:mod:`core.experts.remote_outputs`.

The task text is split into the call's arguments by
:mod:`core.experts.remote_args`; the client's outputs become result parts in
:mod:`core.experts.remote_outputs`.
"""

from __future__ import annotations

import asyncio
import base64
import functools
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import httpx2
from huggingface_hub import (
    AsyncInferenceClient,
    get_async_session,
    get_token,
    hf_raise_for_status,
)
from huggingface_hub.errors import HfHubHTTPError
from huggingface_hub.utils import build_hf_headers  # type: ignore[attr-defined]  # documented
from PIL import Image

from core.catalog import ModelInfo
from core.clock import SYSTEM_CLOCK, Clock
from core.errors import TaskCode, TaskFailed
from core.experts.providers import (
    AUTO,
    CHAT_TASKS,
    SERVED_TASKS,
    VISION_CHAT_TASKS,
    ProviderDirectory,
    Route,
)
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
from core.http_client import Connections, like
from core.results import Answer, Box, Entity, Segment, TaskInputs, TaskResult
from core.tasks import TaskTimeouts
from core.threads import in_hosted_thread, work
from core.types import TaskError

log = logging.getLogger(__name__)

# What a response that is not JSON of the expected shape (or an image Pillow
# cannot open) raises inside the client or in our normalisation.
_BAD_RESPONSE = (ValueError, TypeError, KeyError, IndexError, AttributeError, OSError)
_UNREACHABLE = (httpx2.HTTPError, httpx2.InvalidURL, httpx2.StreamError)
BILLING_URL = "https://huggingface.co/settings/billing"
CHAT_MAX_TOKENS = 1024  # a task's chat answer; the controller writes the final reply
MAX_WAITS = 3  # "loading" / rate-limit waits per call before giving up on the model
MAX_WAIT_SECONDS = 30.0  # one wait at most (the service's estimate may be larger)


@dataclass(frozen=True, slots=True)
class _Call:
    """One task call: what a handler needs, with checks that name the task."""

    client: AsyncInferenceClient
    target: str  # a URL (task API) or a Hub model id (Inference Providers)
    model_id: str
    task: str
    inputs: TaskInputs
    post: Callable[[str, dict[str, Any] | bytes], Awaitable[bytes]]

    def text(self) -> str:
        if not self.inputs.text or not self.inputs.text.strip():
            raise self.needs("text")
        return self.inputs.text.strip()

    def optional_text(self) -> str | None:
        return self.inputs.text.strip() if self.inputs.text and self.inputs.text.strip() else None

    def needs(self, kind: str) -> TaskFailed:
        return TaskFailed(
            TaskCode.NEEDS_INPUT, retryable=False, final=True, task=self.task, kind=kind
        )

    def image(self) -> bytes:
        if self.inputs.image is None:
            raise self.needs("image")
        return self.inputs.image.data

    def image_url(self) -> str:
        """The image as a data URL, the way chat completion takes it."""
        if self.inputs.image is None:
            raise self.needs("image")
        data = base64.b64encode(self.inputs.image.data).decode()
        return f"data:{self.inputs.image.mime};base64,{data}"

    def audio(self) -> bytes:
        if self.inputs.audio is None:
            raise self.needs("audio")
        return self.inputs.audio.data


Handler = Callable[[_Call], Awaitable[TaskResult]]


class RemoteExpert:
    """Runs tasks on Inference Providers, a model's endpoint, or a self-hosted server.

    ``pool``: connections shared with other clients (the LLM's, which with
    only ``HF_TOKEN`` calls the same router: :class:`core.http_client.Connections`)."""

    name = "remote"

    def __init__(
        self,
        *,
        token: str | None,
        base_url: str | None = None,
        provider: str = AUTO,
        timeouts: TaskTimeouts | None = None,
        directory: ProviderDirectory | None = None,
        clock: Clock = SYSTEM_CLOCK,
        pool: Connections | None = None,
    ) -> None:
        self._base_url = base_url.rstrip("/") if base_url else None
        self.timeouts = timeouts or TaskTimeouts()
        self._token = token or None
        self.directory = directory or ProviderDirectory(provider)
        self._clock = clock  # waits out "loading" and rate limits
        self._clients: dict[str, _InferenceClient] = {}
        self._sessions = _Sessions(pool)  # one session for every client and _post
        self._ahead: set[asyncio.Task[None]] = set()  # look-ups started ahead, still running

    # --- what can run -------------------------------------------------------------
    @property
    def self_hosted(self) -> bool:
        return self._base_url is not None

    def can_run(self, task: str, model: ModelInfo | None = None) -> bool:
        if model is None:
            return task in (_HANDLERS if self.self_hosted else SERVED_TASKS)
        if self.directory.is_dead(model.id):
            return False
        if model.endpoint or self.self_hosted:
            return task in _HANDLERS
        return task in SERVED_TASKS and self.directory.may_serve(
            task, model.providers, model.provider
        )

    def why_not(self, task: str) -> str:
        """Why no catalog model of ``task`` can run remotely (for ``models list``)."""
        if self.self_hosted:
            return f"HF_INFERENCE_URL serves no {task} route we know"
        if task not in SERVED_TASKS:
            return "no inference provider serves this task (run it locally, or give a model an endpoint)"
        want = self.directory.provider
        if want != AUTO:
            return f"no catalog model is served by HF_PROVIDER={want} for this task"
        return "no catalog model is served by an inference provider"

    async def check(self, task: str, model: ModelInfo) -> TaskError | None:
        """Why ``model`` cannot serve ``task`` right now (None: a live provider
        serves it), asking the Hub as a call would; no inference is run."""
        if self.url_for(model) is not None:
            return None  # a task-API server: only a real call can tell
        try:
            route = await self.directory.provider_for(task, model.id, model.provider)
        except TaskFailed as e:
            return TaskError.of(e)
        if route.provider == AUTO:  # chat: the router picks; the mapping must still exist
            try:
                mappings = await self.directory.mappings(model.id)
            except TaskFailed as e:
                return TaskError.of(e)
            if not any(m.status == "live" and m.task == "conversational" for m in mappings):
                return TaskError(TaskCode.NOT_LIVE_FOR_CHAT, {"model": model.id})
        return None

    def url_for(self, model: ModelInfo) -> str | None:
        """The task-API URL for ``model`` (None: it goes through Inference Providers)."""
        if model.endpoint:
            return model.endpoint
        if self._base_url:
            return f"{self._base_url}/models/{model.id}"
        return None

    def prepare(self) -> None:
        """Start building, in the background, the session the first call
        would otherwise build on its critical path (two TLS contexts: a tenth
        to a quarter of a second in a fresh process).  Returns at once; does
        nothing once it is built or being built."""
        self._sessions.prepare()

    def look_up_ahead(self, task: str, model: ModelInfo) -> None:
        """Start, in the background, the Hub look-ups a call of ``model`` on
        ``task`` through Inference Providers makes first (its provider
        mapping and the client's own), so the call finds them made or under
        way (:meth:`ProviderDirectory.look_up_ahead`).  Nothing for a model
        on a task-API URL, or one the router picks the provider for."""
        if self.url_for(model) is not None or task not in SERVED_TASKS:
            return
        ahead = asyncio.get_running_loop().create_task(
            self.directory.look_up_ahead(task, model.id, model.provider, model.providers),
            name=f"look-up-ahead-{model.id}",
        )
        self._ahead.add(ahead)
        ahead.add_done_callback(self._ahead.discard)

    # --- running ------------------------------------------------------------------
    async def run(self, task: str, model: ModelInfo, inputs: TaskInputs) -> TaskResult:
        url = self.url_for(model)
        timeout = self.timeouts.for_task(task)
        try:
            async with asyncio.timeout(timeout):
                if url is not None:
                    handler = _HANDLERS.get(task)
                    if handler is None:
                        raise TaskFailed(TaskCode.NOT_ON_TASK_API, retryable=False, task=task)
                    client = self._client(None)
                    await client.open()  # the session and the headers, built off the loop
                    call = _Call(client, url, model.id, task, inputs, self._post)
                    return await self._call(handler, call)
                self.directory.start(task, model.id, model.provider, model.providers)
                route = await self.directory.provider_for(task, model.id, model.provider)
                await self.directory.warm(task, model.id, route)
                handler = _PROVIDER_HANDLERS.get(task) or _HANDLERS[task]
                client = self._client(route.provider)
                await client.open()
                call = _Call(client, model.id, model.id, task, inputs, self._post)
                log.debug("task %s on %s via %s", task, model.id, _where(route))
                return await self._call(handler, call)
        except TaskFailed:
            raise
        except (TimeoutError, httpx2.TimeoutException) as e:  # incl. InferenceTimeoutError
            raise TaskFailed(TaskCode.TIMED_OUT, model=model.id, seconds=timeout) from e
        except _UNREACHABLE as e:
            cause = type(e).__name__
            raise TaskFailed(TaskCode.SERVICE_UNREACHABLE, model=model.id, cause=cause) from e
        except (*_BAD_RESPONSE, Image.DecompressionBombError) as e:
            cause = type(e).__name__
            raise TaskFailed(TaskCode.RESPONSE_UNREADABLE, model=model.id, cause=cause) from e

    async def _call(self, handler: Handler, call: _Call) -> TaskResult:
        """One call, waiting out "loading" and rate limits a bounded number of times."""
        waits = 0
        while True:
            try:
                return await handler(call)
            except HfHubHTTPError as e:
                status = _status(e)
                wait = _wait_for(e, status)
                if wait is not None and waits < MAX_WAITS:
                    waits += 1
                    log.info(
                        "model %s answered HTTP %s; waiting %.1f s before trying again",
                        call.model_id,
                        status,
                        wait,
                    )
                    await self._clock.sleep(wait)
                    continue
                if status in (404, 410):
                    self.directory.mark_dead(call.model_id, f"HTTP {status} from the service")
                raise _http_failure(call.model_id, status) from e

    def _client(self, provider: str | None) -> _InferenceClient:
        key = provider or ""
        client = self._clients.get(key)
        if client is None:
            client = _InferenceClient(
                provider=provider,  # type: ignore[arg-type]
                token=self._token,
                timeout=self.timeouts.longest,
            )
            client.sessions = self._sessions
            self._clients[key] = client
        return client

    async def aclose(self) -> None:
        ahead = list(self._ahead)
        for task in ahead:
            task.cancel()
        if ahead:
            await asyncio.wait(ahead)
        for client in self._clients.values():
            await client.close()  # type: ignore[no-untyped-call]  # its streams; not the session
        self._clients.clear()
        await self._sessions.aclose()

    async def _post(self, url: str, body: dict[str, Any] | bytes) -> bytes:
        """POST for a task the client has no task-API route for: a dict as
        JSON, bytes as the raw body (as the client sends images)."""
        session = await self._sessions.get()
        token = self._token or get_token()  # the client's own fallback
        headers = {"authorization": f"Bearer {token}"} if token else {}
        timeout = self.timeouts.longest
        if isinstance(body, bytes):
            response = await session.post(url, content=body, headers=headers, timeout=timeout)
        else:
            response = await session.post(url, json=body, headers=headers, timeout=timeout)
        hf_raise_for_status(response)
        return response.content


# --- sessions: built off the event loop; redirects stay on the server called ------


def _new_session(pool: Connections | None = None) -> tuple[httpx2.AsyncClient, httpx2.AsyncClient]:
    """The SDK's session (built for its settings: hooks, redirects, timeout,
    headers, whatever factory the user set) and ours like it on aiohttp's
    transport (core.http_client), refusing redirects to other servers.  Each
    loads a TLS context: run it in a thread.

    First, the Hub client's request headers, once: the first time a process
    builds them, huggingface_hub looks up torch's version among the installed
    packages and fetches the Hub's list of agent harnesses with a blocking GET
    (up to 3 s; cached on disk for a day when it succeeds).  Built here, that
    happens in this thread, not on the event loop in front of the first call."""
    try:
        build_hf_headers()
    except Exception:  # the call builds them again and says what is wrong
        log.debug("building the Hub client's headers ahead failed", exc_info=True)
    sdk_session = get_async_session()
    return sdk_session, same_host_redirects_only(like(sdk_session, pool))


class _Sessions:
    """The expert's one session, built in a worker thread, possibly ahead of
    need (:meth:`prepare`), and shared by every client and :meth:`RemoteExpert._post`.

    One session is one pool of connections.  Every provider's calls go to
    the router's host (``router.huggingface.co/<provider>/…``), so a plan
    whose steps run on different providers (a picture on fal-ai, its caption
    on hf-inference) finds the connection the step before opened: a client
    per provider with a session of its own made a TCP and TLS handshake with
    the router (two round trips) at the start of each provider's first call,
    on the plan's critical path, and again after each idle spell."""

    def __init__(self, pool: Connections | None = None) -> None:
        self._pool = pool
        self._building: asyncio.Task[httpx2.AsyncClient] | None = None

    def prepare(self) -> None:
        """Start building the session, unless it is built or being built."""
        if self._building is None:
            self._start()

    def _start(self) -> asyncio.Task[httpx2.AsyncClient]:
        self._building = asyncio.get_running_loop().create_task(
            self._build(), name="hosted-session"
        )
        return self._building

    async def get(self) -> httpx2.AsyncClient:
        """The session; the calls that arrive while it is built wait for the
        same one.  A build that failed is tried again by the next caller."""
        building = self._building
        if building is None or (
            building.done() and (building.cancelled() or building.exception() is not None)
        ):
            if building is not None and not building.cancelled():
                log.debug("building the hosted session failed", exc_info=building.exception())
            building = self._start()
        return await asyncio.shield(building)

    async def _build(self) -> httpx2.AsyncClient:
        sdk_session, session = await in_hosted_thread(functools.partial(_new_session, self._pool))
        await sdk_session.aclose()  # never used: it opened no connection
        return session

    async def aclose(self) -> None:
        building, self._building = self._building, None
        if building is None:
            return
        if not building.done():
            building.cancel()
        try:
            session = await building
        except (asyncio.CancelledError, Exception):
            return
        await session.aclose()


class _InferenceClient(AsyncInferenceClient):
    """The client, its session refusing redirects to another server.

    huggingface_hub's sessions follow every redirect (``follow_redirects=True``).
    httpx2 drops the token when one leaves the origin, but a 307/308 re-sends
    the body (the user's file) to the new host, and whatever that host answers
    would be taken for the model's output.  Provider result downloads (fal,
    replicate output URLs on other hosts) use the client's synchronous session
    and are not affected."""

    sessions: _Sessions | None = None  # set by RemoteExpert._client

    async def _get_async_client(self) -> httpx2.AsyncClient:
        # The expert's one session (not one per client, closed with it), on
        # aiohttp's transport (core.http_client), built in a thread.
        if self._async_client is None:
            assert self.sessions is not None, "clients are made by RemoteExpert._client"
            self._async_client = await self.sessions.get()
        return self._async_client

    async def open(self) -> None:
        """Have the session (built in a thread, with the Hub client's headers)."""
        await self._get_async_client()


def same_host_redirects_only(session: httpx2.AsyncClient) -> httpx2.AsyncClient:
    """``session``, made to refuse redirects to another server (idempotent)."""
    hooks = session.event_hooks
    if _refuse_other_server not in hooks["response"]:
        session.event_hooks = {**hooks, "response": [*hooks["response"], _refuse_other_server]}
    return session


async def _refuse_other_server(response: httpx2.Response) -> None:
    """Follow a redirect only to the same scheme, host and port (or from http
    to https on the same host); otherwise fail the call, naming both ends."""
    if not response.has_redirect_location:
        return
    source = response.request.url
    target = source.join(response.headers["location"])
    if target.host == source.host and (
        (target.scheme, target.port) == (source.scheme, source.port)
        or (source.scheme, target.scheme) == ("http", "https")
    ):
        return
    where = f"{target.scheme}://{target.host}" + (f":{target.port}" if target.port else "")
    raise TaskFailed(
        TaskCode.REDIRECTED_AWAY,
        address=str(source.copy_with(query=None, fragment=None)),
        host=where,
    )


def _where(route: Route) -> str:
    if route.provider == AUTO:
        return "the router (auto)"
    return f"{route.provider} ({route.provider_model})"


def _status(e: HfHubHTTPError) -> int | None:
    return getattr(getattr(e, "response", None), "status_code", None)


def _wait_for(e: HfHubHTTPError, status: int | None) -> float | None:
    """Seconds to wait before trying the same model again, or None (don't)."""
    response = getattr(e, "response", None)
    if response is None:
        return None
    if status == 429:
        raw = response.headers.get("retry-after")
        try:
            seconds = float(raw) if raw is not None else 2.0
        except ValueError:
            return None  # an HTTP date: too far away to wait for inside one task
        return min(max(seconds, 0.0), MAX_WAIT_SECONDS)
    if status == 503:
        try:
            body = response.json()
        except (ValueError, UnicodeDecodeError):
            return None
        estimate = body.get("estimated_time") if isinstance(body, dict) else None
        if isinstance(estimate, int | float) and estimate >= 0:
            return min(float(estimate), MAX_WAIT_SECONDS)
    return None


def _http_failure(model_id: str, status: int | None) -> TaskFailed:
    """An HTTP error from the inference service (402: the account's credits
    are used up, which no other candidate can help with)."""
    err = TaskFailed(
        TaskCode.MODEL_HTTP,
        retryable=status != 402,
        final=status == 402,  # the same account pays for every other candidate
        model=model_id,
        status=status,
    )
    if status == 402:
        err.fields["url"] = BILLING_URL
    return err


# --- handlers ------------------------------------------------------------


async def _translation(c: _Call) -> TaskResult:
    args = translation_args(c.text(), c.model_id)
    out = await c.client.translation(
        args.text, model=c.target, src_lang=args.src_lang, tgt_lang=args.tgt_lang
    )
    return TaskResult(text=str(out.translation_text))


async def _text_classification(c: _Call) -> TaskResult:
    return TaskResult(
        labels=labels_of(await c.client.text_classification(c.text(), model=c.target))
    )


async def _token_classification(c: _Call) -> TaskResult:
    out = await c.client.token_classification(c.text(), model=c.target)
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
    return TaskResult(text=str(await c.client.text_generation(c.text(), model=c.target)))


async def _text_generation(c: _Call) -> TaskResult:
    # Only the continuation: the hosted pipeline echoes the prompt by default.
    out = await c.client.text_generation(c.text(), model=c.target, return_full_text=False)
    return TaskResult(text=str(out))


async def _summarization(c: _Call) -> TaskResult:
    out = await c.client.summarization(c.text(), model=c.target)
    return TaskResult(text=str(out.summary_text))


async def _question_answering(c: _Call) -> TaskResult:
    question, context = split_question(c.text())
    out = await c.client.question_answering(question=question, context=context, model=c.target)
    return TaskResult(answers=answers_of(out))


async def _tabular_classification(c: _Call) -> TaskResult:
    out = await c.client.tabular_classification(csv_table(c.text()), model=c.target)
    predictions = [str(p) for p in as_list(out)]
    return TaskResult(text=", ".join(predictions), extra={"predictions": predictions})


async def _image_to_text(c: _Call) -> TaskResult:
    out = await c.client.image_to_text(c.image(), model=c.target)
    return TaskResult(text=str(out.generated_text))


async def _text_to_image(c: _Call) -> TaskResult:
    img = await c.client.text_to_image(c.text(), model=c.target)
    return TaskResult(media=(await image_blob(img),))


async def _visual_question_answering(c: _Call) -> TaskResult:
    out = await c.client.visual_question_answering(c.image(), c.text(), model=c.target)
    return TaskResult(answers=answers_of(out))


async def _document_question_answering(c: _Call) -> TaskResult:
    out = await c.client.document_question_answering(c.image(), c.text(), model=c.target)
    return TaskResult(answers=answers_of(out))


async def _image_segmentation(c: _Call) -> TaskResult:
    out = await c.client.image_segmentation(c.image(), model=c.target)
    segments = []
    for e in as_list(out):
        mask, _ = await work(encode_image, e.mask)
        segments.append(Segment(str(e.label), None if e.score is None else float(e.score), mask))
    return TaskResult(segments=tuple(segments))


async def _image_classification(c: _Call) -> TaskResult:
    return TaskResult(
        labels=labels_of(await c.client.image_classification(c.image(), model=c.target))
    )


async def _image_to_image(c: _Call) -> TaskResult:
    prompt = c.inputs.text.strip() if c.inputs.text and c.inputs.text.strip() else None
    img = await c.client.image_to_image(c.image(), prompt, model=c.target)
    return TaskResult(media=(await image_blob(img),))


async def _object_detection(c: _Call) -> TaskResult:
    out = await c.client.object_detection(c.image(), model=c.target)
    boxes = tuple(
        Box(str(e.label), float(e.score), e.box.xmin, e.box.ymin, e.box.xmax, e.box.ymax)
        for e in as_list(out)
    )
    return TaskResult(boxes=tuple(sorted(boxes, key=lambda b: -b.score)))


async def _depth_estimation(c: _Call) -> TaskResult:
    raw = await c.post(c.target, c.image())
    return await work(read_depth, raw)  # a big JSON map: parse off the loop


async def _text_to_video(c: _Call) -> TaskResult:
    data = await c.post(c.target, {"inputs": c.text(), "parameters": {}})
    return TaskResult(media=(media_blob("video", data, "video/mp4"),))


async def _text_to_speech(c: _Call) -> TaskResult:
    data = await c.client.text_to_speech(c.text(), model=c.target)
    return TaskResult(media=(media_blob("audio", data, "audio/flac"),))


async def _audio_classification(c: _Call) -> TaskResult:
    return TaskResult(
        labels=labels_of(await c.client.audio_classification(c.audio(), model=c.target))
    )


async def _speech_recognition(c: _Call) -> TaskResult:
    out = await c.client.automatic_speech_recognition(c.audio(), model=c.target)
    return TaskResult(text=str(out.text).strip())


async def _audio_to_audio(c: _Call) -> TaskResult:
    out = as_list(await c.client.audio_to_audio(c.audio(), model=c.target))
    media = tuple(media_blob("audio", e.blob, e.content_type or "audio/flac") for e in out)
    return TaskResult(media=media, extra={"audio_labels": [str(e.label) for e in out]})


# --- Inference Providers handlers (where the route differs from the task API) ----

_VISION_PROMPTS = {
    "image-to-text": "Describe this image in one or two sentences.",
    "visual-question-answering": "Answer the question about this image briefly.",
    "document-question-answering": (
        "This image is a document. Answer the question from what it says, briefly; "
        "quote the document's words where you can."
    ),
}


def _chat_text(out: Any, model_id: str) -> str:
    """The assistant's text of a chat completion (reasoning-only answers are empty)."""
    choices = getattr(out, "choices", None) or []
    message = getattr(choices[0], "message", None) if choices else None
    text = getattr(message, "content", None) if message is not None else None
    if not isinstance(text, str) or not text.strip():
        raise TaskFailed(TaskCode.OUTPUT_MISSING, model=model_id, part="text")
    return text.strip()


async def _chat(c: _Call) -> TaskResult:
    out = await c.client.chat_completion(
        messages=[{"role": "user", "content": c.text()}],
        model=c.target,
        max_tokens=CHAT_MAX_TOKENS,
    )
    return TaskResult(text=_chat_text(out, c.model_id))


async def _vision_chat(c: _Call) -> TaskResult:
    question = c.optional_text()
    if c.task != "image-to-text" and question is None:
        raise c.needs("question")
    instruction = _VISION_PROMPTS[c.task]
    prompt = f"{instruction}\n\n{question}" if question else instruction
    out = await c.client.chat_completion(
        messages=[
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": prompt},
                    {"type": "image_url", "image_url": {"url": c.image_url()}},
                ],
            }
        ],
        model=c.target,
        max_tokens=CHAT_MAX_TOKENS,
    )
    text = _chat_text(out, c.model_id)
    if c.task == "image-to-text":
        return TaskResult(text=text)
    return TaskResult(answers=(Answer(text),))


async def _provider_text_to_video(c: _Call) -> TaskResult:
    data = await c.client.text_to_video(c.text(), model=c.target)
    return TaskResult(media=(media_blob("video", data, "video/mp4"),))


_PROVIDER_HANDLERS: dict[str, Handler] = {
    **{task: _chat for task in CHAT_TASKS},
    **{task: _vision_chat for task in VISION_CHAT_TASKS},
    "text-to-video": _provider_text_to_video,
}


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
