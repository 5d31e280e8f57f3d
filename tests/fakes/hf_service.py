"""A loopback emulation of the 2026 Hugging Face service for the real
``huggingface_hub`` client: the Hub API, the Inference Providers router and
the retired api-inference host, each on its own 127.0.0.1 port.

- :attr:`FakeHFService.hub_url`: the Hub API (``hf_service_hub``) over a
  registry of models and their provider mappings (``hf_service_registry``).
- :attr:`FakeHFService.router_url`: ``/{provider}/...`` in each provider's own
  protocol (``hf_service_providers``), the chat auto-router
  ``POST /v1/chat/completions`` (``model`` is a hub id, optionally
  ``:provider`` or ``:fastest``/``:cheapest``/``:preferred``) and
  ``GET /v1/models``; output files under ``/files/``. A token not in
  :attr:`FakeHFService.valid_tokens` gets 401.
- :attr:`FakeHFService.legacy_url`: every request gets the documented 410.

The servers run on their own event loop in a thread: the client makes
synchronous Hub calls (``model_info``) and downloads inside its async
methods, which would deadlock a server sharing the test's loop.

Use the ``hf_service`` fixture (seeded with the documented facts) or
``async with make_hf_service(facts=True) as svc`` anywhere else, and point
the client at it with ``with svc.configure_client(): ...``.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import re
import threading
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Iterator, Mapping
from contextlib import AsyncExitStack, asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from multidict import CIMultiDict

from tests.fakes import hf_service_router as rt
from tests.fakes.hf_service_hub import (
    INVALID_TOKEN,
    Failure,
    HubQuery,
    bearer,
    documented_errors,
    failure_response,
    hub_app,
    legacy_app,
)
from tests.fakes.hf_service_outputs import MIME, default_chat_reply
from tests.fakes.hf_service_providers import plan, poll_answer, poll_target
from tests.fakes.hf_service_registry import HubModel, MappingSpec, ProviderMapping, Registry
from tests.fakes.hf_service_router import Ctx, Job, RouterCall
from tests.fakes.loopback import serve

PROVIDERS = (
    "baseten", "cerebras", "cohere", "deepinfra", "fal-ai", "featherless-ai", "fireworks-ai",
    "groq", "hf-inference", "novita", "nscale", "openai", "ovhcloud", "publicai", "replicate",
    "scaleway", "together", "wavespeed", "zai-org",
)  # fmt: skip
# Reported by users (huggingface/agents-course#386); not in the facts file.
CREDITS_EXHAUSTED = (
    "You have exceeded your monthly included credits for Inference Providers. "
    "Subscribe to PRO to get 20x more monthly included credits."
)


class FakeHFService:
    """State, knobs and records of one running service; see the module docstring."""

    def __init__(self) -> None:
        self.hub_url = self.router_url = self.legacy_url = ""
        self.registry = Registry()
        self.valid_tokens: set[str] = {"hf_test_token"}
        self.user: dict[str, Any] = {
            "type": "user", "id": "6500000000000000000000aa", "name": "test-user",
            "fullname": "Test User", "email": "test-user@example.com", "emailVerified": True,
            "canPay": False, "isPro": False, "periodEnd": None, "avatarUrl": "", "orgs": [],
            "auth": {"type": "access_token",
                     "accessToken": {"displayName": "tests", "role": "fineGrained"}},
        }  # fmt: skip
        # Knobs.
        self.chat_reply: Callable[[dict[str, Any]], str | Awaitable[str]] = default_chat_reply
        self.transcribe: Callable[[bytes | None], str] = lambda _audio: "hello world"
        self.pending_polls = 0  # queue polls answering "in progress" before "done"
        self.check_auth = True  # router: 401 unless the Bearer token is valid
        # Awaited (on the service's loop) before a router call is answered: hold it.
        self.hold: Callable[[RouterCall], Awaitable[None]] | None = None
        self.hub_delay = 0.0  # seconds before each Hub model request is answered
        self.hub_hold: Callable[[HubQuery], Awaitable[None]] | None = None  # ... awaited first
        # Records.
        self.calls: list[RouterCall] = []
        self.hub_queries: list[HubQuery] = []
        self.legacy_calls: list[HubQuery] = []
        self._lock = threading.Lock()
        self._failures: dict[str, list[Failure]] = {}
        self._hub_failures: list[Failure] = []
        self._delays: dict[str, float] = {}
        self._media: dict[str, tuple[bytes, str, str | None]] = {}
        self._jobs: dict[str, Job] = {}
        self._stopping: asyncio.Event | None = None

    # -- registry ------------------------------------------------------------------

    @property
    def models(self) -> dict[str, HubModel]:
        return self.registry.models

    def add_model(
        self,
        hub_id: str,
        pipeline_tag: str | None,
        *,
        mappings: Mapping[str, MappingSpec] | None = None,
        downloads: int = 0,
        likes: int = 0,
        tags: Iterable[str] = (),
        library_name: str | None = None,
    ) -> HubModel:
        """Register a repo; ``mappings``: provider -> ``(provider_model_id, task)``
        or a :class:`ProviderMapping` (status "live", "staging" or "error")."""
        return self.registry.add(
            hub_id, pipeline_tag, mappings=mappings, downloads=downloads, likes=likes,
            tags=tags, library_name=library_name,
        )  # fmt: skip

    def delete_model(self, hub_id: str) -> None:
        self.registry.delete(hub_id)

    def rename_model(self, old: str, new: str) -> None:
        self.registry.rename(old, new)

    def load_facts(self, path: Path | str | None = None) -> FakeHFService:
        self.registry.load_facts(path)
        return self

    # -- knobs -----------------------------------------------------------------------

    def fail(
        self,
        hub_id: str,
        status: int,
        times: int = 1,
        *,
        body: Any = None,
        headers: Mapping[str, str] | None = None,
        provider: str | None = None,
    ) -> None:
        """Answer the next ``times`` inference calls for ``hub_id`` (-1: all; only
        through ``provider`` when given) with ``status``. Default bodies: 402
        credits exhausted, 429 with ``Retry-After: 2``, 503 "currently loading"
        with ``estimated_time``, 404 and 410 the documented answers."""
        default_body, default_headers = _default_failure(hub_id, status)
        failure = Failure(
            status, times, default_body if body is None else body,
            {**default_headers, **(headers or {})}, provider,
        )  # fmt: skip
        with self._lock:
            self._failures.setdefault(hub_id, []).append(failure)

    def fail_hub(self, status: int, times: int = 1, *, body: Any = None) -> None:
        """Answer the next ``times`` Hub model requests (info and list) with ``status``."""
        with self._lock:
            default = {"error": f"simulated failure (HTTP {status})"}
            self._hub_failures.append(Failure(status, times, default if body is None else body))

    def delay(self, hub_id: str, seconds: float) -> None:
        """Sleep this long before answering each inference call for ``hub_id``."""
        self._delays[hub_id] = seconds

    def calls_for(
        self,
        hub_id: str | None = None,
        *,
        kind: str | None = "inference",
        provider: str | None = None,
    ) -> list[RouterCall]:
        return [
            c
            for c in self.calls
            if (hub_id is None or c.hub_id == hub_id)
            and (kind is None or c.kind == kind)
            and (provider is None or c.provider == provider)
        ]

    # -- pointing the client here --------------------------------------------------------

    @contextmanager
    def configure_client(self) -> Iterator[FakeHFService]:
        """Point ``huggingface_hub`` at this service for the block, then restore.

        Sets ``constants.ENDPOINT``, ``constants.INFERENCE_PROXY_TEMPLATE`` and the
        conversational auto-router's ``base_url``; also the hf-inference helpers'
        ``base_url``, which the client computes from the template at import time.
        Clears the client's lru caches on the way in and out."""
        from huggingface_hub import constants
        from huggingface_hub.inference import _providers

        hf_helpers = list(_providers.PROVIDERS["hf-inference"].values())
        auto = _providers.CONVERSATIONAL_AUTO_ROUTER
        saved = (constants.ENDPOINT, constants.INFERENCE_PROXY_TEMPLATE, auto.base_url)
        saved_template = constants.HUGGINGFACE_CO_URL_TEMPLATE
        saved_helpers = [h.base_url for h in hf_helpers]
        constants.ENDPOINT = self.hub_url
        constants.INFERENCE_PROXY_TEMPLATE = self.router_url + "/{provider}"
        auto.base_url = self.router_url
        for helper in hf_helpers:
            helper.base_url = f"{self.router_url}/hf-inference"
        clear_client_caches()
        try:
            yield self
        finally:
            constants.ENDPOINT, constants.INFERENCE_PROXY_TEMPLATE, auto.base_url = saved
            constants.HUGGINGFACE_CO_URL_TEMPLATE = saved_template
            for helper, base_url in zip(hf_helpers, saved_helpers, strict=True):
                helper.base_url = base_url
            clear_client_caches()

    # -- used by the handlers ---------------------------------------------------------------

    def host_media(self, provider: str, data: bytes, ext: str, hub_id: str | None = None) -> str:
        name = f"{uuid.uuid4().hex}.{ext}"
        self._media[name] = (data, MIME.get(ext, "application/octet-stream"), hub_id)
        return f"{self.router_url}/files/{provider}/{name}"

    def new_job(self, ctx: Ctx, result: Any, *, input: Any = None) -> Job:
        call = ctx.call
        job = Job(
            str(uuid.uuid4()), ctx.provider, ctx.task, call.hub_id,
            call.provider_model_id or "", result, self.pending_polls, input,
        )  # fmt: skip
        self._jobs[job.id] = job
        return job

    def finish_jobs(self) -> None:
        """Every queued job answers done at its next poll, and new ones at
        once: the end of a ``pending_polls`` set high to keep them polling."""
        self.pending_polls = 0
        for job in list(self._jobs.values()):
            job.pending = 0

    async def chat_text(self, body: dict[str, Any]) -> str:
        text = self.chat_reply(body)
        return await text if inspect.isawaitable(text) else text

    def take_hub_failure(self) -> Failure | None:
        return self._take(self._hub_failures)

    def _take(self, failures: list[Failure], provider: str | None = None) -> Failure | None:
        with self._lock:
            for failure in failures:
                if failure.provider not in (None, provider):
                    continue
                if failure.times > 0:
                    failure.times -= 1
                    if failure.times == 0:
                        failures.remove(failure)
                return failure
        return None

    # -- server side: router --------------------------------------------------------------

    async def handle_router(self, request: web.Request) -> web.StreamResponse:
        body = await request.read()
        parsed, inputs = rt.parse_body(body, request.headers.get("Content-Type", ""))
        call = RouterCall(
            None, request.path, request.method, None, None, CIMultiDict(request.headers),
            dict(request.query), body, parsed, time.monotonic(), inputs=inputs,
        )  # fmt: skip
        if request.transport is not None:
            host, port, *_ = request.transport.get_extra_info("peername")
            call.peer = (host, port)
        self.calls.append(call)
        if request.method == "GET":
            response = await self._route_get(call)
        elif request.method == "POST":
            call.kind = "inference"
            response = await self._route_post(request, call)
        else:
            response = rt.not_found_text()
        call.status, call.t_end = response.status, time.monotonic()
        return response

    async def _route_post(self, request: web.Request, call: RouterCall) -> web.StreamResponse:
        if call.path == "/v1/chat/completions":
            return await self._auto_router(request, call)
        provider, _, tail = call.path.lstrip("/").partition("/")
        call.provider = provider
        found = (
            plan(provider, "/" + tail, request.query, call.json) if provider in PROVIDERS else None
        )
        if found is None:
            return rt.not_found_text()
        pid = str(found.provider_model_id)
        served = (
            self.registry.serving_version(provider, pid)
            if found.by_version
            else self.registry.serving(provider, pid)
        )
        model = _pick(served, call.body)
        mapping = model.mappings[provider] if model else None
        call.provider_model_id = mapping.provider_id if mapping else found.provider_model_id
        call.hub_id = model.id if model else None
        if refused := await self._gate(call, provider):
            return refused
        if model is None:
            return _unknown_model(provider, call.provider_model_id, found.handler is rt.chat)
        return await found.handler(
            Ctx(self, call, provider, model, mapping, request, found.task_override)
        )

    async def _auto_router(self, request: web.Request, call: RouterCall) -> web.StreamResponse:
        requested = str(call.json.get("model", "")) if isinstance(call.json, dict) else ""
        hub_id, _, suffix = requested.partition(":")
        model = self.registry.get(hub_id)
        call.hub_id = hub_id
        choice = rt.choose_provider(model, suffix)
        if choice is not None:
            call.provider, call.provider_model_id = choice[0], choice[1].provider_id
        if refused := await self._gate(call, call.provider):
            return refused
        if choice is None:
            error = dict(documented_errors()["router_chat_unknown_model"]["body"]["error"])
            error["message"] = error["message"].replace("<id>", requested)
            return web.json_response({"error": error}, status=400)
        return await rt.chat(Ctx(self, call, choice[0], model, choice[1], request))

    async def _gate(self, call: RouterCall, provider: str | None) -> web.Response | None:
        """Authentication, then the model's delay and injected failure."""
        if self.check_auth and bearer(call.headers) not in self.valid_tokens:
            return web.json_response({"error": INVALID_TOKEN}, status=401)
        if call.hub_id is None:
            return None
        if self.hold is not None:
            await self.hold(call)
        if seconds := self._delays.get(call.hub_id):
            await self._sleep(seconds)
        if failure := self._take(self._failures.get(call.hub_id, []), provider):
            return failure_response(failure.status, failure.body, failure.headers)
        return None

    async def _route_get(self, call: RouterCall) -> web.StreamResponse:
        path = call.path
        if m := re.fullmatch(r"/files/([^/]+)/([^/]+)", path):
            call.kind, call.provider = "media", m[1]
            if m[2] not in self._media:
                return rt.not_found_text()
            data, mime, call.hub_id = self._media[m[2]]
            return web.Response(body=data, content_type=mime)
        if path == "/v1/models" or path.startswith("/v1/models/"):
            return rt.openai_models(list(self.models.values()), path.removeprefix("/v1/models/"))
        target = poll_target(path)
        if target is None:
            return rt.not_found_text()
        provider, job_id, want_status = target
        call.kind, call.provider = "poll", provider
        job = self._jobs.get(job_id)
        if job is None:
            return web.json_response({"detail": "Request not found"}, status=404)
        call.hub_id, call.provider_model_id = job.hub_id, job.provider_model_id
        if self.check_auth and bearer(call.headers) not in self.valid_tokens:
            return web.json_response({"error": INVALID_TOKEN}, status=401)
        done = job.pending <= 0
        if not done and (want_status or job.provider != "fal-ai"):
            job.pending -= 1
        return poll_answer(job, want_status, done, self.router_url)

    async def _sleep(self, seconds: float) -> None:
        """Sleep, but wake early when the service stops so teardown is quick."""
        assert self._stopping is not None
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._stopping.wait(), seconds)

    # -- lifecycle (runs on the service's own loop) -------------------------------------------

    async def _start(self, stack: AsyncExitStack) -> None:
        self._stopping = asyncio.Event()
        router = web.Application(client_max_size=64 * 1024 * 1024)
        router.router.add_route("*", "/{tail:.*}", self.handle_router)
        self.hub_url = await stack.enter_async_context(serve(hub_app(self)))
        self.router_url = await stack.enter_async_context(serve(router))
        self.legacy_url = await stack.enter_async_context(serve(legacy_app(self)))

    async def _stop(self, stack: AsyncExitStack) -> None:
        if self._stopping is not None:
            self._stopping.set()
        await stack.aclose()


