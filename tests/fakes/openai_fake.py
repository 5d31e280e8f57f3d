"""A loopback OpenAI-compatible server, so tests drive the real ``openai`` client.

``POST /v1/chat/completions`` answers per *stage*: the agent's prompts start
their first system message with a marker ("#1 Task Planning Stage", "#2 Model
Selection Stage", "#4 Response Generation Stage"), and tests queue replies for
each stage with :meth:`FakeLLM.reply`.  ``GET /v1/models`` lists
:attr:`FakeLLM.models`.  Failures, latency and servers that refuse JSON mode
can be simulated; every request body and its arrival time is recorded.

Switchable behaviours of real servers, each built from their documented answers:

* :attr:`FakeLLM.reasoning_rules` – OpenAI's current reasoning models: a
  temperature other than the default 1 is a 400 ``unsupported_value``,
  ``max_tokens`` a 400 ``unsupported_parameter`` (they want
  ``max_completion_tokens``); :attr:`FakeLLM.reasoning_tokens` spends part of
  the cap thinking (a cap that small leaves the answer empty, ``length``).
* :attr:`FakeLLM.weak` (:class:`WeakModel`) – a tiny model behind llama.cpp's
  ``llama-server``: loops until the completion cap (or, uncapped, until the
  client gives up), echoes the prompt's markup in its answers, answers a
  re-asked plan with ``[]``, overflows its context with llama.cpp's
  ``exceed_context_size_error`` and reports ``n_ctx`` on ``GET /props``.
* :attr:`FakeLLM.router_models` / :attr:`FakeLLM.credits_exhausted` – the
  Hugging Face router: a model no enabled provider serves is a 400
  ``model_not_supported``; spent credits are a 402.
* :attr:`FakeLLM.reject_params`, :attr:`FakeLLM.reject_json_schema`,
  :attr:`FakeLLM.vllm_max_model_len` – older or other servers: unknown
  request arguments, ``json_schema`` refused, vLLM's context check of prompt
  plus cap.
* :meth:`FakeLLM.serve_html`, :meth:`FakeLLM.no_choices` and
  :meth:`FakeLLM.garbage_json` – unreadable HTTP 200 answers (a proxy's HTML
  page, a completion without choices, ``application/json`` that does not
  parse), for any call or one stage's.
* :meth:`FakeLLM.hang` – a server that accepts the request and never
  answers (until the fake stops).
* Streaming (``"stream": true``), as the API documents it: ``text/event-stream``
  of ``chat.completion.chunk`` frames (the role first, the content in pieces of
  :attr:`FakeLLM.stream_chunk_chars`, :attr:`FakeLLM.stream_gap` seconds apart,
  then an empty delta with the finish reason), with
  ``stream_options.include_usage`` a last chunk with ``"choices": []`` and the
  usage (``"usage": null`` on the others), then ``data: [DONE]``.
  :attr:`FakeLLM.stream_reasoning` streams ``delta.reasoning_content`` first
  (gpt-oss on vLLM and the router do); :meth:`FakeLLM.break_stream` ends a
  stream midway, by dropping the connection or with an SSE ``error`` event;
  :attr:`FakeLLM.ignore_stream` answers a streamed request with one JSON
  completion, as servers without streaming do.

Use the ``llm_fake`` fixture in tests, or ``async with make_llm_fake() as fake``
anywhere else (benchmarks, other fixtures).
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import json
import time
from collections import defaultdict, deque
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import pytest
from aiohttp import web

from core.llm import LLM
from tests.fakes.loopback import serve

# A queued reply: text, or a function of the request body (None → content null).
Content = str | Callable[[dict[str, Any]], str | Awaitable[str | None] | None]

STAGE_MARKERS: dict[str, str] = {
    "#1 Task Planning Stage": "plan",
    "#2 Model Selection Stage": "select",
    "#4 Response Generation Stage": "answer",
}
DEFAULT_REPLIES: dict[str, str] = {
    "plan": "[]",
    "select": "{}",
    "answer": "Here is the answer.",
    "other": "ok",
}
_ERROR_KINDS: dict[int, tuple[str, str | None]] = {
    400: ("invalid_request_error", None),
    401: ("invalid_request_error", "invalid_api_key"),
    403: ("permission_denied", None),
    404: ("invalid_request_error", "model_not_found"),
    422: ("invalid_request_error", None),
    429: ("rate_limit_exceeded", "rate_limit_exceeded"),
}


# The router's answer for a model no enabled provider serves
# (tests/data/inference_providers_2026.json, errors.router_chat_unknown_model).
ROUTER_UNKNOWN_MODEL = (
    "The requested model '{model}' is not supported by any provider you have enabled."
)
ROUTER_NO_CREDITS = (
    "You have depleted your monthly included credits. Purchase pre-paid credits to continue "
    "using Inference Providers."
)
HTML_PAGE = "<!DOCTYPE html><html><head><title>Sign in</title></head><body>Proxy</body></html>"
GARBAGE_JSON = '{"id": "chatcmpl-1", "choices": [{"message": {"content": "trunc'


@dataclass
class WeakModel:
    """How a tiny model behind llama-server behaved in the field (all off by default)."""

    loop: bool = False  # emit filler until the cap; uncapped, stall until the client gives up
    echo: bool = False  # answer the answer stage by echoing the prompt from its first tag on
    empty_reask: bool = False  # answer a re-asked plan with []
    n_ctx: int | None = None  # prompts of n_ctx tokens or more: exceed_context_size_error
    props: bool = True  # GET /props reports n_ctx (llama.cpp); False: the client must find out
    stall: float = 60.0  # seconds an uncapped loop stalls (the fake stopping ends it early)


@dataclass
class _Failure:
    status: int
    times: int
    stage: str | None
    body: dict[str, Any] | None = None  # the JSON answered instead of the generic error


@dataclass
class _Oddity:
    """An answer no real completion looks like (or none at all), for the next
    ``times`` calls of ``stage`` (or any)."""

    kind: str  # html | no_choices | garbage_json | hang
    times: int
    stage: str | None
    body: str = ""


@dataclass
class _Break:
    """End the next ``times`` streams (of ``stage``, or any) after
    ``after_chars`` characters of content: ``how`` "drop" closes the
    connection, "error" sends an SSE error event."""

    after_chars: int
    how: str
    times: int
    stage: str | None


def translation_plan() -> str:
    """A plan of one translation task, as the LLM writes it."""
    return json.dumps([{"task": "translation", "id": 0, "dep": [-1], "args": {"text": "hi"}}])


def answering(text: str) -> tuple[asyncio.Event, Callable[[dict[str, Any]], Awaitable[str]]]:
    """A reply for :meth:`FakeLLM.reply` that says (the event) when it was asked for."""
    asked = asyncio.Event()

    async def answer(body: dict[str, Any]) -> str:
        asked.set()
        return text

    return asked, answer


def stage_of(body: dict[str, Any]) -> str:
    """The stage a request belongs to, from the first system message's marker."""
    for message in body.get("messages") or []:
        if message.get("role") in ("system", "developer"):
            text = _text(message.get("content")).lstrip()
            for marker, stage in STAGE_MARKERS.items():
                if text.startswith(marker):
                    return stage
            return "other"
    return "other"


