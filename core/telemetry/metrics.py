"""Prometheus metrics: plain functions the core calls, no-ops until enabled.

The core calls :func:`observe_turn`, :func:`observe_stage`,
:func:`observe_llm_call`, :func:`observe_model_call` and
:func:`set_queue_depth` without knowing how (or whether) they are exported.
Nothing happens until :func:`enable` (the composition root, when
``METRICS_PORT`` is set): only then is ``prometheus_client`` imported, so the
CLI's start-up does not pay for it.  :func:`serve` exposes the metrics over
HTTP (``GET /metrics``) from a daemon thread.

Metrics (all prefixed ``hugginggpt_``):

=====================================  =========  ==================================
name                                   type       labels
=====================================  =========  ==================================
``requests_total``                     counter    platform, outcome (a ReplyStatus)
``request_duration_seconds``           histogram  platform
``stage_duration_seconds``             histogram  stage (planning, selection, execution, answer)
``tasks_total``                        counter    task, model, provider, status
``model_calls_total``                  counter    task, model, provider, outcome
``model_call_duration_seconds``        histogram  task, provider
``llm_calls_total``                    counter    model, outcome
``llm_call_duration_seconds``          histogram  model
``llm_tokens_total``                   counter    model, type (prompt, completion)
``queue_depth``                        gauge      state (waiting, in_flight)
=====================================  =========  ==================================

``outcome`` of a call: ``ok``, ``error``, ``timeout`` or ``cancelled`` (a
run stopped on purpose, e.g. a guess the model selection corrected).
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from wsgiref.simple_server import WSGIServer

    from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

    from core.types import Reply, Request

log = logging.getLogger(__name__)

PREFIX = "hugginggpt"
NONE = "none"  # a label whose value is unknown (a task that never reached a model)
# Seconds: LLM stages take seconds to minutes, video generation up to VIDEO_TASK_TIMEOUT.
BUCKETS = (0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 20, 30, 60, 120, 300, 600, 900)


class _Metrics:
    """The metric objects, in a registry of their own (tests build fresh ones)."""

    def __init__(self, *, process: bool) -> None:
        import prometheus_client as p

        self.registry: CollectorRegistry = p.CollectorRegistry()
        if process:  # CPU, memory, open files, GC: what every Prometheus job shows
            p.ProcessCollector(registry=self.registry)
            p.PlatformCollector(registry=self.registry)
            p.GCCollector(registry=self.registry)
        r = self.registry

        def counter(name: str, doc: str, labels: tuple[str, ...]) -> Counter:
            return p.Counter(f"{PREFIX}_{name}", doc, labels, registry=r)

        def histogram(name: str, doc: str, labels: tuple[str, ...]) -> Histogram:
            return p.Histogram(f"{PREFIX}_{name}", doc, labels, registry=r, buckets=BUCKETS)

        self.requests = counter(
            "requests", "Requests answered, by platform and outcome", ("platform", "outcome")
        )
        self.request_seconds = histogram(
            "request_duration_seconds", "Time from a request's start to its reply", ("platform",)
        )
        self.stage_seconds = histogram(
            "stage_duration_seconds", "Time each stage of a request took", ("stage",)
        )
        self.tasks = counter(
            "tasks",
            "Planned tasks by how they ended, on the last model tried",
            ("task", "model", "provider", "status"),
        )
        self.model_calls = counter(
            "model_calls",
            "Calls to a task's model (each attempt), by outcome",
            ("task", "model", "provider", "outcome"),
        )
        self.model_seconds = histogram(
            "model_call_duration_seconds", "Time one model call took", ("task", "provider")
        )
        self.llm_calls = counter(
            "llm_calls", "Requests sent to the language model, by outcome", ("model", "outcome")
        )
        self.llm_seconds = histogram(
            "llm_call_duration_seconds", "Time one language-model request took", ("model",)
        )
        self.llm_tokens = counter(
            "llm_tokens", "Language-model tokens, prompt and completion", ("model", "type")
        )
        self.queue: Gauge = p.Gauge(
            f"{PREFIX}_queue_depth",
            "Requests of this process waiting for admission, and running",
            ("state",),
            registry=r,
        )
        self.queue.labels(state="waiting").set(0)
        self.queue.labels(state="in_flight").set(0)


_lock = threading.Lock()
_active: _Metrics | None = None


def enable(*, process: bool = True) -> None:
    """Start counting (imports ``prometheus_client``); idempotent."""
    global _active
    with _lock:
        if _active is None:
            _active = _Metrics(process=process)


def disable() -> None:
    """Stop counting and forget every value (tests)."""
    global _active
    with _lock:
        _active = None


def enabled() -> bool:
    return _active is not None


def render() -> bytes:
    """The metrics in Prometheus' text format (empty when not enabled)."""
    m = _active
    if m is None:
        return b""
    from prometheus_client import generate_latest

    return generate_latest(m.registry)


