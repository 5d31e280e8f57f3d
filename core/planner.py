"""Stage 1's loop, the one the agent runs and ``eval plans`` measures.

:func:`make_plan` asks the LLM for a plan (the prompt of
:func:`~core.plan_prompt.build_planning_messages`, the structured output of
:func:`~core.plan_schema.plan_schema`), reads it
(:func:`~core.planning.read_drafts`), refuses one that copies a
demonstration (:func:`~core.plan_prompt.copied_demo`), repairs what has one
reading (:func:`~core.plan_repair.repair_plan`), checks it against the
deployment and the conversation (:func:`~core.planning.check_plan`), and
re-asks once with what was wrong (without the demonstration it copied, if
it copied one).  Every answer is kept as a
:class:`PlanAttempt` with the plan read, the repairs and the error.

Bounded by the server's speed: the completion cap fits the plan cap
(:func:`~core.plan_schema.planning_token_cap`, unless set), the answer is
streamed and cut as soon as it repeats itself (:class:`LoopGuard`), and a
model that loops or writes past the cap twice is named as the reason, with
the setting to change.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace

from core.errors import ErrorCode, PlanError, RunFailed
from core.llm import LLM, BudgetExhausted, JSONSchema
from core.plan_prompt import CHAT_LOG_BUDGET, Demo, copied_demo, demos_shown
from core.plan_read import RETRY_HINT, names_tasks, short
from core.plan_repair import Repair, notes, repair_plan
from core.plan_schema import plan_schema, planning_token_cap, text_limit
from core.planning import (
    PlannedTask,
    build_planning_messages,
    check_plan,
    join_problems,
    read_drafts,
    reask_messages,
)
from core.repeats import Looping, RepeatGuard
from core.types import PlanNote, Usage

log = logging.getLogger(__name__)

EMPTIED = "Asked to correct its plan, the language model answered with no task at all."
# LoopGuard: a plan's tail repeating one piece over LOOP_SPAN characters
# (core.repeats) is a loop; so is the same with every number read as 0 (a
# model counting "id": 1, 2, 3… in a loop), over twice the span: ten tasks
# alike but for a number are a plan.
LOOP_SPAN = 600
COUNTING_SPAN = 1200


@dataclass(frozen=True, slots=True)
class PlanAttempt:
    """One answer of the LLM and what the planner made of it."""

    answer: str
    plan: tuple[PlannedTask, ...] | None  # read and repaired; None: nothing usable
    repairs: tuple[Repair, ...]
    error: str | None  # why it was refused (sent back on the re-ask); None: the plan
    cut: str | None = None  # "loop" | "cap": the answer did not end by itself
    copied: str | None = None  # the request of the demonstration it copies


@dataclass(frozen=True, slots=True)
class PlanAsk:
    """What the planner is given for one request."""

    request_text: str
    chat_log: Sequence[tuple[str, str]] = ()
    handles: Mapping[str, str] = field(default_factory=dict)  # file handle → kind
    runnable: Sequence[str] = ()
    max_tasks: int = 10
    max_tokens: int | None = None  # None: planning_token_cap
    needs_models: bool = False  # the person sent files: [] is no answer to a re-ask

    @property
    def own_text(self) -> str:
        """The person's own words (the request and the chat log): what a plan
        may repeat without copying or looping."""
        return "\n".join([self.request_text, *(t for _, t in self.chat_log)])


@dataclass(slots=True)
class PlanResult:
    """Every attempt, and the plan or why there is none."""

    attempts: list[PlanAttempt] = field(default_factory=list)
    failure: RunFailed | None = None  # why there is no plan (NO_PLAN)
    llm_error: RunFailed | None = None  # the LLM call itself failed
    chosen: int = -1  # the attempt in force: the last, or the first kept over a worse re-ask

    @property
    def plan(self) -> list[PlannedTask] | None:
        last = self.attempts[self.chosen] if self.attempts else None
        if self.failure or self.llm_error or last is None or last.error is not None:
            return None
        return list(last.plan or ())

    @property
    def notes(self) -> tuple[PlanNote, ...]:
        """What the person is told of the repairs of the plan in force."""
        return notes(self.attempts[self.chosen].repairs) if self.plan is not None else ()


class LoopGuard(RepeatGuard):
    """Reads a streamed plan and raises :class:`~core.repeats.Looping` once
    its tail repeats one piece over and over (also when only its numbers
    change; not a piece the person's own words repeat), or it names more
    than ``max_tasks`` + 2 tasks."""

    def __init__(self, max_tasks: int, own_text: str = "") -> None:
        super().__init__(LOOP_SPAN, own_text, counting_span=COUNTING_SPAN)
        self.max_tasks = max_tasks

    def check(self, text: str) -> None:
        super().check(text)
        if text.count('"task"') > self.max_tasks + 2:
            self.repeated = '"task"'
            raise Looping(f"the answer names more than {self.max_tasks + 2} tasks")


async def make_plan(llm: LLM, ask: PlanAsk, usage: Usage, *, label: str = "") -> PlanResult:
    """Plan one request: ask, read, repair, check, re-ask once; never raises
    for a bad plan or a failed call (they are in the result)."""
    result = PlanResult()
    files = sorted(ask.handles.items())
    demos = demos_shown(ask.request_text, chat_log=ask.chat_log, files=files, runnable=ask.runnable)
    messages = build_planning_messages(
        request_text=ask.request_text,
        chat_log=ask.chat_log,
        files=files,
        runnable=ask.runnable,
        demos=demos,
    )
    log_chars = min(sum(len(t) for _, t in ask.chat_log), CHAT_LOG_BUDGET)
    schema = plan_schema(
        ask.runnable,
        max_tasks=ask.max_tasks,
        files=files,
        text_chars=text_limit(len(ask.request_text), log_chars),
    )
    try:
        first = await _attempt(llm, messages, schema, ask, usage, demos)
        result.attempts.append(first)
        _log(label, 1, first)
        if first.error is None:
            return await _use_named_files(llm, messages, schema, ask, usage, demos, result, label)
        had_tasks = bool(first.plan) or names_tasks(first.answer)
        if first.copied is not None:  # asked again without the demonstration it copied
            kept = [d for d in demos if d.request != first.copied]
            messages = build_planning_messages(
                request_text=ask.request_text,
                chat_log=ask.chat_log,
                files=files,
                runnable=ask.runnable,
                demos=kept,
            )
        again = reask_messages(
            messages, first.answer, first.error, empty_is_wrong=had_tasks or ask.needs_models
        )
        second = await _attempt(llm, again, schema, ask, usage, demos)
        if second.error is None and not second.plan and had_tasks:
            second = replace(second, error=EMPTIED)
        result.attempts.append(second)
        _log(label, 2, second)
    except RunFailed as e:
        result.llm_error = e
        return result
    if result.attempts[-1].error is not None:
        result.failure = _failure(result.attempts)
    return result


def unused_files(plan: Sequence[PlannedTask], ask: PlanAsk) -> list[str]:
    """The conversation's files that the request names by their handle and
    no task of ``plan`` takes (a small model that plans a text task for a
    request about example.jpg)."""
    used = " ".join(v for t in plan for v in t.args.values())
    return [h for h in ask.handles if h in ask.request_text and h not in used]


async def _use_named_files(
    llm: LLM,
    messages: list[dict[str, str]],
    schema: JSONSchema,
    ask: PlanAsk,
    usage: Usage,
    demos: Sequence[Demo],
    result: PlanResult,
    label: str,
) -> PlanResult:
    """A valid plan that leaves out a file the request names is asked again
    once, saying which; the answer is taken only when it is valid and
    leaves out fewer, else the first plan stays (also when the call fails:
    a plan is in hand)."""
    first = result.attempts[0]
    unused = unused_files(first.plan or (), ask)
    if not unused:
        return result
    error = (
        f"Your plan does not use {', '.join(unused)}, which the request names: give each "
        f"file to the task that works on it. {RETRY_HINT}"
    )
    again = reask_messages(messages, first.answer, error, empty_is_wrong=True)
    try:
        second = await _attempt(llm, again, schema, ask, usage, demos)
    except RunFailed as e:
        log.info("%s: plan 1 kept (%s unused); asking again failed: %s",
                 label, ", ".join(unused), e)  # fmt: skip
        result.chosen = 0
        return result
    result.attempts.append(second)
    _log(label, 2, second)
    if second.error is not None or len(unused_files(second.plan or (), ask)) >= len(unused):
        log.info("%s: plan 1 kept: plan 2 is no better", label)
        result.chosen = 0
    return result


async def _attempt(
    llm: LLM,
    messages: list[dict[str, str]],
    schema: JSONSchema,
    ask: PlanAsk,
    usage: Usage,
    demos: Sequence[Demo],
) -> PlanAttempt:
    """One call and its answer judged; a reasoning model that thought the
    whole cap away is asked again once with room to think."""
    for _ in range(2):
        cap = ask.max_tokens or planning_token_cap(
            ask.max_tasks, len(ask.request_text), reasoning=llm.reasons
        )
        guard = LoopGuard(ask.max_tasks, ask.own_text)
        spent = usage.completion_tokens
        try:
            answer = await llm.complete(
                messages, usage=usage, max_tokens=cap, schema=schema, on_delta=guard.feed
            )
        except BudgetExhausted:
            if (
                ask.max_tokens is not None
                or not llm.reasons
                or cap >= planning_token_cap(ask.max_tasks, len(ask.request_text), reasoning=True)
            ):
                raise
            continue  # llm.reasons is set now: the next cap has room to think
        except RunFailed as e:
            if not isinstance(e.__cause__, Looping):
                raise
            return _cut(guard, ask, demos)
        attempt = judge(answer, ask, demos)
        if attempt.error is not None and usage.completion_tokens - spent >= cap:
            error = (
                f"Your answer was cut off at the limit of {cap} tokens: a plan must be short. "
                f"Write each task once, with short args. {RETRY_HINT}"
            )
            attempt = replace(attempt, error=error, cut="cap")
        return attempt
    raise AssertionError("unreachable")  # pragma: no cover


def _cut(guard: LoopGuard, ask: PlanAsk, demos: Sequence[Demo]) -> PlanAttempt:
    text = guard.text
    read = judge(text, ask, demos)
    what = short(guard.repeated or "", 40)
    error = (
        f"Your answer kept repeating {what} and was cut off after {len(text)} characters. "
        f"Write each task once, with short args. {RETRY_HINT}"
    )
    return PlanAttempt(text, read.plan, read.repairs, error, cut="loop")


def judge(answer: str, ask: PlanAsk, demos: Sequence[Demo] = ()) -> PlanAttempt:
    """Read, repair and check one answer as the planner does; never raises.

    An answer that copies a demonstration is refused even when it would
    run: its plan is the example's, not the person's."""
    try:
        drafts, problems = read_drafts(answer)
        if problems:
            raise PlanError(join_problems(problems))
        plan, repairs = repair_plan(
            drafts, handles=ask.handles, runnable=ask.runnable, request_text=ask.request_text
        )
    except PlanError as e:
        return PlanAttempt(answer, None, (), str(e))
    done = (answer, tuple(plan), tuple(repairs))
    values = [v for d in drafts for v in d.args.values()]  # as written: before the repairs
    copied = copied_demo(values, demos, own_text=ask.own_text, handles=list(ask.handles))
    if copied is not None:
        phrase, demo = copied
        error = (
            f"Your plan copies an example, not this request: {phrase!r} is not in the "
            "user's request or files. Plan only what the last <request> asks, with its own "
            f"words and files. {RETRY_HINT}"
        )
        return PlanAttempt(*done, error, copied=demo.request)
    try:
        check_plan(plan, handles=ask.handles, runnable=ask.runnable, max_tasks=ask.max_tasks)
    except PlanError as e:
        return PlanAttempt(*done, str(e))
    return PlanAttempt(*done, None)


def _failure(attempts: Sequence[PlanAttempt]) -> RunFailed:
    """Why there is no plan (``NO_PLAN``): ``cause`` ``loop`` or ``length``
    (both answers were cut), ``emptied`` (the re-ask answered no task) or
    ``invalid`` (twice), with ``reason``, the plan check's own words (what
    the re-ask told the language model)."""
    first, last = attempts[0], attempts[-1]
    cuts = [a.cut for a in attempts if a.cut]
    if len(cuts) == len(attempts):
        return RunFailed(ErrorCode.NO_PLAN, cause="loop" if "loop" in cuts else "length")
    if last.error == EMPTIED:
        why = (first.error or "").replace(RETRY_HINT, "").strip()
        return RunFailed(ErrorCode.NO_PLAN, cause="emptied", reason=why)
    why = (last.error or "").replace(RETRY_HINT, "").strip()
    return RunFailed(ErrorCode.NO_PLAN, cause="invalid", reason=why)


def _log(label: str, n: int, attempt: PlanAttempt) -> None:
    for r in attempt.repairs:
        log.info("%s: plan %d repaired (%s): %s", label, n, r.kind.value, r.detail)
    if attempt.error is not None:
        log.info("%s: plan %d refused: %s", label, n, attempt.error)