def _text(content: Any) -> str:
    """A message's text, whether content is a string or a list of parts."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(p.get("text", "") for p in content if isinstance(p, dict))
    return ""


class FakeLLM:
    """State and knobs of one running fake; see the module docstring."""

    def __init__(self) -> None:
        self.base_url = ""
        self.requests: list[dict[str, Any]] = []
        self.events: list[tuple[float, str]] = []
        self.delay: float = 0.0
        # Set: chat requests wait for it (``in_flight`` counts them), so a test
        # can see requests served side by side without timing them.
        self.gate: asyncio.Event | None = None
        self.in_flight = 0
        self.in_flight_changed = asyncio.Condition()
        self.models: list[str] = ["fake-model"]
        # A server that answers 400 to any request carrying response_format.
        self.reject_response_format = False
        # Sent as retry-after-ms on error answers so the SDK's retries are quick.
        self.retry_after_ms: int | None = 10
        # False: answers carry no "usage" block, like some local servers.
        self.send_usage = True
        # Behaviours of real servers (see the module docstring).
        self.reasoning_rules = False
        self.reasoning_tokens = 0
        self.weak: WeakModel | None = None
        self.router_models: set[str] | None = None
        self.credits_exhausted = False
        self.reject_params: set[str] = set()
        self.reject_json_schema = False
        self.vllm_max_model_len: int | None = None
        # Streaming: content per chunk, seconds between chunks, reasoning sent first.
        self.stream_chunk_chars = 16
        self.stream_gap = 0.0
        self.stream_reasoning: str | None = None
        # A server that ignores "stream" and answers with one JSON completion.
        self.ignore_stream = False
        # (monotonic time, stage, text) of every content chunk written to a stream
        self.streamed: list[tuple[float, str, str]] = []
        # Authorization headers of chat requests, and the GETs of /props and /v1/models.
        self.auth: list[str] = []
        self.gets: list[str] = []
        self._oddities: list[_Oddity] = []
        self._breaks: list[_Break] = []
        self._queues: dict[str, deque[Content]] = defaultdict(deque)
        self._failures: list[_Failure] = []
        self._clients: list[LLM] = []
        self._stopping = asyncio.Event()

    # -- test API --------------------------------------------------------

    def reply(self, stage: str, *contents: Content) -> None:
        """Queue replies for a stage; a callable gets the request body."""
        self._queues[stage].extend(contents)

    async def wait_in_flight(self, n: int = 1, within: float = 30.0) -> None:
        """Until at least ``n`` chat requests are held (at :attr:`gate`)."""
        async with asyncio.timeout(within), self.in_flight_changed:
            await self.in_flight_changed.wait_for(lambda: self.in_flight >= n)

    def calls(self, stage: str | None = None) -> list[dict[str, Any]]:
        """Request bodies received (for one stage, or all), in arrival order."""
        if stage is None:
            return list(self.requests)
        return [b for b in self.requests if stage_of(b) == stage]

    def fail(self, status: int, times: int = 1, stage: str | None = None) -> None:
        """Answer the next ``times`` calls (of ``stage``, or any) with HTTP ``status``."""
        self._failures.append(_Failure(status, times, stage))

    def fail_with(
        self, status: int, body: dict[str, Any], times: int = 1, stage: str | None = None
    ) -> None:
        """Like :meth:`fail`, answering with ``body`` (a server's own error JSON)."""
        self._failures.append(_Failure(status, times, stage, body))

    def serve_html(self, times: int = 1, stage: str | None = None) -> None:
        """Answer the next ``times`` chat calls (of ``stage``, or any) with
        HTTP 200 and an HTML page."""
        self._oddities.append(_Oddity("html", times, stage))

    def no_choices(self, times: int = 1, stage: str | None = None) -> None:
        """Answer the next ``times`` chat calls (of ``stage``, or any) with a
        completion without choices."""
        self._oddities.append(_Oddity("no_choices", times, stage))

    def garbage_json(self, times: int = 1, stage: str | None = None, body: str = "") -> None:
        """Answer the next ``times`` chat calls (of ``stage``, or any) with
        HTTP 200, ``application/json`` and ``body`` (default: cut-off JSON)."""
        self._oddities.append(_Oddity("garbage_json", times, stage, body or GARBAGE_JSON))

    def hang(self, times: int = 1, stage: str | None = None) -> None:
        """Never answer the next ``times`` chat calls (of ``stage``, or any):
        they wait until the client gives up or the fake stops."""
        self._oddities.append(_Oddity("hang", times, stage))

    def break_stream(
        self, after_chars: int, *, how: str = "drop", times: int = 1, stage: str | None = None
    ) -> None:
        """End the next ``times`` streamed answers (of ``stage``, or any)
        after ``after_chars`` characters: ``how="drop"`` closes the connection
        (a proxy or the server dying), ``how="error"`` sends the API's
        ``data: {"error": …}`` event and stops."""
        assert how in ("drop", "error")
        self._breaks.append(_Break(after_chars, how, times, stage))

    def client(self, **kw: Any) -> LLM:
        """An :class:`LLM` pointed at this fake (timeout 5, no retries unless given).

        Clients made here are closed when the fake stops.
        """
        options: dict[str, Any] = {
            "api_key": "sk-test-secret",
            "base_url": self.base_url,
            "model": self.models[0] if self.models else "fake-model",
            "timeout": 5,
            "max_retries": 0,
        }
        options.update(kw)
        llm = LLM(**options)
        self._clients.append(llm)
        return llm

    # -- server side -----------------------------------------------------

    def _take_oddity(self, stage: str) -> _Oddity | None:
        for oddity in self._oddities:
            if oddity.stage in (None, stage):
                oddity.times -= 1
                if oddity.times <= 0:
                    self._oddities.remove(oddity)
                return oddity
        return None

    def _take_break(self, stage: str) -> _Break | None:
        for cut in self._breaks:
            if cut.stage in (None, stage):
                cut.times -= 1
                if cut.times <= 0:
                    self._breaks.remove(cut)
                return cut
        return None

    def _take_failure(self, stage: str) -> _Failure | None:
        for failure in self._failures:
            if failure.stage in (None, stage):
                failure.times -= 1
                if failure.times <= 0:
                    self._failures.remove(failure)
                return failure
        return None

    async def _content_for(self, stage: str, body: dict[str, Any]) -> str | None:
        queue = self._queues[stage]
        if not queue:
            return DEFAULT_REPLIES.get(stage, DEFAULT_REPLIES["other"])
        item = queue.popleft()
        if isinstance(item, str):
            return item
        result = item(body)
        if inspect.isawaitable(result):
            result = await result
        return result

    def _error(
        self,
        status: int,
        message: str,
        *,
        kind: str | None = None,
        param: str | None = None,
        code: str | int | None = None,
        **extra: Any,
    ) -> web.Response:
        default_kind, default_code = _ERROR_KINDS.get(status, ("server_error", None))
        headers = {}
        if self.retry_after_ms is not None:
            headers["retry-after-ms"] = str(self.retry_after_ms)
        error = {
            "message": message,
            "type": kind or default_kind,
            "param": param,
            "code": code if code is not None else default_code,
            **extra,
        }
        return web.json_response({"error": error}, status=status, headers=headers)

    def _refusal(self, body: dict[str, Any], prompt_tokens: int) -> web.Response | None:
        """What a real server of the configured kind refuses, before any generation."""
        model = body.get("model")
        if self.router_models is not None and model not in self.router_models:
            message = ROUTER_UNKNOWN_MODEL.format(model=model)
            return self._error(400, message, param="model", code="model_not_supported")
        if self.credits_exhausted:
            return web.json_response({"error": ROUTER_NO_CREDITS}, status=402)
        if self.reasoning_rules:
            temperature = body.get("temperature")
            if temperature is not None and temperature != 1:
                return self._error(
                    400,
                    f"Unsupported value: 'temperature' does not support {float(temperature)} "
                    "with this model. Only the default (1) value is supported.",
                    param="temperature",
                    code="unsupported_value",
                )
            if "max_tokens" in body:
                return self._error(
                    400,
                    "Unsupported parameter: 'max_tokens' is not supported with this model. "
                    "Use 'max_completion_tokens' instead.",
                    param="max_tokens",
                    code="unsupported_parameter",
                )
        for name in sorted(self.reject_params):
            if name in body:
                return self._error(400, f"Unrecognized request argument supplied: {name}")
        response_format = body.get("response_format") or {}
        if self.reject_json_schema and response_format.get("type") == "json_schema":
            return self._error(
                400,
                'response_format type must be one of "text" or "json_object", but got: json_schema',
            )
        weak = self.weak
        if weak is not None and weak.n_ctx is not None and prompt_tokens >= weak.n_ctx:
            return self._error(
                400,
                f"request ({prompt_tokens} tokens) exceeds the available context size "
                f"({weak.n_ctx} tokens), try increasing it",
                kind="exceed_context_size_error",
                code=400,
                n_prompt_tokens=prompt_tokens,
                n_ctx=weak.n_ctx,
            )
        cap = _cap(body)
        if self.vllm_max_model_len is not None and prompt_tokens + (cap or 16) > (
            self.vllm_max_model_len
        ):
            limit = self.vllm_max_model_len
            return web.json_response(
                {
                    "object": "error",
                    "message": f"This model's maximum context length is {limit} tokens. "
                    f"However, you requested {prompt_tokens + (cap or 16)} tokens "
                    f"({prompt_tokens} in the messages, {cap or 16} in the completion). "
                    "Please reduce the length of the messages or completion.",
                    "type": "BadRequestError",
                    "param": None,
                    "code": 400,
                },
                status=400,
            )
        return None

    async def _weak_content(
        self, stage: str, body: dict[str, Any]
    ) -> tuple[str | None, str, int | None] | None:
        """(content, finish_reason, completion tokens) of the weak model, or None
        to answer from the queues as usual."""
        weak = self.weak
        if weak is None:
            return None
        messages = body["messages"]
        if weak.loop:
            cap = _cap(body)
            if cap is None:  # nothing stops it but the client giving up
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._stopping.wait(), weak.stall)
                cap = 64
            return ("la " * cap)[: cap * 4], "length", cap
        if weak.empty_reask and stage == "plan" and _is_reask(messages):
            return "[]", "stop", None
        if weak.echo and stage == "answer":
            prompt = _text(messages[-1].get("content"))
            return prompt[prompt.find("<") :] + "\n\nOK.", "stop", None
        return None

    async def handle_chat(self, request: web.Request) -> web.StreamResponse:
        try:
            body = await request.json()
        except json.JSONDecodeError:
            return self._error(400, "body is not JSON")
        stage = stage_of(body)
        self.requests.append(body)
        self.events.append((time.monotonic(), stage))
        self.auth.append(request.headers.get("Authorization", ""))
        if self.gate is not None:
            async with self.in_flight_changed:
                self.in_flight += 1
                self.in_flight_changed.notify_all()
            try:
                await self.gate.wait()
            finally:
                self.in_flight -= 1
        if self.delay:
            # Sleep, but wake early when the fake stops so teardown is quick.
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stopping.wait(), self.delay)
        failure = self._take_failure(stage)
        if failure is not None and failure.body is not None:
            return web.json_response(failure.body, status=failure.status)
        if failure is not None:
            return self._error(failure.status, f"simulated failure (HTTP {failure.status})")
        oddity = self._take_oddity(stage)
        if oddity is not None and oddity.kind == "hang":
            await self._stopping.wait()
            return self._error(503, "the fake stopped")
        if not isinstance(body.get("messages"), list) or not body["messages"]:
            return self._error(400, "'messages' must be a non-empty list")
        if self.reject_response_format and "response_format" in body:
            return self._error(400, "response_format is not supported")
        prompt_tokens = sum(len(_text(m.get("content"))) for m in body["messages"]) // 4
        refused = self._refusal(body, prompt_tokens)
        if refused is not None:
            return refused
        if oddity is not None and oddity.kind == "html":
            return web.Response(text=HTML_PAGE, content_type="text/html")
        if oddity is not None and oddity.kind == "garbage_json":
            return web.Response(text=oddity.body, content_type="application/json")
        if oddity is not None and oddity.kind == "no_choices":
            return web.json_response({"id": "x", "object": "chat.completion", "created": 0})

        finish, completion_tokens = "stop", None
        weak = await self._weak_content(stage, body)
        if weak is not None:
            content, finish, completion_tokens = weak
        else:
            content = await self._content_for(stage, body)
        cap = _cap(body)
        if self.reasoning_tokens and cap is not None and cap <= self.reasoning_tokens:
            content, finish, completion_tokens = "", "length", cap  # all spent thinking
        if completion_tokens is None:
            completion_tokens = len(content or "") // 4 + self.reasoning_tokens
        usage = {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
        }
        ident = f"chatcmpl-{len(self.requests)}"
        model = body.get("model", self.models[0])
        created = int(time.time())
        if body.get("stream") and not self.ignore_stream:
            return await self._stream(
                request, ident, model, created, content, finish, usage, body, stage
            )
        return web.json_response(
            {
                "id": ident,
                "object": "chat.completion",
                "created": created,
                "model": model,
                "choices": [
                    {
                        "index": 0,
                        "message": {"role": "assistant", "content": content},
                        "finish_reason": finish,
                        "logprobs": None,
                    }
                ],
                **({"usage": usage} if self.send_usage else {}),
            }
        )

    async def _stream(
        self,
        request: web.Request,
        ident: str,
        model: str,
        created: int,
        content: str | None,
        finish: str,
        usage: dict[str, int],
        body: dict[str, Any],
        stage: str,
    ) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        with_usage = self.send_usage and (body.get("stream_options") or {}).get("include_usage")
        cut = self._take_break(stage)

        async def send(choices: list[dict[str, Any]], **extra: Any) -> None:
            chunk = {
                "id": ident,
                "object": "chat.completion.chunk",
                "created": created,
                "model": model,
                "system_fingerprint": "fp_fake",
                "choices": choices,
                **({"usage": None} if with_usage else {}),
                **extra,
            }
            await response.write(f"data: {json.dumps(chunk)}\n\n".encode())

        def delta(d: dict[str, Any], reason: str | None = None) -> list[dict[str, Any]]:
            return [{"index": 0, "delta": d, "logprobs": None, "finish_reason": reason}]

        async def pause() -> None:
            if self.stream_gap:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._stopping.wait(), self.stream_gap)

        await send(delta({"role": "assistant", "content": "", "refusal": None}))
        if self.stream_reasoning:
            step = self.stream_chunk_chars
            for start in range(0, len(self.stream_reasoning), step):
                await send(
                    delta({"reasoning_content": self.stream_reasoning[start : start + step]})
                )
        text = content or ""
        sent = 0
        for start in range(0, len(text), self.stream_chunk_chars):
            if cut is not None and sent >= cut.after_chars:
                return await self._cut_stream(request, response, cut)
            await pause()
            piece = text[start : start + self.stream_chunk_chars]
            await send(delta({"content": piece}))
            self.streamed.append((time.monotonic(), stage, piece))
            sent += len(piece)
        if cut is not None:
            return await self._cut_stream(request, response, cut)
        await send(delta({}, finish))
        if with_usage:
            await send([], usage=usage)
        await response.write(b"data: [DONE]\n\n")
        await response.write_eof()
        return response

    async def _cut_stream(
        self, request: web.Request, response: web.StreamResponse, cut: _Break
    ) -> web.StreamResponse:
        if cut.how == "error":
            error = {
                "message": "The server had an error while processing your request.",
                "type": "server_error",
                "param": None,
                "code": None,
            }
            await response.write(f"data: {json.dumps({'error': error})}\n\n".encode())
            await response.write_eof()
            return response
        # The connection drops: no last chunk, no [DONE], no end of the chunked body.
        if request.transport is not None:
            request.transport.close()
        return response

    async def handle_models(self, request: web.Request) -> web.Response:
        self.gets.append("/v1/models")
        data = [{"id": m, "object": "model", "created": 0, "owned_by": "fake"} for m in self.models]
        return web.json_response({"object": "list", "data": data})

    async def handle_props(self, request: web.Request) -> web.Response:
        """llama.cpp's ``GET /props`` (only when a weak model reports its context)."""
        self.gets.append("/props")
        weak = self.weak
        if weak is None or weak.n_ctx is None or not weak.props:
            return web.Response(status=404, text="Not Found")
        return web.json_response(
            {
                "default_generation_settings": {"n_ctx": weak.n_ctx, "params": {}},
                "total_slots": 1,
                "model_path": f"/models/{self.models[0]}",
                "build_info": "b0000-fake",
            }
        )