def _default_failure(hub_id: str, status: int) -> tuple[Any, dict[str, str]]:
    errors = documented_errors()
    match status:
        case 402:
            return {"error": CREDITS_EXHAUSTED}, {}
        case 429:
            return {"error": "Rate limit reached. Please retry later."}, {"Retry-After": "2"}
        case 503:
            return {"error": f"Model {hub_id} is currently loading", "estimated_time": 20.0}, {}
        case 404:
            return errors["hf_inference_unserved_model"]["body"], {}
        case 410:
            return errors["api_inference_legacy"]["body"], {}
    return {"error": f"simulated failure (HTTP {status})"}, {}


def _pick(models: list[HubModel], body: bytes) -> HubModel | None:
    """The repo a provider-side id stands for; several can share one (LoRAs
    on one base model), told apart by the hub id in the payload."""
    if len(models) > 1:
        named = [m for m in models if m.id.encode() in body]
        return (named or models)[0]
    return models[0] if models else None


def _unknown_model(provider: str, provider_model_id: str | None, is_chat: bool) -> web.Response:
    if provider == "hf-inference":
        return rt.not_found_text()
    if is_chat:
        error = {"message": f"The model `{provider_model_id}` does not exist.",
                 "type": "invalid_request_error", "param": "model", "code": "model_not_found"}  # fmt: skip
        return web.json_response({"error": error}, status=404)
    return web.json_response({"error": f"Model {provider_model_id} not found"}, status=404)


