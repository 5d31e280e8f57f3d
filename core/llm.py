"""The OpenAI-compatible chat client: one call in, text and token counts out.

The agent's stages only need "send these messages, give me the text".  This
wrapper adds what every stage would otherwise repeat, and what current servers
require:

* **Parameters that work on current models.**  No sampling parameter is sent
  unless the operator set one (reasoning models accept only their default
  temperature); the completion cap goes out as ``max_completion_tokens``
  (they reject ``max_tokens``); ``reasoning_effort`` only when set.  A server
  that rejects one of these *by name* gets the older spelling, or none, from
  then on (remembered per client).
* **Structured output, degrading per client.**  A caller may pass a
  :class:`JSONSchema`: it is sent as ``response_format=json_schema``; a
  server that refuses it (a 400 naming ``response_format``, ``json_schema``,
  the schema or a grammar) is sent the schema's plainer forms
  (:attr:`JSONSchema.fallbacks`) one by one, then ``json_object``, then
  nothing.  No other 400 turns JSON mode off.  Parsing stays tolerant either
  way (the stages' own parsers); :attr:`LLM.structured_output` says what the
  server took.
* **Bounded time.**  Every stage passes a completion cap, and when the
  server says how big its context is (llama.cpp ``GET /props``, vLLM
  ``max_model_len``) a prompt that cannot fit fails before it is sent.
  Each stage has **one deadline** (:class:`Deadline`, ``timeout`` seconds
  unless the stage says otherwise) that every call of the stage shares,
  retries and re-asks included: each attempt may take only what is left of
  it, and no attempt is started with less than a few seconds left
  (:meth:`LLM.stage` opens one; a call outside any stage gets its own).
  Retries are our own, not the SDK's: the client is built with
  ``max_retries=0`` because the SDK re-sends a request that *timed out*
  unchanged.  Here only failures a second identical request can cure are
  retried (connection refused/reset, 429, 5xx), at most ``max_retries``
  times, waiting what the server's ``Retry-After`` asks (up to a minute) or
  a short exponential backoff, and only while the deadline leaves room.  A
  timeout fails the call at once; the message states the time really
  waited and the attempts ("did not answer within 45 s (2 attempts)").
* **Every call counted.**  Each request sent adds one ``llm_calls`` to the
  :class:`~core.types.Usage`, failed ones too (0 tokens when unknown).
* **Errors a user can act on.**  Failures become
  :class:`~core.errors.RunFailed` with one line saying what to change: an
  unknown model names ``LLM_MODEL``; a context overflow gives the sizes; an
  HF router 402 says where to top up; an unreadable answer (an HTML page,
  JSON that does not parse, no choices, a choice without a message) is a
  failure, never an AttributeError or a JSONDecodeError.  Errors are classified by
  the SDK's types and the error's ``code``/``type``/``param`` fields
  (:mod:`core.llm_server`); the message text is read only for what servers
  put nowhere else (vLLM's context sizes, a parameter named by an older
  server).  The API key never appears in a message or a log line.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import json
import logging
import socket
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar
from urllib.parse import urlsplit

import aiohttp
import httpx2
import openai
from openai.types.chat import ChatCompletion, ChatCompletionMessage
from openai.types.chat.chat_completion import Choice
from openai.types.completion_usage import CompletionUsage
from openai.types.shared_params import ResponseFormatJSONObject

from core import telemetry
from core.clock import SYSTEM_CLOCK, Clock
from core.errors import ConfigError, ErrorCode, ErrorFields, RunFailed
from core.http_client import Connections, async_client
from core.llm_server import (
    Fault,
    as_int,
    context_from_models,
    context_from_props,
    model_ids,
    overflow,
    retry_delay,
)
from core.types import Usage

log = logging.getLogger(__name__)

# --------------------------------------------------------------- defaults
# The one place the controller's defaults live (bot.app picks among them).
DEFAULT_OPENAI_MODEL = "gpt-5-mini"  # with OPENAI_API_KEY and no LLM_MODEL
# with only HF_TOKEN: an open model several Inference Providers serve
DEFAULT_HF_MODEL = "openai/gpt-oss-120b"
HF_BILLING_URL = "https://huggingface.co/settings/billing"
HF_PROVIDERS_URL = "https://huggingface.co/settings/inference-providers"
MIN_ANSWER_ROOM = 256  # tokens the context must keep free for the answer
PROBE_TIMEOUT = 5.0  # seconds for the model list and context-size look-ups
# No attempt is started with less time left than this (or a quarter of the
# stage's budget, when that is smaller): it could not finish anyway.
MIN_ATTEMPT = 5.0

_PLACEHOLDER_KEY = "no-key"  # local servers ignore the key but the SDK insists on one
_JSON_OBJECT: ResponseFormatJSONObject = {"type": "json_object"}
_CAP_PARAMS = ("max_completion_tokens", "max_tokens")
# Hosts that are this machine: a server there that cannot be reached is not running.
_LOOPBACK = frozenset({"localhost", "127.0.0.1", "::1", "0.0.0.0"})
# A proxy that could not be used (the transport reports some as timeouts).
_PROXY_ERRORS = (
    httpx2.ProxyError,
    aiohttp.ClientProxyConnectionError,
    aiohttp.ClientHttpProxyError,
)
_MAX_ADAPTATIONS = 6  # parameter step-downs within one call (each removes something)
# What a refusal of our structured output names (its param, or its words: vLLM
# says "JSON schema", llama.cpp that it could not build the grammar).
_FORMAT_NAMES = ("response_format", "json_schema", "schema", "JSON schema", "grammar")


@dataclass(frozen=True, slots=True)
class JSONSchema:
    """A JSON schema for structured output (``response_format=json_schema``).

    ``schema`` should be valid in OpenAI's strict mode (objects at the root,
    every property required, no additional properties), or have a
    ``fallback`` that is.  ``fallbacks``: plainer forms of it, most
    constraining first, for a server that refuses the one before.
    """

    name: str
    schema: Mapping[str, Any]
    fallbacks: tuple[Mapping[str, Any], ...] = ()

    @property
    def forms(self) -> tuple[Mapping[str, Any], ...]:
        return (self.schema, *self.fallbacks)


class BudgetExhausted(RunFailed):
    """The model used the whole completion cap without writing any answer."""


class Deadline:
    """The time one stage may spend on LLM calls, retries and re-asks included.

    ``attempts`` counts the requests the stage sent; :meth:`LLM.complete`
    gives each attempt only :meth:`remaining` seconds.
    """

    def __init__(self, budget: float, clock: Clock = SYSTEM_CLOCK) -> None:
        self.budget = budget
        self._clock = clock
        self.started = clock.monotonic()
        self.attempts = 0

    def elapsed(self) -> float:
        return self._clock.monotonic() - self.started

    def remaining(self) -> float:
        return self.budget - self.elapsed()

    @property
    def min_attempt(self) -> float:
        """The least time worth starting an attempt with."""
        return min(MIN_ATTEMPT, self.budget / 4)

    def waited(self) -> str:
        """The time really waited (never more than the budget) and the
        attempts, for a log line: ``45.0 s (2 attempts)``."""
        n = self.attempts
        spent = min(self.elapsed(), self.budget)
        return f"{spent:.1f} s ({n} attempt{'' if n == 1 else 's'})"


# The deadline of the stage running in this task (LLM.stage), if any.
_STAGE: contextvars.ContextVar[Deadline | None] = contextvars.ContextVar(
    "llm_stage_deadline", default=None
)
# A model asked for instead of the configured one (a server's own setting), set
# with LLM.using() for every call made inside (in this task and those it starts).
_MODEL: contextvars.ContextVar[str | None] = contextvars.ContextVar("llm_model", default=None)


def estimate_tokens(messages: Sequence[Mapping[str, str]]) -> int:
    """A rough prompt size: 4 characters a token, plus a little per message."""
    return sum(len(m.get("content") or "") // 4 + 4 for m in messages)


@dataclass(frozen=True, slots=True)
class _Sent:
    """The optional parameters one request carried."""

    cap_param: str | None
    cap: int | None
    fmt: int  # 2 json_schema, 1 json_object, 0 none
    temperature: float | None
    effort: str | None
    stream_usage: bool = False  # stream_options.include_usage (a streamed call)
    form: int = 0  # which of the schema's forms (JSONSchema.forms) json_schema sends


# What a streamed call hands each piece of the answer to.
OnDelta = Callable[[str], Awaitable[None]]


class _Streamed:
    """Whether any piece of a streamed answer has been handed on (after
    which the call can no longer be retried: the words are out)."""

    def __init__(self, on_delta: OnDelta) -> None:
        self.on_delta = on_delta
        self.emitted = False


class LLM:
    """A long-lived wrapper over :class:`openai.AsyncOpenAI`.

    ``model=None`` asks the server (``GET /v1/models``) and uses the first
    model it lists.  ``hf_router`` marks the Hugging Face router (messages name
    ``HF_TOKEN`` and its billing page).  ``probe_context`` (default: any
    server other than OpenAI and the router) looks up the server's context
    size once.  ``pool``: connections shared with other clients
    (:class:`core.http_client.Connections`; else its own).  Build one in the
    composition root; ``await llm.aclose()`` on shutdown.
    """

    def __init__(
        self,
        *,
        api_key: str,
        base_url: str | None,
        model: str | None,
        timeout: float = 120,
        max_retries: int = 2,
        temperature: float | None = None,
        reasoning_effort: str | None = None,
        hf_router: bool = False,
        probe_context: bool | None = None,
        clock: Clock = SYSTEM_CLOCK,
        pool: Connections | None = None,
    ) -> None:
        if not api_key:
            if base_url is None:
                raise ConfigError(
                    "No language model configured: set HF_TOKEN or OPENAI_API_KEY, or point "
                    "OPENAI_BASE_URL at a local OpenAI-compatible server"
                )
            api_key = _PLACEHOLDER_KEY
        self.model = model
        self.timeout = timeout
        self.max_retries = max(0, max_retries)
        self.hf_router = hf_router
        self._clock = clock
        self._key_var = "HF_TOKEN" if hf_router else "OPENAI_API_KEY"
        # Our own retry loop (see the module docstring): the SDK retries nothing.
        self._client = openai.AsyncOpenAI(
            api_key=api_key,
            base_url=base_url,
            timeout=timeout,
            max_retries=0,
            http_client=async_client(pool),  # aiohttp's transport: half the CPU per call
        )
        self.base_url = str(self._client.base_url).rstrip("/")
        self.host = _host_of(self.base_url)
        if probe_context is None:
            probe_context = base_url is not None and not hf_router and self.host != "api.openai.com"
        # What this server accepts, learned from its refusals (per client).
        self._temperature = temperature
        self._greedy_json = False  # JSON calls at temperature 0 (llama.cpp, see _probe_context)
        self._effort = reasoning_effort
        self._cap_param = _CAP_PARAMS[0]
        self._caps_refused: set[str] = set()
        self._format_level = 2
        self._schema_form = 0  # the first schema form this server has not refused
        # The model thinks before it answers (its reasoning counts against the
        # cap): assumed of the hosted APIs and when asked for, learned otherwise.
        self.reasons = hf_router or self.host == "api.openai.com" or reasoning_effort is not None
        self._stream_usage = True  # until the server refuses stream_options
        self._probe = probe_context
        self._n_ctx: int | None = None
        self._setup = asyncio.Lock()

    # ------------------------------------------------------------- public
    async def complete(
        self,
        messages: list[dict[str, str]],
        *,
        usage: Usage,
        max_tokens: int | None = None,
        schema: JSONSchema | None = None,
        json_mode: bool = False,
        deadline: Deadline | None = None,
        on_delta: OnDelta | None = None,
    ) -> str:
        """One chat completion; returns the assistant's text.

        ``on_delta``: stream the answer (``stream=True``, usage asked for with
        ``stream_options.include_usage``), handing each piece of text to it as
        it arrives.  Until the first piece, failures are retried as usual;
        after it, a failure ends the call at once (``RunFailed``): the words
        are out and a second answer would repeat them.

        ``max_tokens`` caps the completion (reasoning included); it is sent as
        ``max_completion_tokens``, or ``max_tokens`` to servers that only know
        that.  ``schema`` asks for structured output (``json_mode`` for any
        JSON object).  Every request sent counts in ``usage``.  Every failure
        raises ``RunFailed`` (``BudgetExhausted`` when the cap was used up
        without any answer).  The call, its retries included, ends by
        ``deadline``: the given one, else the current :meth:`stage`'s, else
        ``timeout`` seconds from now.
        """
        deadline = deadline or _STAGE.get() or Deadline(self.timeout, self._clock)
        model = _MODEL.get() or await self.resolve_model()
        prompt = estimate_tokens(messages)
        cap = await self._fit(prompt, max_tokens)
        wanted = 2 if schema is not None else 1 if json_mode else 0
        retries = 0
        adaptations = 0
        started = self._clock.monotonic()
        streamed = _Streamed(on_delta) if on_delta is not None else None
        while True:
            remaining = deadline.remaining()
            if remaining < deadline.min_attempt and (deadline.attempts or remaining <= 0):
                log.warning(
                    "llm %s: no time left for another attempt (%s)", self.host, deadline.waited()
                )
                raise RunFailed(
                    ErrorCode.LLM_TOO_SLOW,
                    host=self.host,
                    seconds=min(deadline.elapsed(), deadline.budget),
                    attempts=deadline.attempts,
                    allowed=deadline.budget,
                )
            sent = self._params(cap, wanted, stream=streamed is not None)
            with telemetry.llm_call(
                model,
                provider="huggingface" if self.hf_router else "openai",
                url=self.base_url,
                max_tokens=sent.cap,
                stream=streamed is not None,
            ) as call:
                deadline.attempts += 1
                try:
                    async with asyncio.timeout(remaining):
                        response: ChatCompletion | None  # None: a body that is no completion
                        if streamed is None:
                            response = await self._create(model, messages, sent, schema, remaining)
                        else:
                            chunks = await self._create_stream(
                                model, messages, sent, schema, remaining
                            )
                            response = await _gather(chunks, streamed, sent)
                except asyncio.CancelledError:
                    # The caller gave up (e.g. a model choice no longer needed): the
                    # request counts, its tokens are unknown (nothing answered them).
                    usage.add(0, 0)
                    raise
                except TimeoutError as exc:  # the deadline itself (the SDK has its own error)
                    usage.add(0, 0)
                    log.warning(
                        "llm call failed model=%s host=%s cause=deadline latency=%.2fs",
                        model,
                        self.host,
                        self._clock.monotonic() - started,
                    )
                    raise RunFailed(
                        ErrorCode.LLM_TIMED_OUT,
                        host=self.host,
                        seconds=min(deadline.elapsed(), deadline.budget),
                        attempts=deadline.attempts,
                        partial=streamed is not None and streamed.emitted,
                    ) from exc
                except openai.OpenAIError as exc:
                    usage.add(0, 0)
                    call.fail(exc)
                    if streamed is not None and streamed.emitted:
                        raise self._broke_off(exc) from exc
                    fault = Fault.of(exc)
                    if adaptations < _MAX_ADAPTATIONS:
                        adapted, cap = self._adapt(fault, sent, schema)
                        if adapted:
                            adaptations += 1
                            continue
                    delay = retry_delay(exc, fault, retries)
                    room = (
                        delay is not None and deadline.remaining() - delay >= deadline.min_attempt
                    )
                    if delay is not None and retries < self.max_retries and room:
                        retries += 1
                        log.info(
                            "llm %s: %s, retrying in %.1fs (%d/%d)",
                            self.host,
                            _cause(exc),
                            delay,
                            retries,
                            self.max_retries,
                        )
                        await self._clock.sleep(delay)
                        continue
                    log.warning(
                        "llm call failed model=%s host=%s cause=%s status=%s code=%s latency=%.2fs",
                        model,
                        self.host,
                        type(exc).__name__,
                        fault.status,
                        fault.code or fault.kind or "-",
                        self._clock.monotonic() - started,
                    )
                    # retried: a retryable failure that outlasted the retries or the deadline
                    retried = delay is not None and deadline.attempts > 1
                    raise self._failure(exc, fault, model, prompt, deadline, retried) from exc
                except Exception as exc:
                    # What the SDK could not even parse: a 200 with JSON that does
                    # not parse, a body it cannot decode.  The server is at fault.
                    usage.add(0, 0)
                    if streamed is not None and streamed.emitted:
                        raise self._broke_off(exc) from exc
                    log.warning(
                        "llm %s sent an unreadable answer (%s)",
                        self.host,
                        type(exc).__name__,
                        exc_info=log.isEnabledFor(logging.DEBUG),
                    )
                    raise RunFailed(
                        ErrorCode.LLM_UNREADABLE, host=self.host, cause=type(exc).__name__
                    ) from exc
                return self._read(
                    response, usage, sent, model, self._clock.monotonic() - started, call
                )

    @contextlib.contextmanager
    def using(self, model: str | None) -> Iterator[None]:
        """Ask for ``model`` (None: the configured one) in every call made
        inside, in this task and the tasks it starts."""
        token = _MODEL.set(model or None)
        try:
            yield
        finally:
            _MODEL.reset(token)

    @contextlib.contextmanager
    def stage(self, budget: float | None = None) -> Iterator[Deadline]:
        """Let every call made inside (in this task and the tasks it starts)
        share one deadline: ``budget`` seconds from now, ``timeout`` by default."""
        deadline = Deadline(self.timeout if budget is None else budget, self._clock)
        token = _STAGE.set(deadline)
        try:
            yield deadline
        finally:
            _STAGE.reset(token)

    @property
    def structured_output(self) -> str:
        """What this server has taken so far: ``json_schema`` (its first
        form, or ``json_schema form N``), ``json_object`` or ``none``."""
        if self._format_level == 2:
            return "json_schema" + (f" form {self._schema_form + 1}" if self._schema_form else "")
        return ("none", "json_object")[self._format_level]

    async def resolve_model(self) -> str:
        """The model to ask for: the configured one, or the first the server lists."""
        if self.model:
            return self.model
        async with self._setup:
            if self.model:
                return self.model
            try:
                ids = model_ids(await self._get_json(f"{self.base_url}/models"))
            except (openai.APIStatusError, ValueError):  # refused, or not JSON
                ids = []
            except openai.OpenAIError as exc:
                raise self._failure(exc, Fault.of(exc), "?", 0) from exc
            if not ids:
                raise RunFailed(ErrorCode.LLM_NO_MODEL, host=self.host)
            self.model = ids[0]
            log.info("llm %s: using model %s (the first it lists)", self.host, self.model)
            return self.model

    async def prepare(self) -> None:
        """Resolve the model now when the server has to be asked (best effort:
        a server that is not up yet is asked again at the first call)."""
        if self.model:
            return
        try:
            await self.resolve_model()
        except RunFailed as e:
            log.warning("llm %s: %s", self.host, e)

    async def served_models(self) -> list[str] | None:
        """The ids the server lists (``GET /v1/models``), or None when it lists none."""
        try:
            return model_ids(await self._get_json(f"{self.base_url}/models")) or None
        except (openai.OpenAIError, ValueError):
            return None

    async def context_window(self) -> int | None:
        """The server's context size in tokens, when it says (looked up once)."""
        if not self._probe and not self._setup.locked():
            return self._n_ctx  # looked up already (every call after the first)
        async with self._setup:
            if self._probe:
                self._probe = False
                found = await self._probe_context()
                if found:
                    self._n_ctx = found
                    log.info("llm %s: context window %d tokens", self.host, found)
            return self._n_ctx

    async def aclose(self) -> None:
        """Close the HTTP connection pool."""
        await self._client.close()

    # ----------------------------------------------------------- requests
    async def _fit(self, prompt: int, cap: int | None) -> int | None:
        """The cap, lowered to what the context leaves; RunFailed when nothing fits."""
        n_ctx = await self.context_window()
        if n_ctx is None:
            return cap
        if prompt + MIN_ANSWER_ROOM > n_ctx:
            log.warning("llm %s: prompt of ~%d tokens exceeds context %d", self.host, prompt, n_ctx)
            raise overflow(self.host, prompt, n_ctx, estimated=True)
        return cap if cap is None else min(cap, n_ctx - prompt)

    def _params(self, cap: int | None, wanted_format: int, *, stream: bool = False) -> _Sent:
        return _Sent(
            cap_param=self._cap_param if cap is not None else None,
            cap=cap,
            fmt=min(wanted_format, self._format_level),
            temperature=(
                self._temperature
                if self._temperature is not None or not (self._greedy_json and wanted_format)
                else 0.0
            ),
            effort=self._effort,
            stream_usage=stream and self._stream_usage,
            form=self._schema_form,
        )

    async def _create(
        self,
        model: str,
        messages: list[dict[str, str]],
        sent: _Sent,
        schema: JSONSchema | None,
        seconds: float,
    ) -> ChatCompletion:
        """POST /chat/completions through the SDK's client (its auth, errors,
        response parsing and connection pool), with the body as built here.

        ``chat.completions.create`` would first walk every message through the
        SDK's TypedDict transform (aliases, file uploads: nothing our plain
        role/content strings need); that walk was the largest single cost of a
        request (about a fifth of its CPU at zero latency), so the body goes
        out as is: only the parameters set, as ``create`` would send them.
        """
        return await self._client.post(
            "/chat/completions",
            body=self._body(model, messages, sent, schema),
            cast_to=ChatCompletion,
            # what is left of the stage's deadline; the API key as create() sends it
            options={"timeout": seconds, "security": {"bearer_auth": True}},
        )

    async def _create_stream(
        self,
        model: str,
        messages: list[dict[str, str]],
        sent: _Sent,
        schema: JSONSchema | None,
        seconds: float,
    ) -> openai.AsyncStream[object]:
        """The same request with ``stream=True``: the SDK's stream of chunks
        (server-sent events, ``data: [DONE]`` last), each as its parsed JSON:
        building a ``ChatCompletionChunk`` model per event cost more CPU than
        the rest of the request's LLM calls together (an answer is tens of
        events); :func:`_gather` reads the few fields it needs."""
        body = self._body(model, messages, sent, schema)
        body["stream"] = True
        if sent.stream_usage:
            body["stream_options"] = {"include_usage": True}
        return await self._client.post(
            "/chat/completions",
            body=body,
            cast_to=ChatCompletion,
            stream=True,
            stream_cls=openai.AsyncStream[object],
            options={"timeout": seconds, "security": {"bearer_auth": True}},
        )

    def _body(
        self,
        model: str,
        messages: list[dict[str, str]],
        sent: _Sent,
        schema: JSONSchema | None,
    ) -> dict[str, object]:
        body: dict[str, object] = {"model": model, "messages": messages, "stream": False}
        if sent.fmt == 2 and schema is not None:
            form = schema.forms[min(sent.form, len(schema.fallbacks))]
            body["response_format"] = {
                "type": "json_schema",
                "json_schema": {"name": schema.name, "schema": dict(form), "strict": True},
            }
        elif sent.fmt >= 1:
            body["response_format"] = _JSON_OBJECT
        if sent.temperature is not None:
            body["temperature"] = sent.temperature
        if sent.cap is not None and sent.cap_param is not None:
            body[sent.cap_param] = sent.cap
        if sent.effort is not None:
            body["reasoning_effort"] = sent.effort
        return body

    def _adapt(
        self, fault: Fault, sent: _Sent, schema: JSONSchema | None = None
    ) -> tuple[bool, int | None]:
        """Change what the next request sends after a refusal that names a
        parameter: (True, the cap to send next) when worth asking again.

        A refused ``json_schema`` steps to the schema's next form while it
        has one, then to ``json_object``; a refused ``json_object`` to no
        ``response_format``."""
        if fault.overflow:
            # vLLM counts prompt + cap against its context: a smaller cap may fit.
            if fault.n_ctx and fault.n_ctx != self._n_ctx:
                self._n_ctx = fault.n_ctx
                room = fault.n_ctx - (fault.n_prompt or fault.n_ctx)
                if sent.cap and MIN_ANSWER_ROOM <= room < sent.cap:
                    log.info("llm %s: lowering the completion cap to %d", self.host, room)
                    return True, room
            return False, sent.cap
        if fault.status not in (400, 422) or fault.unknown_model:
            return False, sent.cap
        for by_param in (True, False):
            if sent.fmt and fault.names(*_FORMAT_NAMES, by_param=by_param):
                if sent.fmt == 2 and schema is not None and sent.form < len(schema.fallbacks):
                    self._schema_form = sent.form + 1
                    log.info(
                        "llm %s refused json_schema form %d of %s; sending form %d from now on",
                        self.host,
                        sent.form + 1,
                        schema.name,
                        sent.form + 2,
                    )
                    return True, sent.cap
                self._format_level = sent.fmt - 1
                log.info(
                    "llm %s refused response_format %s; using %s from now on",
                    self.host,
                    ("json_object", "json_schema")[sent.fmt - 1],
                    ("no response_format", "json_object")[sent.fmt - 1],
                )
                return True, sent.cap
            if sent.cap_param and fault.names(sent.cap_param, by_param=by_param):
                if fault.code == "invalid_value":
                    return False, sent.cap  # a value it refuses, not the name
                self._caps_refused.add(sent.cap_param)
                other = next(p for p in _CAP_PARAMS if p != sent.cap_param)
                if other in self._caps_refused:
                    return False, sent.cap
                self._cap_param = other
                log.info("llm %s refused %s; sending %s instead", self.host, sent.cap_param, other)
                return True, sent.cap
            if sent.effort is not None and fault.names("reasoning_effort", by_param=by_param):
                self._effort = None
                log.info("llm %s refused reasoning_effort; not sending it again", self.host)
                return True, sent.cap
            if sent.stream_usage and fault.names("stream_options", by_param=by_param):
                self._stream_usage = False
                log.info("llm %s refused stream_options; streaming without usage", self.host)
                return True, sent.cap
            if sent.temperature is not None and fault.names("temperature", by_param=by_param):
                self._temperature = None
                self._greedy_json = False
                log.info("llm %s refused temperature; not sending it again", self.host)
                return True, sent.cap
        return False, sent.cap

    def _read(
        self,
        response: object,
        usage: Usage,
        sent: _Sent,
        model: str,
        latency: float,
        call: telemetry.LLMCall,
    ) -> str:
        """The text of a completion; RunFailed when the answer is unreadable."""
        if not isinstance(response, ChatCompletion):  # e.g. an HTML page served with 200
            usage.add(0, 0)
            log.warning("llm %s answered something that is not a chat completion", self.host)
            raise RunFailed(ErrorCode.LLM_UNREADABLE, host=self.host, cause="not a chat completion")
        tokens = getattr(response, "usage", None)
        prompt_tokens = as_int(getattr(tokens, "prompt_tokens", None)) or 0
        completion_tokens = as_int(getattr(tokens, "completion_tokens", None)) or 0
        usage.add(prompt_tokens, completion_tokens)
        choices = getattr(response, "choices", None)
        first = choices[0] if isinstance(choices, list) and choices else None
        message = getattr(first, "message", None)
        content = getattr(message, "content", None)
        finish = getattr(first, "finish_reason", None)
        call.record(
            prompt_tokens,
            completion_tokens,
            finish_reasons=[finish] if isinstance(finish, str) else [],
            response_model=getattr(response, "model", None) or None,
        )
        log.debug(
            "llm call model=%s prompt_tokens=%d completion_tokens=%d latency=%.2fs format=%s "
            "finish=%s",
            model,
            prompt_tokens,
            completion_tokens,
            latency,
            ("none", "json_object", "json_schema")[sent.fmt],
            finish,
        )
        if first is None:
            raise RunFailed(ErrorCode.LLM_NO_ANSWER, host=self.host)
        if not isinstance(message, ChatCompletionMessage) or (
            content is not None and not isinstance(content, str)
        ):
            raise RunFailed(ErrorCode.LLM_UNREADABLE, host=self.host)
        if finish == "length":
            if not (content or "").strip():
                self.reasons = True  # it thought the whole cap away: leave room next time
                raise BudgetExhausted(ErrorCode.LLM_BUDGET_USED, host=self.host, tokens=sent.cap)
            log.info("llm %s: answer cut at the cap of %s tokens", self.host, sent.cap)
        return content or ""

    def _broke_off(self, exc: Exception) -> RunFailed:
        """A streamed answer that failed after its first words."""
        cause = _cause(exc) if isinstance(exc, openai.OpenAIError) else type(exc).__name__
        log.warning("llm %s: the streamed answer broke off (%s)", self.host, cause)
        return RunFailed(ErrorCode.LLM_BROKE_OFF, host=self.host, cause=cause)

    # ------------------------------------------------------------- probes
    async def _get_json(self, url: str) -> object:
        """A GET on the server (short timeout, no retry): parsed JSON, or text."""
        return await self._client.get(
            url,
            cast_to=object,
            options={"timeout": min(self.timeout, PROBE_TIMEOUT), "max_retries": 0},
        )

    async def _probe_context(self) -> int | None:
        """llama.cpp ``GET /props``, else the model list (vLLM, llama.cpp)."""
        root = self.base_url.removesuffix("/v1")
        try:
            if found := context_from_props(await self._get_json(f"{root}/props")):
                # llama.cpp: it samples (temperature 0.8) unless told; a plan or a
                # choice of models is a decision, written greedily when no
                # LLM_TEMPERATURE says otherwise (repeatable, and a small model
                # strays less)
                self._greedy_json = True
                return found
        except (openai.OpenAIError, ValueError):  # ValueError: JSON that does not parse
            pass
        try:
            return context_from_models(await self._get_json(f"{self.base_url}/models"), self.model)
        except (openai.OpenAIError, ValueError):
            return None

    # ------------------------------------------------------------ messages
    def _failure(
        self,
        exc: openai.OpenAIError,
        fault: Fault,
        model: str,
        prompt: int,
        deadline: Deadline | None = None,
        retried: bool = False,
    ) -> RunFailed:
        """An SDK failure as a code and its fields (no secrets; worded in
        core.errors): ``retried`` adds the attempts and the time they took."""
        f: ErrorFields = {"host": self.host}
        code = ErrorCode.LLM_FAILED
        if any(isinstance(e, _PROXY_ERRORS) for e in _chain(exc)):
            code = ErrorCode.LLM_PROXY
        # APITimeoutError subclasses APIConnectionError: test it first.
        elif isinstance(exc, openai.APITimeoutError):
            code, retried = ErrorCode.LLM_TIMED_OUT, False
            if deadline is None:
                f["seconds"] = self.timeout
            else:
                f["seconds"] = min(deadline.elapsed(), deadline.budget)
                f["attempts"] = deadline.attempts
        elif isinstance(exc, openai.APIConnectionError):
            code = ErrorCode.LLM_UNREACHABLE
        elif fault.overflow:
            estimated = fault.n_prompt is None
            return overflow(
                self.host, fault.n_prompt or prompt or None, fault.n_ctx, estimated=estimated
            )
        elif fault.unknown_model:
            code, f["model"] = ErrorCode.LLM_UNKNOWN_MODEL, model
            if self.hf_router:
                f["suggested"], f["url"] = DEFAULT_HF_MODEL, HF_PROVIDERS_URL
        elif isinstance(exc, openai.AuthenticationError | openai.PermissionDeniedError):
            code, f["setting"] = ErrorCode.LLM_KEY_REJECTED, self._key_var
        elif fault.status == 402:
            code = ErrorCode.LLM_PAYMENT
            if self.hf_router:
                f["url"] = HF_BILLING_URL
        elif isinstance(exc, openai.RateLimitError):
            quota = fault.code == "insufficient_quota"
            code = ErrorCode.LLM_QUOTA_USED if quota else ErrorCode.LLM_RATE_LIMITED
        elif isinstance(exc, openai.APIStatusError):
            code, f["status"], f["said"] = ErrorCode.LLM_HTTP, exc.status_code, fault.said()
        elif isinstance(exc, openai.APIResponseValidationError):
            code = ErrorCode.LLM_UNREADABLE
        else:
            f["cause"] = type(exc).__name__
        if retried and deadline is not None:
            f["attempts"], f["seconds"] = deadline.attempts, deadline.elapsed()
        if code in (ErrorCode.LLM_TIMED_OUT, ErrorCode.LLM_UNREACHABLE):
            f.update(self._unreached(exc))
        return RunFailed(code, **f)

    def _unreached(self, exc: openai.OpenAIError) -> ErrorFields:
        """For a server that could not be reached: where it is (``reach``:
        this machine, a name not looked up, a connection that failed), its
        address and the setting that names it; nothing when it was reached
        (it answered, or was too slow to)."""
        found = _chain(exc)
        timeout = isinstance(exc, openai.APITimeoutError)
        if timeout and not any(isinstance(e, httpx2.ConnectTimeout) for e in found):
            return {}
        host = urlsplit(self.base_url).hostname or ""
        f: ErrorFields = {
            "setting": "HF_ROUTER_URL" if self.hf_router else "OPENAI_BASE_URL",
            "address": _shown_url(self.base_url),
            "hostname": host,
        }
        if host in _LOOPBACK:
            f["reach"] = "local"
        elif any(isinstance(e, socket.gaierror) for e in found):
            f["reach"] = "name"
        else:
            f["reach"] = "connect"
        return f


