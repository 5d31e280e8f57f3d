"""OpenTelemetry spans following the GenAI semantic conventions; no-ops without them.

Spans are made only after :func:`configure` turned them on: with the ``otel``
extra installed (``pip install 'hugginggpt-bot[otel]'``) and
``OTEL_EXPORTER_OTLP_ENDPOINT`` (or ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT``)
set, spans go to that OTLP/HTTP collector in batches; tests hand in a
provider of their own.  Otherwise every helper here yields a handle that
does nothing, and ``opentelemetry`` is never imported.

The spans (attribute names from the GenAI conventions, ``gen_ai.*``):

* a turn: ``invoke_agent hugginggpt`` (``gen_ai.operation.name=invoke_agent``,
  ``gen_ai.agent.name``, ``gen_ai.conversation.id``, token totals);
* a stage: ``stage planning`` … (``hugginggpt.stage``), inside the turn;
* a language-model request: ``chat MODEL`` (kind CLIENT;
  ``gen_ai.operation.name=chat``, ``gen_ai.provider.name``,
  ``gen_ai.request.model``, ``gen_ai.request.max_tokens``, ``server.address``,
  then ``gen_ai.response.model``, ``gen_ai.usage.input_tokens``,
  ``gen_ai.usage.output_tokens``, ``gen_ai.response.finish_reasons``);
* a model call: ``TASK MODEL`` (kind CLIENT; ``gen_ai.operation.name`` is the
  task, e.g. ``text-to-image``, ``gen_ai.request.model`` the model id,
  ``gen_ai.provider.name`` who ran it).

A failure sets the span's status to ERROR and ``error.type`` (the exception's
class, or its cause's when it wraps one).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext
from typing import TYPE_CHECKING, Any, Literal
from urllib.parse import urlsplit

from core.telemetry.context import current

if TYPE_CHECKING:
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.trace import Span, Tracer

    from core.types import Request

log = logging.getLogger(__name__)

AGENT_NAME = "hugginggpt"
SERVICE_NAME = "hugginggpt-bot"
AttrValue = str | bool | int | float | Sequence[str]
Kind = Literal["internal", "client"]

_tracer: Tracer | None = None
_provider: TracerProvider | None = None  # the one made here from the environment


def configure(
    provider: TracerProvider | None = None,
    *,
    endpoint: str | None = None,
    environ: Mapping[str, str] | None = None,
) -> bool:
    """Turn spans on; True when they are.  ``provider``: use it (tests, an
    application that set one up); else an OTLP/HTTP exporter to ``endpoint``
    (the collector's base URL, as ``OTEL_EXPORTER_OTLP_ENDPOINT`` gives it:
    spans go to ``/v1/traces`` there) or to the endpoint the environment
    names, when the ``otel`` extra is installed."""
    global _tracer, _provider
    if provider is not None:
        _tracer = provider.get_tracer(__name__)
        return True
    env = os.environ if environ is None else environ
    if not (
        endpoint
        or env.get("OTEL_EXPORTER_OTLP_ENDPOINT")
        or env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
    ):
        return False
    if env.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return False
    try:
        from opentelemetry import trace
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor
    except ImportError:
        log.warning(
            "OTEL_EXPORTER_OTLP_ENDPOINT is set but the otel extra is not installed "
            "(pip install 'hugginggpt-bot[otel]'): no spans are sent"
        )
        return False
    # OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES are read by Resource.create.
    attrs = {} if env.get("OTEL_SERVICE_NAME") else {"service.name": SERVICE_NAME}
    made = TracerProvider(resource=Resource.create(attrs))
    # Given here (from the settings, which also read .env), or read by the exporter itself
    # (which also prefers OTEL_EXPORTER_OTLP_TRACES_ENDPOINT, the traces-only URL, as given).
    traces_url = None
    if endpoint and not env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"):
        traces_url = f"{endpoint.rstrip('/')}/v1/traces"
    made.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=traces_url)))
    trace.set_tracer_provider(made)  # other instrumentation joins the same traces
    _provider = made
    _tracer = made.get_tracer(__name__)
    log.info("tracing: spans go to the OTLP collector at %s", endpoint or "the OTEL_* endpoint")
    return True


def shutdown() -> None:
    """Send the spans still buffered and turn spans off."""
    global _tracer, _provider
    provider, _provider, _tracer = _provider, None, None
    if provider is not None:
        provider.shutdown()


def enabled() -> bool:
    return _tracer is not None


class SpanHandle:
    """What a helper yields: set attributes on the span (nothing when spans are off)."""

    __slots__ = ("_span",)

    def __init__(self, span: Span | None) -> None:
        self._span = span

    @property
    def recording(self) -> bool:
        return self._span is not None and self._span.is_recording()

    def set(self, attributes: Mapping[str, AttrValue | None]) -> None:
        if self._span is None:
            return
        for key, value in attributes.items():
            if value is not None:
                self._span.set_attribute(key, value)

    def fail(self, error: BaseException | str) -> None:
        """Mark the span failed (``error.type``) without an exception leaving it."""
        if self._span is None:
            return
        from opentelemetry.trace import Status, StatusCode

        kind = error if isinstance(error, str) else error_type(error)
        self._span.set_attribute("error.type", kind)
        self._span.set_status(Status(StatusCode.ERROR, kind))


_NOOP = SpanHandle(None)
_OFF = nullcontext(_NOOP)  # what every helper returns while spans are off (reusable)


def error_type(exc: BaseException) -> str:
    """The class that says what went wrong: a wrapped cause's (``RunFailed``
    from ``RateLimitError`` → ``RateLimitError``), else the exception's."""
    cause = exc.__cause__
    return type(cause if cause is not None else exc).__name__


