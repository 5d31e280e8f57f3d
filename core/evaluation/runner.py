"""The planning stage, run on a dataset's requests and recorded answer by answer.

Each request goes through :func:`core.planner.make_plan`, the function the
agent plans with: the same prompt, structured output, repairs, checks and
one re-ask, all within one stage deadline of the configured
:class:`~core.llm.LLM`.  Here every answer is kept, with the repairs made
and what was wrong with it, so the report can say how often the first answer
parsed, how often a re-ask was needed, which repairs were made, which tasks
were invented and which links feed the wrong kind of input.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from core.clock import SYSTEM_CLOCK, Clock
from core.errors import ErrorCode, RunFailed
from core.evaluation.datasets import EvalItem
from core.evaluation.graphs import inconsistent_links, invented_tasks, plan_shape
from core.llm import LLM
from core.plan_repair import Repair
from core.planner import EMPTIED, PlanAsk, PlanAttempt, make_plan
from core.planner import judge as judge_answer
from core.planning import PlannedTask
from core.types import Usage

log = logging.getLogger(__name__)

__all__ = ["EMPTIED", "Attempt", "PlanningOptions", "RequestResult", "judge", "plan_request"]
ABORT_AFTER = 3  # the first this many requests all failing on the LLM: stop


@dataclass(frozen=True, slots=True)
class PlanningOptions:
    """What the planner is given: the tasks offered, the plan and answer caps."""

    runnable: tuple[str, ...]
    max_tasks: int = 10
    max_tokens: int | None = None  # None: what a plan of max_tasks needs (as the agent)


@dataclass(frozen=True, slots=True)
class Attempt:
    """One answer of the LLM and what the planner made of it."""

    answer: str
    plan: tuple[PlannedTask, ...] | None  # None: it did not parse (or could not be repaired)
    error: str | None  # None: a valid plan
    invented: tuple[str, ...] = ()
    inconsistent: tuple[str, ...] = ()
    repairs: tuple[Repair, ...] = ()  # made before the plan was checked (core.plan_repair)
    cut: str | None = None  # "loop" | "cap": the answer was cut off (core.planner)

    @classmethod
    def of(cls, attempt: PlanAttempt) -> Attempt:
        plan = attempt.plan
        return cls(
            attempt.answer,
            plan,
            attempt.error,
            tuple(invented_tasks(attempt.answer)),
            tuple(inconsistent_links(plan)) if plan else (),
            attempt.repairs,
            attempt.cut,
        )

    @property
    def parsed(self) -> bool:
        return self.plan is not None


@dataclass(slots=True)
class RequestResult:
    item: EvalItem
    attempts: list[Attempt] = field(default_factory=list)
    llm_error: str | None = None  # the LLM call failed (no answer to judge)
    latency: float = 0.0  # seconds for the whole stage, re-ask included
    usage: Usage = field(default_factory=Usage)
    chosen: int = -1  # the attempt in force (core.planner.PlanResult.chosen)

    @property
    def parsed(self) -> bool:
        """The first answer parsed as a plan."""
        return bool(self.attempts) and self.attempts[0].parsed

    @property
    def final(self) -> Attempt | None:
        """The answer in force: the last, or the first kept over a worse re-ask."""
        return self.attempts[self.chosen] if self.attempts else None

    @property
    def plan(self) -> tuple[PlannedTask, ...] | None:
        """The plan the bot would run (the answer in force, when valid)."""
        final = self.final
        if self.llm_error is None and final is not None and final.error is None:
            return final.plan
        return None

    @property
    def valid(self) -> bool:
        return self.plan is not None

    @property
    def reasked(self) -> bool:
        return len(self.attempts) > 1

    @property
    def invented(self) -> tuple[str, ...]:
        return tuple(name for a in self.attempts for name in a.invented)

    @property
    def inconsistent(self) -> tuple[str, ...]:
        return tuple(link for a in self.attempts for link in a.inconsistent)

    @property
    def scored_plan(self) -> tuple[PlannedTask, ...]:
        """What the gold metrics compare: the valid plan, else the last answer
        that parsed, else no task at all."""
        if self.plan is not None:
            return self.plan
        for a in reversed(self.attempts):
            if a.plan is not None:
                return a.plan
        return ()

    @property
    def shape(self) -> str:
        """The gold's shape, else the shape of the plan scored (``none``: no task)."""
        return self.item.shape if self.item.shape is not None else plan_shape(self.scored_plan)


def _ask(item: EvalItem, options: PlanningOptions) -> PlanAsk:
    handles = dict(item.files)
    return PlanAsk(
        request_text=item.request,
        handles=handles,
        runnable=options.runnable,
        max_tasks=options.max_tasks,
        max_tokens=options.max_tokens,
        needs_models=bool(handles),
    )


def judge(answer: str, handles: dict[str, str], options: PlanningOptions) -> Attempt:
    """Read, repair and check one answer as the agent does; never raises."""
    ask = PlanAsk(
        request_text="", handles=handles, runnable=options.runnable, max_tasks=options.max_tasks
    )
    return Attempt.of(judge_answer(answer, ask))


async def plan_request(
    llm: LLM,
    item: EvalItem,
    options: PlanningOptions,
    clock: Clock = SYSTEM_CLOCK,
) -> RequestResult:
    """Plan one request as the agent would (:func:`core.planner.make_plan`),
    recording each answer."""
    result = RequestResult(item)
    started = clock.monotonic()
    with llm.stage():
        planned = await make_plan(llm, _ask(item, options), result.usage, label=f"eval {item.id}")
    result.attempts = [Attempt.of(a) for a in planned.attempts]
    result.chosen = planned.chosen
    if planned.llm_error is not None:
        result.llm_error = str(planned.llm_error)
        log.info("eval %s: the language model failed: %s", item.id, planned.llm_error)
    result.latency = clock.monotonic() - started
    return result


async def run_eval(
    llm: LLM,
    items: Sequence[EvalItem],
    options: PlanningOptions,
    *,
    concurrency: int = 4,
    on_result: Callable[[RequestResult], None] | None = None,
    clock: Clock = SYSTEM_CLOCK,
) -> list[RequestResult]:
    """Plan every request, ``concurrency`` at a time; results in dataset order.

    Raises :class:`RunFailed` when the first :data:`ABORT_AFTER` requests to
    finish all failed on the LLM itself (a wrong address or key, a model the
    server does not serve): the rest would fail the same way.
    """
    results: list[RequestResult | None] = [None] * len(items)
    queue = iter(enumerate(items))
    finished: list[RequestResult] = []
    abort: list[RunFailed] = []

    async def worker() -> None:
        for i, item in queue:
            if abort:
                return
            result = await plan_request(llm, item, options, clock)
            results[i] = result
            finished.append(result)
            if on_result is not None:
                on_result(result)
            first = finished[:ABORT_AFTER]
            if len(first) == ABORT_AFTER and all(r.llm_error for r in first) and not abort:
                abort.append(
                    RunFailed(
                        ErrorCode.EVAL_ABORTED, count=ABORT_AFTER, reason=first[-1].llm_error or ""
                    )
                )

    async with asyncio.TaskGroup() as group:
        for _ in range(max(1, min(concurrency, len(items)))):
            group.create_task(worker())
    if abort:
        raise abort[0]
    return [r for r in results if r is not None]
