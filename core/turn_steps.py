"""How a turn runs, and how it resumes: small steps over one :class:`TurnState`.

A request runs as a chain of steps.  Each step is a small frozen dataclass
whose ``run(ctx)`` does one thing and returns the next step, or
:class:`End` with the reply (the shape of pydantic-ai's agent graph: the
state lives in ``ctx.turn.state``, apart from the dependencies, ``ctx.deps``)::

    Start ─► Plan ─────► SelectAndExecute ─► Answer ─► End
      │  └─► Approved ─► Execute ───────────┘  ▲
      └────► (next_step: where the checkpoint says) ┘

* :class:`Start` loads the history and stores the uploads (the first checkpoint).
* :class:`Plan` asks the LLM for a plan; :class:`Approved` takes the request's own.
* :class:`SelectAndExecute` runs each task on a first guess while the LLM
  chooses models; :class:`Execute` runs a plan whose models are known.
* :class:`Answer` writes the answer (streamed), or the fallback from the results.

**Resume** is one function, :func:`next_step`: after :class:`Start`, the
turn's state alone says where to go on (no plan yet: plan; a plan: execute
what did not finish; an empty plan: answer).  :func:`complete_turn` is the whole
of it: load the state (a saved reply is only posted again), check the
request (once: a resumed one was checked and counted), run the steps, and
save the turn with its last checkpoint (:func:`core.turn_save.persist`).
Checkpoints are written as the steps go (:class:`core.checkpoint.CheckpointWriter`).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from dataclasses import dataclass, replace

from core import telemetry
from core.checkpoint import CheckpointWriter
from core.errors import ErrorCode, InputRejected, RunFailed, StoreUnavailable
from core.execution import Assignment, TaskOutcome
from core.planning import PlannedTask
from core.request_checks import charge, check_request, settings_for
from core.selection import Selection, first_guesses
from core.stages import (
    Deps,
    answer,
    approved,
    candidates,
    execute,
    finished_before,
    llm_stage,
    model,
    ordered,
    plan_request,
    select,
    selection_mode,
)
from core.turn import Turn, record, states
from core.turn_save import persist, reply_of
from core.turn_state import load_state
from core.types import (
    EventSink,
    Job,
    Reply,
    ReplyStatus,
    Request,
    Stage,
    StageStarted,
    Timings,
    Usage,
)

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class StepContext:
    """What every step is given: the agent's parts, the turn (its state
    inside), where its events go, and its checkpoint writer."""

    deps: Deps
    turn: Turn
    emit: EventSink
    checkpoints: CheckpointWriter


@dataclass(frozen=True, slots=True)
class End:
    reply: Reply


# --- the steps ---------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Start:
    """The history loaded; a fresh turn's uploads checked and stored."""

    async def run(self, ctx: StepContext) -> Step | End:
        deps, turn = ctx.deps, ctx.turn
        deps.prepare()  # a first hosted call's session, the LLM's context, while we plan
        resumed = turn.state.started
        await ctx.emit(StageStarted(Stage.PLANNING, resumed=resumed))
        # A fresh turn's files are checked (decoded in a thread) and written
        # while its history loads: only their handles need the history.
        putting = None
        if not resumed and turn.request.attachments:
            putting = asyncio.ensure_future(
                turn.put_uploads(
                    deps.media,
                    max_bytes=deps.config.max_attachment_bytes,
                    max_pixels=deps.config.max_image_pixels,
                )
            )
        try:
            turn.history = await deps.repo.load_history(
                turn.request.conversation, turns=deps.config.history_turns
            )
        except BaseException:
            if putting is not None:
                putting.cancel()  # the history's failure is the one to report
                await asyncio.wait([putting])
                if not putting.cancelled():
                    putting.exception()  # seen
            raise
        if not resumed:
            turn.name_uploads(await putting if putting is not None else [])
            await ctx.checkpoints.save()
        return next_step(turn)


def next_step(turn: Turn) -> Step:
    """Where a turn whose uploads are stored goes on: for a fresh turn its
    first step, for a resumed one the step after its checkpoint's last.
    The one place a resumed turn is routed."""
    plan = turn.state.plan
    if plan is None:
        return Approved() if turn.request.plan is not None else Plan()
    log.info("request %s resumed with its plan of %d tasks", turn.request.request_id, len(plan))
    return Execute() if plan else Answer([], {})


@dataclass(frozen=True, slots=True)
class Plan:
    """Stage 1: the LLM's plan (RunFailed when there is none)."""

    async def run(self, ctx: StepContext) -> Step | End:
        deps, turn = ctx.deps, ctx.turn
        with telemetry.stage("planning") as st:
            handles = turn.handles()
            async with llm_stage(deps, Stage.PLANNING, ctx.emit):
                runnable = turn.settings.runnable if turn.settings else None
                with deps.warm_while_planning():
                    plan = await plan_request(
                        deps,
                        turn.request,
                        turn.history,
                        handles,
                        turn.usage,
                        runnable,
                        turn.plan_notes,
                    )
            st.note(tasks=len(plan))
        turn.timings["planning"] = st.seconds
        if not plan:  # answered without a model
            turn.state.plan = []
            await ctx.checkpoints.save()
            return Answer([], {})
        return SelectAndExecute(plan)


