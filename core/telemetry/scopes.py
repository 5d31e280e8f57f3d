"""One ``with`` per thing worth watching: logs, metrics and spans together.

The core wraps a request in :func:`turn`, each stage in :func:`stage`, each
language-model request in :func:`llm_call` and each model call in
:func:`model_call`; each writes what its part needs (the request context for
log lines, the stage's log line, the Prometheus observations, the span) and
each is cheap when metrics and spans are off.  Times come from an injectable
:class:`~core.clock.Clock`'s ``monotonic`` (tests pass a fake one).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Literal

from core.clock import SYSTEM_CLOCK, Clock
from core.telemetry import metrics, tracing
from core.telemetry.context import request_context
from core.telemetry.logs import log_stage
from core.telemetry.tracing import SpanHandle, error_type

if TYPE_CHECKING:
    from core.types import Reply, Request

StageName = Literal["planning", "selection", "execution", "answer"]


def outcome_of(exc: BaseException | None) -> str:
    """``ok``, ``timeout``, ``cancelled`` (stopped on purpose) or ``error``."""
    if exc is None:
        return "ok"
    if isinstance(exc, asyncio.CancelledError):
        return "cancelled"
    if isinstance(exc, TimeoutError):
        return "timeout"
    return "error"


class TurnScope:
    """The request being served; :meth:`finish` once its reply is final."""

    def __init__(self, request: Request, span: SpanHandle) -> None:
        self.request = request
        self.span = span
        self.finished = False

    def finish(self, reply: Reply) -> None:
        """Count the request (once) and put its outcome on the turn's span."""
        if self.finished:
            return
        self.finished = True
        metrics.observe_turn(reply, self.request)
        self.span.set(
            {
                "hugginggpt.status": reply.status.value,
                "hugginggpt.tasks": len(reply.tasks),
                "hugginggpt.llm_calls": reply.usage.llm_calls,
                "gen_ai.usage.input_tokens": reply.usage.prompt_tokens,
                "gen_ai.usage.output_tokens": reply.usage.completion_tokens,
            }
        )
        if reply.error:
            self.span.fail(reply.status.value)


@contextmanager
def turn(request: Request) -> Iterator[TurnScope]:
    """``with telemetry.turn(request) as t: … t.finish(reply)``: log lines
    inside carry the request's context; the turn's span encloses the stages."""
    with request_context(request), tracing.turn_span(request) as span:
        yield TurnScope(request, span)


class StageTimer:
    """A running stage: :meth:`note` adds fields to its log line and span;
    ``seconds`` is its duration once the block has ended."""

    def __init__(self, span: SpanHandle) -> None:
        self.span = span
        self.fields: dict[str, object] = {}
        self.seconds = 0.0

    def note(self, **fields: object) -> None:
        self.fields.update(fields)


@contextmanager
def stage(name: StageName, *, clock: Clock = SYSTEM_CLOCK) -> Iterator[StageTimer]:
    """One stage of the current request: a span, then one log line with its
    time and fields (``outcome`` too when it failed) and the stage histogram."""
    with tracing.stage_span(name) as span:
        timer = StageTimer(span)
        started = clock.monotonic()
        failure: BaseException | None = None
        try:
            yield timer
        except BaseException as exc:
            failure = exc
            raise
        finally:
            timer.seconds = round(clock.monotonic() - started, 3)
            fields = dict(timer.fields)
            if failure is not None:
                fields["outcome"] = outcome_of(failure)
                fields["error"] = error_type(failure)
            log_stage(name, timer.seconds, **fields)
            metrics.observe_stage(name, timer.seconds)
            span.set({f"hugginggpt.{k}": _attr(v) for k, v in timer.fields.items()})


class LLMCall:
    """One language-model request: :meth:`record` what it answered; a call
    left without :meth:`record` and without an exception (a retried or
    adapted attempt) is counted as failed (:meth:`fail` says why)."""

    def __init__(self, span: SpanHandle) -> None:
        self.span = span
        self.prompt_tokens = 0
        self.completion_tokens = 0
        self.recorded = False
        self.error: str | None = None

    def record(
        self,
        prompt_tokens: int,
        completion_tokens: int,
        *,
        finish_reasons: Sequence[str | None] = (),
        response_model: str | None = None,
    ) -> None:
        self.recorded = True
        self.prompt_tokens = prompt_tokens
        self.completion_tokens = completion_tokens
        reasons = [r for r in finish_reasons if r]
        self.span.set(
            {
                "gen_ai.usage.input_tokens": prompt_tokens,
                "gen_ai.usage.output_tokens": completion_tokens,
                "gen_ai.response.finish_reasons": reasons or None,
                "gen_ai.response.model": response_model or None,
            }
        )

    def fail(self, error: BaseException | str) -> None:
        self.error = error if isinstance(error, str) else error_type(error)


@contextmanager
def llm_call(
    model: str,
    *,
    provider: str | None = None,
    url: str | None = None,
    max_tokens: int | None = None,
    stream: bool | None = None,
    clock: Clock = SYSTEM_CLOCK,
) -> Iterator[LLMCall]:
    """One request to the language model (``url``: the API's base URL)."""
    with tracing.llm_span(
        model, provider=provider, url=url, max_tokens=max_tokens, stream=stream
    ) as span:
        call = LLMCall(span)
        started = clock.monotonic()
        failure: BaseException | None = None
        try:
            yield call
        except BaseException as exc:
            failure = exc
            raise
        finally:
            outcome = outcome_of(failure)
            if failure is None and (call.error is not None or not call.recorded):
                outcome = "error"
                span.fail(call.error or "_OTHER")
            metrics.observe_llm_call(
                model,
                clock.monotonic() - started,
                prompt_tokens=call.prompt_tokens,
                completion_tokens=call.completion_tokens,
                outcome=outcome,
            )


@contextmanager
def model_call(
    task: str, model: str, *, provider: str, clock: Clock = SYSTEM_CLOCK
) -> Iterator[SpanHandle]:
    """One attempt to run ``task`` on ``model`` (``provider``: remote, local,
    or the Inference Provider's name when known); failed when an exception
    leaves the block."""
    with tracing.model_span(task, model, provider=provider) as span:
        started = clock.monotonic()
        failure: BaseException | None = None
        try:
            yield span
        except BaseException as exc:
            failure = exc
            raise
        finally:
            metrics.observe_model_call(
                task, model, provider, clock.monotonic() - started, outcome=outcome_of(failure)
            )


def _attr(value: object) -> tracing.AttrValue:
    if isinstance(value, str | bool | int | float):
        return value
    return str(value)