class _StreamCut(Exception):
    """The stream ended before the model said it had finished."""


async def _gather(
    chunks: openai.AsyncStream[object], streamed: _Streamed, sent: _Sent
) -> ChatCompletion | None:
    """Read a streamed answer, handing on each piece of its text as it comes;
    the whole as one completion (usage from the last chunk when the server
    sends it), so it is read like any other.  Reasoning deltas are not
    handed on; a stream that stops before a finish reason is cut off.

    A server that ignores ``stream`` answers with one JSON completion: it is
    read as such (None when the body is no completion at all, e.g. a proxy's
    HTML page)."""
    content_type = chunks.response.headers.get("content-type", "")
    if "text/event-stream" not in content_type:
        async with chunks:
            body = await chunks.response.aread()
        if "json" not in content_type:
            return None
        data = json.loads(body)
        return ChatCompletion.model_construct(**data) if isinstance(data, dict) else None
    parts: list[str] = []
    finish: str | None = None
    tokens: CompletionUsage | None = None
    ident, model, created = "", "", 0
    async with chunks:
        async for chunk in chunks:
            if not isinstance(chunk, dict):
                continue  # not a chunk (the SDK raised already for an error event)
            ident, model = chunk.get("id") or ident, chunk.get("model") or model
            created = chunk.get("created") or created
            usage = chunk.get("usage")
            if isinstance(usage, dict):
                tokens = _built(CompletionUsage, **usage)
            choices = chunk.get("choices")
            for choice in choices if isinstance(choices, list) else ():
                if not isinstance(choice, dict) or choice.get("index", 0) != 0:
                    continue
                finish = choice.get("finish_reason") or finish
                delta = choice.get("delta")
                text = delta.get("content") if isinstance(delta, dict) else None
                if text and isinstance(text, str):
                    parts.append(text)
                    streamed.emitted = True
                    await streamed.on_delta(text)
    if finish is None and parts:
        raise _StreamCut("the stream ended without a finish reason")
    message = _built(ChatCompletionMessage, role="assistant", content="".join(parts))
    return _built(
        ChatCompletion,
        id=ident,
        object="chat.completion",
        created=created,
        model=model,
        choices=[_built(Choice, index=0, finish_reason=finish, message=message)],
        usage=tokens,
    )