@dataclass(frozen=True, slots=True)
class Approved:
    """An approved plan (``/plan`` → Run, Run again): checked as a planned
    one is, each step on its model where that is still a usable candidate;
    no planning, no selection call."""

    async def run(self, ctx: StepContext) -> Step | End:
        turn = ctx.turn
        plan, pinned = approved(ctx.deps, turn)
        turn.state.plan = list(plan)
        turn.state.select(pinned)
        await ctx.checkpoints.save()
        log.info(
            "request %s runs its approved plan of %d tasks", turn.request.request_id, len(plan)
        )
        return Execute() if plan else Answer([], {})


@dataclass(frozen=True, slots=True)
class SelectAndExecute:
    """Stages 2 and 3 at once: each task starts on its most downloaded
    candidate while the LLM chooses (one batched call, or none when no task
    has a choice).  A guess that finished first is kept; the choice
    redirects what has not finished, and when every task finished first
    the call is cancelled (:mod:`core.execution`).  The plan and the models
    in force are checkpointed together, before any task's result."""

    plan: list[PlannedTask]

    async def run(self, ctx: StepContext) -> Step | End:
        with telemetry.stage("execution") as st:
            outcomes = await _select_and_execute(ctx, self.plan)
            st.note(tasks=",".join(f"{o.id}:{o.status.value}" for o in outcomes.values()))
        ctx.turn.timings["execution"] = st.seconds
        return Answer(self.plan, outcomes)


@dataclass(frozen=True, slots=True)
class Execute:
    """Stage 3 on the models the state holds (approved, or chosen before a
    stop): only the tasks that have not finished run."""

    async def run(self, ctx: StepContext) -> Step | End:
        deps, turn = ctx.deps, ctx.turn
        plan = turn.state.plan or []
        with telemetry.stage("execution") as st:
            by_task = {t.id: t.task for t in plan}
            selections = {
                i: Selection(model(deps, c.model, by_task[i]), c.reason, c.by_llm)
                for i, c in turn.state.selections.items()
                if i in by_task
            }
            outcomes = await execute(
                deps,
                turn,
                plan,
                ordered(candidates(deps, plan, turn.settings), selections),
                ctx.emit,
                reasons={k: v.reason for k, v in selections.items()},
                finished_before=await finished_before(deps, turn),
                on_finished=ctx.checkpoints.task_finished(),
            )
            st.note(tasks=",".join(f"{o.id}:{o.status.value}" for o in outcomes.values()))
        turn.timings["execution"] = st.seconds
        return Answer(plan, outcomes)


@dataclass(frozen=True, slots=True)
class Answer:
    """Stage 4: the answer from the plan and its results (streamed), or
    the fallback built from them."""

    plan: Sequence[PlannedTask]
    outcomes: dict[int, TaskOutcome]

    async def run(self, ctx: StepContext) -> Step | End:
        turn, outcomes = ctx.turn, self.outcomes
        records = tuple(record(outcomes[t.id], t) for t in self.plan if t.id in outcomes)
        with telemetry.stage("answer") as st:
            written = await answer(ctx.deps, turn, records, states(outcomes), ctx.emit)
            st.note(fallback=written.fallback)
        turn.timings["response"] = st.seconds
        # A fallback answer is marked so callers can tell the answer stage failed.
        status = ReplyStatus.FALLBACK if written.fallback else ReplyStatus.ANSWERED
        reply = reply_of(turn, written.text, records, status=status)
        if written.reason is not None:  # why the answer is the fallback, as data
            why = written.reason
            reply = replace(reply, error_code=str(why.code), error_fields=dict(why.fields))
        return End(reply)


Step = Start | Plan | Approved | SelectAndExecute | Execute | Answer


async def run_steps(ctx: StepContext, step: Step | End) -> Reply:
    """Run each step until one ends the turn."""
    while not isinstance(step, End):
        step = await step.run(ctx)
    return step.reply


# --- a turn, start (or resume) to end --------------------------------------------


