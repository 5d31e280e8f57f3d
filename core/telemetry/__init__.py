"""Observability: structured logs, Prometheus metrics, OpenTelemetry spans.

The core calls the scopes (:func:`turn`, :func:`stage`, :func:`llm_call`,
:func:`model_call`) and the plain functions of :mod:`core.telemetry.metrics`;
the composition root turns the exports on with :func:`serving`.  Importing
this package costs only the standard library: ``prometheus_client`` and
``opentelemetry`` are imported when metrics or spans are turned on.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager

from core.telemetry import metrics, tracing
from core.telemetry.context import RequestContext, current, request_context
from core.telemetry.logs import configure_logging, log_stage
from core.telemetry.metrics import MetricsServer
from core.telemetry.scopes import (
    LLMCall,
    StageName,
    StageTimer,
    TurnScope,
    llm_call,
    model_call,
    stage,
    turn,
)

__all__ = [
    "LLMCall",
    "MetricsServer",
    "RequestContext",
    "StageName",
    "StageTimer",
    "TurnScope",
    "configure_logging",
    "current",
    "llm_call",
    "log_stage",
    "metrics",
    "model_call",
    "request_context",
    "serving",
    "stage",
    "tracing",
    "turn",
]

log = logging.getLogger(__name__)


@contextmanager
def serving(
    *,
    metrics_port: int | None,
    metrics_host: str = "127.0.0.1",
    otlp_endpoint: str | None = None,
    traces: bool = True,
) -> Iterator[MetricsServer | None]:
    """For the life of the block: ``/metrics`` on ``metrics_host:metrics_port``
    when a port is given; spans (``traces``) to ``otlp_endpoint``, or to the
    endpoint the ``OTEL_*`` environment names.  A port that cannot be bound
    is a warning, not a failure (e.g. ``ask`` while the bot runs with the
    same settings)."""
    server: MetricsServer | None = None
    if metrics_port is not None:
        try:
            server = metrics.serve(metrics_port, metrics_host)
        except OSError as e:
            log.warning(
                "metrics not served: cannot listen on %s:%s (%s); check METRICS_PORT",
                metrics_host,
                metrics_port,
                e.strerror or e,
            )
        else:
            log.info("metrics at %s", server.url)
    tracing_on = traces and tracing.configure(endpoint=otlp_endpoint)
    try:
        yield server
    finally:
        if server is not None:
            server.close()
        if tracing_on:
            tracing.shutdown()
