"""The four stages' calls, as functions of the agent's parts (:class:`Deps`).

Planning (:func:`plan_request`; an approved plan checked: :func:`approved`),
selection (:func:`select`, :func:`candidates`), execution (:func:`execute`;
:func:`finished_before` for a resumed turn) and the answer (:func:`answer`),
each with one LLM deadline and its "still waiting" notices (:func:`llm_stage`).  The steps
of a turn (:mod:`core.turn_steps`) and the ``/plan`` preview
(:mod:`core.previews`) call them; what a turn has done so far lives in its
:class:`core.turn_state.TurnState`, never here.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import AbstractContextManager
from dataclasses import replace
from typing import Protocol

from core.catalog import Catalog, ModelInfo
from core.clock import Clock
from core.config import AgentConfig
from core.errors import ErrorCode, InputRejected, PlanError, RunFailed, TaskCode, TaskFailed
from core.execution import Assignment, Executor, OutcomeListener, TaskOutcome, with_handles
from core.llm import LLM, Deadline
from core.planner import PlanAsk, make_plan
from core.planning import RETRY_HINT, PlannedTask, check_plan
from core.ratelimit import QuotaLimiter
from core.response import Answer, answer_cap, fallback_answer, generate_response
from core.results import Blob, TaskResult
from core.routing import ExpertRouter
from core.selection import Selection, select_models
from core.server_settings import AppliedSettings, ServerSettingsService
from core.store.media import MediaStore
from core.store.repo import History, Repo
from core.store.usage import UsageStore
from core.tasks import canonical_task
from core.turn import Turn, chat_log
from core.types import (
    AnswerDelta,
    AnswerDiscarded,
    DiscardReason,
    EventSink,
    PlanNote,
    Request,
    Stage,
    StageStarted,
    StillWaiting,
    TaskRecord,
    TasksChanged,
    TaskState,
    Usage,
)

log = logging.getLogger(__name__)


class Deps(Protocol):
    """What the stages use: the agent's parts (``core.agent.Agent`` is one),
    read at each use, so a part swapped on the agent is the one used."""

    llm: LLM
    catalog: Catalog
    router: ExpertRouter
    repo: Repo
    media: MediaStore
    config: AgentConfig
    executor: Executor
    limiter: QuotaLimiter
    server_settings: ServerSettingsService
    usage_store: UsageStore
    clock: Clock  # the stages' waits and timings

    def prepare(self) -> None:
        """Start what a turn will need soon (a first hosted call's session,
        the LLM server's context size) while it loads and plans."""
        ...

    def warm_while_planning(self) -> AbstractContextManager[None]:
        """Load what any task's output may need while a slow planner thinks."""
        ...


# --- an LLM stage: one deadline, "still waiting" notices --------------------------


class Notices:
    """The "still waiting" notices of one LLM stage (a task, until stopped)."""

    def __init__(self) -> None:
        self.task: asyncio.Task[None] | None = None

    def stop(self) -> None:
        if self.task is not None:
            self.task.cancel()


async def _still_waiting(
    stage: Stage,
    emit: EventSink,
    tasks: tuple[TaskState, ...],
    deadline: Deadline,
    every: float,
    clock: Clock,
) -> None:
    # ``every`` after the last notice (the first: after the stage's start), so
    # a notice sent late, on a busy loop, is not followed by another at once
    last = 0.0
    while True:
        await clock.sleep(max(0.0, last + every - deadline.elapsed()))
        last = deadline.elapsed()
        await emit(StillWaiting(stage, last, max(1, deadline.attempts), tasks))


@contextlib.asynccontextmanager
async def llm_stage(
    deps: Deps, stage: Stage, emit: EventSink | None, tasks: tuple[TaskState, ...] = ()
) -> AsyncIterator[Notices]:
    """One deadline for every LLM call inside (LLM_TIMEOUT, retries and
    re-asks included) and, while they last, a :class:`StillWaiting` event
    every ``llm_wait_notice`` seconds (until the stage says it stopped
    waiting: the answer's first words arrived)."""
    with deps.llm.stage() as deadline:
        every = deps.config.llm_wait_notice
        notices = Notices()
        if emit is not None and every > 0:
            notices.task = asyncio.create_task(
                _still_waiting(stage, emit, tasks, deadline, every, deps.clock),
                name=f"llm-wait-{stage.value}",
            )
        try:
            yield notices
        finally:
            notices.stop()
            if notices.task is not None:
                await asyncio.wait([notices.task])


# --- 1. planning -------------------------------------------------------------------


async def plan_request(
    deps: Deps,
    req: Request,
    history: History,
    handles: dict[str, str],
    usage: Usage,
    offered: Sequence[str] | None = None,
    notes: list[PlanNote] | None = None,
) -> list[PlannedTask]:
    """The plan for ``req`` (:func:`core.planner.make_plan`); RunFailed
    when there is none.  ``notes``: gets what the person is told of the
    repairs that changed the plan's meaning."""
    runnable = list(offered) if offered is not None else deps.router.runnable_tasks(deps.catalog)
    ask = PlanAsk(
        request_text=req.text,
        chat_log=chat_log(history),
        handles=handles,
        runnable=runnable,
        max_tasks=deps.config.max_tasks,
        max_tokens=deps.config.planning_max_tokens,
        needs_models=bool(req.attachments),
    )
    result = await make_plan(deps.llm, ask, usage, label=f"request {req.request_id}")
    if result.llm_error is not None:
        raise result.llm_error
    plan = result.plan
    if plan is None:
        log.warning("request %s: no plan: %s", req.request_id, result.failure)
        raise result.failure or RunFailed(ErrorCode.NO_PLAN)
    if notes is not None:
        notes.extend(result.notes)
    return plan


# --- 2. selection ------------------------------------------------------------------


def candidates(
    deps: Deps, plan: Sequence[PlannedTask], ts: AppliedSettings | None = None
) -> dict[int, list[ModelInfo]]:
    """Each task's candidates: the top ``top_k`` usable models by
    downloads, or the model its server pinned for the task alone."""
    out: dict[int, list[ModelInfo]] = {}
    for t in plan:
        ranked = deps.router.usable_models(t.task, deps.catalog.models(t.task))[: deps.config.top_k]
        out[t.id] = ts.candidates(t.task, ranked) if ts else ranked
    return out


def selection_mode(deps: Deps, ts: AppliedSettings | None) -> str:
    """``llm`` or ``downloads``: the server's setting, else the bot's."""
    return ts.selection if ts else deps.config.selection


async def select(
    deps: Deps,
    req: Request,
    plan: Sequence[PlannedTask],
    usage: Usage,
    found: dict[int, list[ModelInfo]] | None = None,
    ts: AppliedSettings | None = None,
) -> dict[int, Selection]:
    """Stage 2's call (:func:`core.selection.select_models`) on ``found``
    candidates (by default :func:`candidates`)."""
    if found is None:
        found = candidates(deps, plan, ts)
    mode = selection_mode(deps, ts)
    return await select_models(
        deps.llm,
        plan,
        found,
        request_text=req.text,
        usage=usage,
        mode="downloads" if mode == "downloads" else "llm",
        max_tokens=deps.config.selection_max_tokens,
    )


def ordered(
    found: dict[int, list[ModelInfo]], selections: dict[int, Selection]
) -> dict[int, list[ModelInfo]]:
    """Each task's candidates with its chosen model first."""
    out: dict[int, list[ModelInfo]] = {}
    for task_id, models in found.items():
        chosen = selections.get(task_id)
        rest = [m for m in models if not chosen or m.id != chosen.model.id]
        out[task_id] = ([chosen.model] if chosen else []) + rest
    return out


def model(deps: Deps, model_id: str, task: str) -> ModelInfo:
    """A model as the catalog describes it now (its id and task alone when it no longer lists it)."""
    return deps.catalog.get(model_id, task) or ModelInfo(model_id, task)


# --- an approved plan ----------------------------------------------------------


def approved(deps: Deps, turn: Turn) -> tuple[list[PlannedTask], dict[int, Selection]]:
    """The request's approved plan, checked as a planned one is, and each
    step's model where it is still a usable candidate."""
    steps = turn.request.plan or ()
    plan = [
        PlannedTask(s.id, canonical_task(s.task) or s.task, list(s.dep), dict(s.args))
        for s in steps
    ]
    runnable = (
        list(turn.settings.runnable) if turn.settings else deps.router.runnable_tasks(deps.catalog)
    )
    try:
        check_plan(plan, handles=turn.handles(), runnable=runnable, max_tasks=deps.config.max_tasks)
    except PlanError as e:
        why = str(e).replace(RETRY_HINT, "").strip()
        raise InputRejected(ErrorCode.PLAN_STALE, reason=why) from e
    found = candidates(deps, plan, turn.settings)
    pinned: dict[int, Selection] = {}
    for step in steps:
        usable = {m.id: m for m in found.get(step.id, ())}
        if step.model in usable:
            pinned[step.id] = Selection(usable[step.model], step.reason or "", False)
    return plan, pinned


# --- 3. execution ------------------------------------------------------------------


async def execute(
    deps: Deps,
    turn: Turn,
    plan: Sequence[PlannedTask],
    found: dict[int, list[ModelInfo]],
    emit: EventSink,
    *,
    reasons: dict[int, str] | None = None,
    finished_before: dict[int, TaskOutcome] | None = None,
    on_finished: OutcomeListener | None = None,
    choice: Awaitable[Assignment] | None = None,
    on_chosen: Callable[[Assignment], Awaitable[None]] | None = None,
) -> dict[int, TaskOutcome]:
    """Run ``plan`` on ``found`` candidates (the chosen model first; while
    ``choice`` is pending, a guess that it corrects)."""

    async def listener(states: tuple[TaskState, ...]) -> None:
        await emit(TasksChanged(states))

    async def load_handle(handle: str) -> Blob:
        r = turn.resource(handle)
        if r is None:
            raise TaskFailed(TaskCode.NO_SUCH_FILE, retryable=False, file=handle)
        try:
            data = await deps.repo.read(r)
        except (OSError, ValueError) as e:
            log.error("request %s: cannot read %s: %s", turn.request.request_id, handle, e)
            raise TaskFailed(TaskCode.STORED_FILE_MISSING, retryable=False, file=handle) from e
        return Blob(r.kind, r.mime, data, handle=r.handle)

    async def save_result(o: TaskOutcome) -> TaskResult:
        assert o.result is not None
        handles: list[str] = []
        for blob in o.result.media:
            res = await turn.store_output(deps.media, blob, o.task, o.id)
            handles.append(res.handle)
        return with_handles(o.result, handles)

    return await deps.executor.run(
        plan,
        found,
        load_handle=load_handle,
        listener=listener,
        reasons=reasons,
        save_result=save_result,
        finished_before=finished_before,
        on_finished=on_finished,
        choice=choice,
        on_chosen=on_chosen,
        scope=repr(turn.request.conversation),  # every field, unambiguously
    )


async def finished_before(deps: Deps, turn: Turn) -> dict[int, TaskOutcome]:
    """The tasks a stopped process finished (its checkpoint's), as the
    executor takes them: each model as the catalog describes it now, the
    media's bytes read back from the media store."""
    done = turn.state.outcomes
    if not done:
        return {}
    data = {r.handle: await deps.repo.read(r) for r in turn.generated}

    def restored(o: TaskOutcome) -> TaskOutcome:
        result = o.result
        if result is not None and result.media:
            blobs = tuple(replace(b, data=data.get(b.handle or "", b"")) for b in result.media)
            result = replace(result, media=blobs)
        return replace(o, model=model(deps, o.model.id, o.task) if o.model else None, result=result)

    log.info(
        "request %s resumed: tasks %s finished before, not run again",
        turn.request.request_id,
        sorted(done),
    )
    return {k: restored(o) for k, o in done.items()}


# --- 4. the answer -----------------------------------------------------------------


async def answer(
    deps: Deps,
    turn: Turn,
    records: tuple[TaskRecord, ...],
    tasks: tuple[TaskState, ...],
    emit: EventSink,
) -> Answer:
    """Stage 4, streamed: each piece of the answer goes out as an
    :class:`AnswerDelta` as the model writes it.  When the call fails
    (also midway) the answer is built from the records instead, after an
    :class:`AnswerDiscarded` if words had gone out already."""
    req = turn.request
    await emit(StageStarted(Stage.ANSWERING, tasks=tasks))
    streamed = False
    discard = DiscardReason.ECHOED  # a fallback without a failure: the model echoed
    try:
        async with llm_stage(deps, Stage.ANSWERING, emit, tasks) as waiting:

            async def delta(text: str) -> None:
                nonlocal streamed
                if not streamed:
                    streamed = True
                    waiting.stop()  # the model is answering: no more "still waiting"
                await emit(AnswerDelta(text))

            written = await generate_response(
                deps.llm,
                request_text=req.text,
                chat_log=chat_log(turn.history),
                records=records,
                files=tuple(turn.generated),
                usage=turn.usage,
                max_tokens=answer_cap(deps.config.answer_max_tokens, deps.llm.reasons),
                on_delta=delta,
                instruction=turn.settings.answer_instruction() if turn.settings else None,
            )
    except RunFailed as e:
        log.warning("request %s: response stage failed: %s", req.request_id, e)
        discard = DiscardReason.BROKE_OFF
        text = fallback_answer(records, tuple(turn.generated), str(e))
        written = Answer(text, fallback=True, reason=e)
    if written.fallback and streamed:
        await emit(AnswerDiscarded(discard))
    return written