async def complete_turn(deps: Deps, request: Request, emit: EventSink, job: Job | None) -> Reply:
    """One request, from its job's checkpoint when it has one, to its saved
    turn.  Never raises for user-caused or upstream failures: the reply's
    status says how it ended."""
    state = load_state(job.checkpoint if job else None, deps.media)
    if state.reply is not None:
        # Saved before the last process stopped: only the posting is left.
        log.info("request %s: resumed with its answer saved already", request.request_id)
        return state.reply
    turn = Turn(request, state)
    t0 = deps.clock.monotonic()
    try:
        reply = await _checked(deps, turn, emit, job)
    except InputRejected as e:
        log.warning("request %s refused: %s", request.request_id, e)
        reply = reply_of(turn, str(e), status=ReplyStatus.REFUSED).with_error(e)
    except RunFailed as e:
        log.warning("request %s failed: %s", request.request_id, e)
        reply = reply_of(turn, str(e), status=ReplyStatus.FAILED).with_error(e)
    except StoreUnavailable as e:
        log.error("request %s: store unavailable: %s", request.request_id, e)
        down = RunFailed(ErrorCode.STORE_DOWN)
        reply = reply_of(turn, str(down), status=ReplyStatus.FAILED).with_error(down)
    except Exception:
        log.exception("request %s crashed", request.request_id)
        crashed = RunFailed(ErrorCode.CRASHED, request=request.request_id)
        reply = reply_of(turn, str(crashed), status=ReplyStatus.FAILED).with_error(crashed)
    turn.timings["total"] = round(deps.clock.monotonic() - t0, 3)
    reply = replace(reply, timings=Timings.of(turn.timings))
    reply = await persist(deps, turn, reply, job, with_usage=True)
    log.info(
        "request %s done in %.2fs: %d tasks, %d llm calls, %s",
        request.request_id,
        turn.timings["total"],
        len(reply.tasks),
        reply.usage.llm_calls,
        reply.status,
    )
    return reply


async def _checked(deps: Deps, turn: Turn, emit: EventSink, job: Job | None) -> Reply:
    """The steps, with the server's settings, after the request's checks
    (a resumed request passed them, and was counted, before); this
    attempt's LLM tokens charged to its quotas whatever happens."""
    turn.settings = ts = await settings_for(deps, turn.request)
    if not turn.state.started:
        await check_request(deps, turn.request, ts)
    earlier = replace(turn.state.usage)  # charged by the process that spent it
    try:
        with deps.llm.using(ts.llm_model):
            ctx = StepContext(deps, turn, emit, CheckpointWriter(job, turn.state, deps.media))
            return await run_steps(ctx, Start())
    finally:
        spent = turn.usage
        await charge(
            deps,
            turn.request,
            Usage(
                spent.llm_calls - earlier.llm_calls,
                spent.prompt_tokens - earlier.prompt_tokens,
                spent.completion_tokens - earlier.completion_tokens,
            ),
            ts,
        )


# --- helpers of the steps ----------------------------------------------------------


async def _select_and_execute(ctx: StepContext, plan: list[PlannedTask]) -> dict[int, TaskOutcome]:
    deps, turn, emit = ctx.deps, ctx.turn, ctx.emit
    req = turn.request
    found = candidates(deps, plan, turn.settings)
    guesses = first_guesses(plan, found)
    await emit(StageStarted(Stage.SELECTING, planned=len(plan)))
    chosen: dict[int, Selection] = {}
    mode = selection_mode(deps, turn.settings)
    # Every task starts now on its guess: one that finishes within the delay
    # keeps it whatever the LLM would say, so the LLM is asked only if one
    # still runs then (a plan with dependents asks at once: their choice
    # must be there before they start).
    delay = deps.config.selection_delay if mode == "llm" and not any(t.dep for t in plan) else 0

    async def choose() -> Assignment:
        timer: telemetry.StageTimer | None = None
        try:
            if delay > 0:
                await deps.clock.sleep(delay)
            with telemetry.stage("selection") as timer:
                async with llm_stage(deps, Stage.SELECTING, emit):
                    chosen.update(await select(deps, req, plan, turn.usage, found, turn.settings))
                timer.note(
                    models=",".join(f"{i}:{s.model.id}" for i, s in sorted(chosen.items()))
                    or "none"
                )
        except asyncio.CancelledError:
            log.info(
                "request %s: every task finished on its first candidate; selection %s",
                req.request_id,
                "cancelled" if timer is not None else "not asked",
            )
            raise
        finally:
            if timer is not None:
                turn.timings["selection"] = timer.seconds
        reasons = {k: v.reason for k, v in chosen.items()}
        return Assignment(ordered(found, chosen), reasons)

    async def in_force(final: Assignment) -> None:
        """The models in force (chosen, or guesses that finished first), with the plan."""
        selections: dict[int, Selection] = {}
        for i, models in final.candidates.items():
            if models:
                pick = chosen.get(i)
                by_llm = pick is not None and pick.by_llm and pick.model.id == models[0].id
                selections[i] = Selection(models[0], final.reasons.get(i, ""), by_llm)
        turn.state.plan = list(plan)
        turn.state.select(selections)
        await ctx.checkpoints.save()

    return await execute(
        deps,
        turn,
        plan,
        found,
        emit,
        reasons={k: v.reason for k, v in guesses.items()},
        choice=choose(),
        on_chosen=in_force,
        on_finished=ctx.checkpoints.task_finished(),
    )
