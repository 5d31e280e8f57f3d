"""The fake router's shared pieces: what it records, how it reads requests,
and the OpenAI-compatible answers every LLM provider (and the auto-router)
gives: chat completions (JSON or SSE), text completions, embeddings.
"""

from __future__ import annotations

import json
import re
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from aiohttp import web
from multidict import CIMultiDict

from tests.fakes import hf_service_outputs as out
from tests.fakes.hf_service_registry import HubModel, ProviderMapping

if TYPE_CHECKING:
    from tests.fakes.hf_service import FakeHFService

POLICIES = ("", "fastest", "cheapest", "preferred")


@dataclass
class RouterCall:
    """One request the router received (``time``/``t_end``: ``time.monotonic()``;
    ``peer``: the client's address and port, one per connection).

    ``kind``: "inference" (the POST that runs a model), "poll" (a queue
    status/result GET), "media" (an output file download) or "other".
    ``provider`` is the provider that served it (the auto-router's pick for
    ``/v1/chat/completions``). ``json`` is the parsed body (form fields for
    multipart). ``inputs`` holds the media decoded from the request (raw body,
    ``data:`` URLs, multipart files, hf-inference base64 ``inputs``), in order.
    """

    provider: str | None
    path: str
    method: str
    provider_model_id: str | None
    hub_id: str | None
    headers: CIMultiDict[str]
    query: dict[str, str]
    body: bytes
    json: Any
    time: float
    kind: str = "other"
    inputs: list[bytes] = field(default_factory=list)
    status: int = 0
    t_end: float = 0.0
    # The client's end of the TCP connection it came on (one per connection).
    peer: tuple[str, int] | None = None


@dataclass
class Job:
    """A queued prediction: ``result`` is served once ``pending`` polls ran out."""

    id: str
    provider: str
    task: str
    hub_id: str | None
    provider_model_id: str
    result: Any
    pending: int
    input: Any = None
    created: float = field(default_factory=time.time)


@dataclass
class Ctx:
    """Everything a handler needs to answer one inference call."""

    svc: FakeHFService
    call: RouterCall
    provider: str
    model: HubModel | None
    mapping: ProviderMapping | None
    request: web.Request
    task_override: str | None = None

    @property
    def payload(self) -> dict[str, Any]:
        return self.call.json if isinstance(self.call.json, dict) else {}

    @property
    def task(self) -> str:
        return self.task_override or (self.mapping.task if self.mapping else "")

    @property
    def first_input(self) -> bytes | None:
        return self.call.inputs[0] if self.call.inputs else None

    def host(self, data: bytes, ext: str) -> str:
        """Serve an output file from the router; its URL."""
        return self.svc.host_media(self.provider, data, ext, self.call.hub_id)


Handler = Callable[[Ctx], Awaitable[web.StreamResponse]]


# -- reading requests ----------------------------------------------------------


def parse_multipart(body: bytes, content_type: str) -> tuple[dict[str, str], list[bytes]]:
    """(form fields, file contents) of a multipart/form-data body."""
    m = re.search(r"boundary=\"?([^\";]+)\"?", content_type)
    if m is None:
        return {}, []
    fields: dict[str, str] = {}
    files: list[bytes] = []
    for part in body.split(b"--" + m[1].encode())[1:]:
        head, sep, content = part.partition(b"\r\n\r\n")
        if not sep:
            continue
        disposition = head.decode(errors="replace")
        content = content.removesuffix(b"\r\n")
        if "filename=" in disposition:
            files.append(content)
        elif name := re.search(r'name="([^"]*)"', disposition):
            fields[name[1]] = content.decode(errors="replace")
    return fields, files


def parse_body(body: bytes, content_type: str) -> tuple[Any, list[bytes]]:
    """(parsed body, media inputs), whatever the provider's way of sending them."""
    if content_type.startswith("multipart/"):
        return parse_multipart(body, content_type)
    try:
        parsed = json.loads(body) if body else None
    except (json.JSONDecodeError, UnicodeDecodeError):
        return None, [body]
    if parsed is None:
        return None, []
    found: list[bytes] = []
    seen: set[str] = set()

    def walk(value: Any) -> None:
        if isinstance(value, dict | list):
            for v in value.values() if isinstance(value, dict) else value:
                walk(v)
        elif isinstance(value, str) and value.startswith("data:") and value not in seen:
            seen.add(value)  # fal sends the same image as image_url and image_urls
            if (decoded := out.decode_data_url(value)) is not None:
                found.append(decoded[1])

    walk(parsed)
    inputs = parsed.get("inputs") if isinstance(parsed, dict) else None
    if not found and isinstance(inputs, str) and len(inputs) > 64:  # hf-inference base64
        decoded = out.decode_data_url(f"data:;base64,{inputs}")
        if decoded is not None and out.sniff_ext(decoded[1]) != "bin":
            found.append(decoded[1])
    return parsed, found


