"""A loopback OpenAI-compatible server, so tests drive the real ``openai`` client.

``POST /v1/chat/completions`` answers per *stage*: the agent's prompts start
their first system message with a marker ("#1 Task Planning Stage", "#2 Model
Selection Stage", "#4 Response Generation Stage"), and tests queue replies for
each stage with :meth:`FakeLLM.reply`.  ``GET /v1/models`` lists
:attr:`FakeLLM.models`.  Failures, latency and servers that refuse JSON mode
can be simulated; every request body and its arrival time is recorded.

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


@dataclass
class _Failure:
    status: int
    times: int
    stage: str | None


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
        self.models: list[str] = ["fake-model"]
        # A server that answers 400 to any request carrying response_format.
        self.reject_response_format = False
        # Sent as retry-after-ms on error answers so the SDK's retries are quick.
        self.retry_after_ms: int | None = 10
        # False: answers carry no "usage" block, like some local servers.
        self.send_usage = True
        self._queues: dict[str, deque[Content]] = defaultdict(deque)
        self._failures: list[_Failure] = []
        self._clients: list[LLM] = []
        self._stopping = asyncio.Event()

    # -- test API --------------------------------------------------------

    def reply(self, stage: str, *contents: Content) -> None:
        """Queue replies for a stage; a callable gets the request body."""
        self._queues[stage].extend(contents)

    def calls(self, stage: str | None = None) -> list[dict[str, Any]]:
        """Request bodies received (for one stage, or all), in arrival order."""
        if stage is None:
            return list(self.requests)
        return [b for b in self.requests if stage_of(b) == stage]

    def fail(self, status: int, times: int = 1, stage: str | None = None) -> None:
        """Answer the next ``times`` calls (of ``stage``, or any) with HTTP ``status``."""
        self._failures.append(_Failure(status, times, stage))

    def client(self, **kw: Any) -> LLM:
        """An :class:`LLM` pointed at this fake (timeout 5, no retries unless given).

        Clients made here are closed when the fake stops.
        """
        options: dict[str, Any] = {
            "api_key": "sk-test-secret",
            "base_url": self.base_url,
            "model": self.models[0],
            "timeout": 5,
            "max_retries": 0,
        }
        options.update(kw)
        llm = LLM(**options)
        self._clients.append(llm)
        return llm

    # -- server side -----------------------------------------------------

    def _take_failure(self, stage: str) -> int | None:
        for failure in self._failures:
            if failure.stage in (None, stage):
                failure.times -= 1
                if failure.times <= 0:
                    self._failures.remove(failure)
                return failure.status
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

    def _error(self, status: int, message: str) -> web.Response:
        kind, code = _ERROR_KINDS.get(status, ("server_error", None))
        headers = {}
        if self.retry_after_ms is not None:
            headers["retry-after-ms"] = str(self.retry_after_ms)
        payload = {"error": {"message": message, "type": kind, "param": None, "code": code}}
        return web.json_response(payload, status=status, headers=headers)

    async def handle_chat(self, request: web.Request) -> web.StreamResponse:
        try:
            body = await request.json()
        except json.JSONDecodeError:
            return self._error(400, "body is not JSON")
        stage = stage_of(body)
        self.requests.append(body)
        self.events.append((time.monotonic(), stage))
        if self.delay:
            # Sleep, but wake early when the fake stops so teardown is quick.
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stopping.wait(), self.delay)
        status = self._take_failure(stage)
        if status is not None:
            return self._error(status, f"simulated failure (HTTP {status})")
        if not isinstance(body.get("messages"), list) or not body["messages"]:
            return self._error(400, "'messages' must be a non-empty list")
        if self.reject_response_format and "response_format" in body:
            return self._error(400, "response_format is not supported")

        content = await self._content_for(stage, body)
        prompt_tokens = sum(len(_text(m.get("content"))) for m in body["messages"]) // 4
        completion_tokens = len(content or "") // 4
        usage = {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
        }
        ident = f"chatcmpl-{len(self.requests)}"
        model = body.get("model", self.models[0])
        created = int(time.time())
        if body.get("stream"):
            return await self._stream(request, ident, model, created, content, usage, body)
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
                        "finish_reason": "stop",
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
        usage: dict[str, int],
        body: dict[str, Any],
    ) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)

        async def send(choices: list[dict[str, Any]], **extra: Any) -> None:
            chunk = {
                "id": ident,
                "object": "chat.completion.chunk",
                "created": created,
                "model": model,
                "choices": choices,
                **extra,
            }
            await response.write(f"data: {json.dumps(chunk)}\n\n".encode())

        def delta(d: dict[str, Any], finish: str | None = None) -> list[dict[str, Any]]:
            return [{"index": 0, "delta": d, "finish_reason": finish}]

        await send(delta({"role": "assistant", "content": ""}))
        text = content or ""
        for start in range(0, len(text), 16):
            await send(delta({"content": text[start : start + 16]}))
        await send(delta({}, "stop"))
        if self.send_usage and (body.get("stream_options") or {}).get("include_usage"):
            await send([], usage=usage)
        await response.write(b"data: [DONE]\n\n")
        await response.write_eof()
        return response

    async def handle_models(self, request: web.Request) -> web.Response:
        data = [{"id": m, "object": "model", "created": 0, "owned_by": "fake"} for m in self.models]
        return web.json_response({"object": "list", "data": data})


@asynccontextmanager
async def make_llm_fake() -> AsyncIterator[FakeLLM]:
    """Start a fake on 127.0.0.1 (ephemeral port); stop it and its clients on exit."""
    fake = FakeLLM()
    app = web.Application()
    app.router.add_post("/v1/chat/completions", fake.handle_chat)
    app.router.add_get("/v1/models", fake.handle_models)
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