# ------------------------------------------------------------ observations


def observe_turn(reply: Reply, request: Request) -> None:
    """A request ended with ``reply``: count it, its time and its tasks."""
    m = _active
    if m is None:
        return
    platform = request.conversation.platform
    m.requests.labels(platform=platform, outcome=reply.status.value).inc()
    total = reply.timings.total
    if total is not None:
        m.request_seconds.labels(platform=platform).observe(total)
    for t in reply.tasks:
        m.tasks.labels(
            task=t.task, model=t.model or NONE, provider=t.backend or NONE, status=t.status.value
        ).inc()


def observe_stage(stage: str, seconds: float) -> None:
    """One stage of a request took ``seconds`` (planning, selection, execution, answer)."""
    m = _active
    if m is not None:
        m.stage_seconds.labels(stage=stage).observe(seconds)


def observe_llm_call(
    model: str,
    seconds: float,
    *,
    prompt_tokens: int = 0,
    completion_tokens: int = 0,
    outcome: str = "ok",
) -> None:
    """One request sent to the language model (failed ones too, 0 tokens when unknown)."""
    m = _active
    if m is None:
        return
    m.llm_calls.labels(model=model, outcome=outcome).inc()
    m.llm_seconds.labels(model=model).observe(seconds)
    if prompt_tokens:
        m.llm_tokens.labels(model=model, type="prompt").inc(prompt_tokens)
    if completion_tokens:
        m.llm_tokens.labels(model=model, type="completion").inc(completion_tokens)


def observe_model_call(
    task: str, model: str, provider: str, seconds: float, *, outcome: str = "ok"
) -> None:
    """One attempt to run ``task`` on ``model`` at ``provider`` (remote, local, a provider)."""
    m = _active
    if m is None:
        return
    m.model_calls.labels(task=task, model=model, provider=provider, outcome=outcome).inc()
    m.model_seconds.labels(task=task, provider=provider).observe(seconds)


def set_queue_depth(*, waiting: int, in_flight: int) -> None:
    """Requests of this process waiting for admission, and running now."""
    m = _active
    if m is None:
        return
    m.queue.labels(state="waiting").set(waiting)
    m.queue.labels(state="in_flight").set(in_flight)


# ------------------------------------------------------------------ serving


@dataclass(slots=True)
class MetricsServer:
    """``GET http://host:port/metrics`` from a daemon thread; :meth:`close` stops it."""

    host: str
    port: int
    _server: WSGIServer
    _thread: threading.Thread

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}/metrics"

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)


def serve(port: int, host: str = "127.0.0.1") -> MetricsServer:
    """Enable the metrics and serve them on ``host:port`` (0: a free port).
    OSError when the port cannot be bound."""
    enable()
    m = _active
    assert m is not None
    from prometheus_client import start_http_server

    server, thread = start_http_server(port, addr=host, registry=m.registry)
    bound: Any = server.server_address
    return MetricsServer(host, int(bound[1]), server, thread)