def not_found_text() -> web.Response:
    """The documented answer of hf-inference for a model it does not serve."""
    return web.Response(status=404, text="Not Found", content_type="text/plain")


def choose_provider(model: HubModel | None, suffix: str) -> tuple[str, ProviderMapping] | None:
    """The auto-router's pick for ``model[:suffix]``: the named provider, or
    for a policy the first chat mapping not in "error" (the fake has no
    latency or price data to rank by)."""
    if model is None:
        return None
    chat_maps = [(p, m) for p, m in model.mappings.items() if m.task == "conversational"]
    if suffix in POLICIES:
        return next(((p, m) for p, m in chat_maps if m.status != "error"), None)
    return next(((p, m) for p, m in chat_maps if p == suffix), None)


# -- OpenAI-compatible answers -------------------------------------------------------


def _chat_json(ctx: Ctx, text: str, ident: str) -> dict[str, Any]:
    return {
        "id": ident,
        "object": "chat.completion",
        "created": int(time.time()),
        "model": ctx.mapping.provider_id if ctx.mapping else ctx.payload.get("model"),
        "system_fingerprint": "fake-hf-router",
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": text},
                "logprobs": None,
                "finish_reason": "stop",
            }
        ],
    }


async def chat(ctx: Ctx) -> web.StreamResponse:
    """``chat.completion`` JSON, or ``chat.completion.chunk`` SSE frames ending
    ``data: [DONE]`` (usage last when ``stream_options.include_usage``).
    ``X-Inference-Provider`` names the serving provider (a convenience of the fake)."""
    text = await ctx.svc.chat_text(ctx.payload)
    usage = out.usage_for(ctx.payload, text)
    ident = f"chatcmpl-{uuid.uuid4().hex[:24]}"
    headers = {"X-Inference-Provider": ctx.provider}
    if not ctx.payload.get("stream"):
        return web.json_response({**_chat_json(ctx, text, ident), "usage": usage}, headers=headers)
    response = web.StreamResponse(headers={"Content-Type": "text/event-stream", **headers})
    await response.prepare(ctx.request)
    base = {**_chat_json(ctx, "", ident), "object": "chat.completion.chunk"}

    async def send(choices: list[dict[str, Any]], **extra: Any) -> None:
        chunk = {**base, "choices": choices, **extra}
        await response.write(f"data: {json.dumps(chunk)}\n\n".encode())

    def delta(d: dict[str, Any], finish: str | None = None) -> list[dict[str, Any]]:
        return [{"index": 0, "delta": d, "finish_reason": finish}]

    await send(delta({"role": "assistant", "content": ""}))
    for start in range(0, len(text), 16):
        await send(delta({"content": text[start : start + 16]}))
    await send(delta({}, "stop"))
    if (ctx.payload.get("stream_options") or {}).get("include_usage"):
        await send([], usage=usage)
    await response.write(b"data: [DONE]\n\n")
    await response.write_eof()
    return response


async def completions(ctx: Ctx) -> web.StreamResponse:
    prompt_tokens = len(str(ctx.payload.get("prompt", ""))) // 4
    choice = {"index": 0, "text": " and a generated continuation.", "finish_reason": "stop",
              "logprobs": None, "seed": 42}  # fmt: skip
    usage = {"prompt_tokens": prompt_tokens, "completion_tokens": 6}
    return web.json_response(
        {
            "id": f"cmpl-{uuid.uuid4().hex[:24]}",
            "object": "text_completion",
            "created": int(time.time()),
            "model": ctx.payload.get("model"),
            "choices": [choice],
            "usage": {**usage, "total_tokens": prompt_tokens + 6},
        }
    )


async def embeddings(ctx: Ctx) -> web.StreamResponse:
    texts = ctx.payload.get("input")
    count = len(texts) if isinstance(texts, list) else 1
    data = [
        {"object": "embedding", "index": i, "embedding": [0.1 * (i + 1), -0.2, 0.3, 0.05]}
        for i in range(count)
    ]
    return web.json_response({"object": "list", "data": data, "model": ctx.payload.get("model")})


def openai_models(models: list[HubModel], wanted: str) -> web.Response:
    """``GET /v1/models[/{id}]``: the chat models and the providers serving them."""
    data = [
        {
            "id": m.id,
            "object": "model",
            "created": 1_700_000_000,
            "owned_by": m.author,
            "providers": [
                {"provider": p, "status": v.status, "is_model_author": v.is_model_author}
                for p, v in m.mappings.items()
                if v.task == "conversational"
            ],
        }
        for m in models
        if any(v.task == "conversational" for v in m.mappings.values())
    ]
    if wanted:
        found = [d for d in data if d["id"] == wanted]
        return web.json_response(found[0]) if found else not_found_text()
    return web.json_response({"object": "list", "data": data})


__all__ = [
    "Ctx",
    "Handler",
    "Job",
    "RouterCall",
    "chat",
    "choose_provider",
    "completions",
    "embeddings",
    "not_found_text",
    "openai_models",
    "parse_body",
    "parse_multipart",
]