_Model = TypeVar("_Model", bound=openai.BaseModel)


def _built(cls: type[_Model], **fields: Any) -> _Model:
    """``cls`` with ``fields`` as given (already of their types), by pydantic's
    own ``model_construct``: the SDK's override walks every field through
    its annotation again (five times the CPU for the few objects of an
    answer, twice a request)."""
    built: _Model = super(openai.BaseModel, cls).model_construct(**fields)
    return built


def _cause(exc: openai.OpenAIError) -> str:
    status = getattr(exc, "status_code", None)
    return f"HTTP {status}" if status else type(exc).__name__


def _chain(exc: BaseException) -> list[BaseException]:
    """``exc`` and the exceptions it was raised from, outermost first."""
    found: list[BaseException] = []
    current: BaseException | None = exc
    while current is not None and current not in found and len(found) < 10:
        found.append(current)
        current = current.__cause__ or current.__context__
    return found


def _shown_url(url: str) -> str:
    """``url`` without any user:password part (it may hold a secret)."""
    parts = urlsplit(url)
    netloc = parts.netloc.rpartition("@")[2]
    return parts._replace(netloc=netloc).geturl()


def _host_of(base_url: str) -> str:
    """host[:port] of a URL, without any user:password part."""
    parts = urlsplit(base_url)
    host = parts.hostname or base_url
    return f"{host}:{parts.port}" if parts.port else host