@contextmanager
def span(
    name: str, attributes: Mapping[str, AttrValue | None] | None = None, *, kind: Kind = "internal"
) -> Iterator[SpanHandle]:
    """A span around the block, current inside it (a no-op when spans are off)."""
    tracer = _tracer
    if tracer is None:
        yield _NOOP
        return
    from opentelemetry.trace import SpanKind

    attrs: dict[str, Any] = {k: v for k, v in (attributes or {}).items() if v is not None}
    span_kind = SpanKind.CLIENT if kind == "client" else SpanKind.INTERNAL
    with tracer.start_as_current_span(name, kind=span_kind, attributes=attrs) as s:
        handle = SpanHandle(s)
        try:
            yield handle
        except BaseException as exc:
            s.set_attribute("error.type", error_type(exc))
            raise


def _conversation() -> str | None:
    ctx = current()
    return ctx.conversation if ctx is not None else None


# ---------------------------------------------------------------- GenAI spans


def turn_span(request: Request) -> AbstractContextManager[SpanHandle]:
    """``invoke_agent hugginggpt``: one request, from its start to its reply."""
    if _tracer is None:
        return _OFF
    return span(
        f"invoke_agent {AGENT_NAME}",
        {
            "gen_ai.operation.name": "invoke_agent",
            "gen_ai.agent.name": AGENT_NAME,
            "gen_ai.conversation.id": str(request.conversation),
            "hugginggpt.request_id": request.request_id,
            "hugginggpt.platform": request.conversation.platform,
            "hugginggpt.server": request.conversation.scope,
            "user.id": request.user_id,
        },
    )


def stage_span(stage: str) -> AbstractContextManager[SpanHandle]:
    """``stage planning``: one stage of the current request."""
    if _tracer is None:
        return _OFF
    return span(f"stage {stage}", {"hugginggpt.stage": stage})


def llm_span(
    model: str,
    *,
    provider: str | None = None,
    url: str | None = None,
    max_tokens: int | None = None,
    stream: bool | None = None,
) -> AbstractContextManager[SpanHandle]:
    """``chat MODEL``: one request to the language model at ``url`` (its base URL)."""
    if _tracer is None:
        return _OFF
    address, port = _address(url)
    return span(
        f"chat {model}",
        {
            "gen_ai.operation.name": "chat",
            "gen_ai.provider.name": provider,
            "gen_ai.request.model": model,
            "gen_ai.request.max_tokens": max_tokens,
            "gen_ai.conversation.id": _conversation(),
            "hugginggpt.stream": stream,
            "server.address": address,
            "server.port": port,
        },
        kind="client",
    )


def model_span(
    task: str, model: str, *, provider: str | None = None
) -> AbstractContextManager[SpanHandle]:
    """``TASK MODEL``: one call to a task's model (one attempt)."""
    if _tracer is None:
        return _OFF
    return span(
        f"{task} {model}",
        {
            "gen_ai.operation.name": task,
            "gen_ai.request.model": model,
            "gen_ai.provider.name": provider,
            "gen_ai.conversation.id": _conversation(),
        },
        kind="client",
    )


def _address(url: str | None) -> tuple[str | None, int | None]:
    """``server.address`` and ``server.port`` of a base URL (never its credentials)."""
    if not url:
        return None, None
    parts = urlsplit(url)
    try:
        port = parts.port
    except ValueError:
        port = None
    return parts.hostname, port or {"https": 443, "http": 80}.get(parts.scheme)