def _cap(body: dict[str, Any]) -> int | None:
    """The completion cap a request carries, whichever name it uses."""
    for name in ("max_completion_tokens", "max_tokens"):
        value = body.get(name)
        if isinstance(value, int):
            return value
    return None


def _is_reask(messages: list[dict[str, Any]]) -> bool:
    """A plan re-ask: the conversation ends with our rejected answer and the error."""
    return (
        len(messages) >= 3
        and messages[-2].get("role") == "assistant"
        and "<request>" not in _text(messages[-1].get("content"))
    )


@asynccontextmanager
async def make_llm_fake() -> AsyncIterator[FakeLLM]:
    """Start a fake on 127.0.0.1 (ephemeral port); stop it and its clients on exit."""
    fake = FakeLLM()
    app = web.Application()
    app.router.add_post("/v1/chat/completions", fake.handle_chat)
    app.router.add_get("/v1/models", fake.handle_models)
    app.router.add_get("/props", fake.handle_props)
    async with serve(app) as base_url:
        fake.base_url = f"{base_url}/v1"
        try:
            yield fake
        finally:
            fake._stopping.set()
            for llm in fake._clients:
                await llm.aclose()


@pytest.fixture
async def llm_fake() -> AsyncIterator[FakeLLM]:
    """A running fake OpenAI-compatible server (function scope)."""
    async with make_llm_fake() as fake:
        yield fake