def clear_client_caches() -> None:
    """The client caches Hub look-ups for the life of the process; forget them."""
    from huggingface_hub.inference._providers import _common, hf_inference

    _common._fetch_inference_provider_mapping.cache_clear()
    hf_inference._check_supported_task.cache_clear()
    hf_inference._fetch_recommended_models.cache_clear()


@asynccontextmanager
async def make_hf_service(*, facts: bool = False) -> AsyncIterator[FakeHFService]:
    """Start the three servers on 127.0.0.1 (ephemeral ports, own loop and
    thread); ``facts=True`` seeds the documented facts. Stops them on exit."""
    svc = FakeHFService()
    if facts:
        svc.load_facts()
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, name="fake-hf-service", daemon=True)
    thread.start()

    async def on_service_loop(coro: Any) -> Any:
        return await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(coro, loop))

    stack = AsyncExitStack()
    try:
        await on_service_loop(svc._start(stack))
        yield svc
    finally:
        await on_service_loop(svc._stop(stack))
        loop.call_soon_threadsafe(loop.stop)
        await asyncio.to_thread(thread.join, 5)
        loop.close()


@pytest.fixture
async def hf_service() -> AsyncIterator[FakeHFService]:
    """A running fake Hub + router, seeded with the documented facts (function scope)."""
    async with make_hf_service(facts=True) as svc:
        yield svc


__all__ = [
    "FakeHFService",
    "HubQuery",
    "ProviderMapping",
    "RouterCall",
    "clear_client_caches",
    "hf_service",
    "make_hf_service",
]
