"""Stage 3: run the task graph.

Each task starts the moment its dependencies' results are known; a
request's independent tasks all run at once, up to ``max_parallel`` per
request (the width of the graph, bounded).  The process-wide limit
``concurrency`` applies to local inference only (a backend named ``local``:
pipelines on this machine's CPU/GPU); hosted calls are I/O and are not
queued behind other requests.  ``<resource>-N`` in an argument becomes task
N's output of the modality that argument needs (:mod:`core.inputs`).  A failed call is retried
once on the next candidate model (and, in hybrid mode, on the other backend
first); a task that still fails marks its dependents skipped with a reason
while the rest of the graph completes.

Speculation: while the model choice is still being made (``choice``), every
task runs on its first candidate (the guess).  A guess that finishes
successfully before the choice arrives is kept, whatever the choice says;
the choice redirects only what has not finished: a task not started yet
starts on the chosen model, one still running on another model is stopped
and run again on the chosen one.  A guess that fails waits for the choice,
which decides the model to fall back on; its dependents wait with it.  So a
result, once its dependents may read it, is never replaced, and nothing
downstream ever runs twice.  When every task has finished before the
choice arrives, the choice is cancelled (the guesses stand).  The models in
force are handed to ``on_chosen`` and only then is any task *committed*
(its files stored, ``on_finished`` told), so a stopped run leaves no file
and no record.  The same model on the same inputs in one conversation is
answered from :class:`ResultCache` when one is given.

What the plan's outputs will need (codecs, the drawing library) starts
loading in a thread the moment the plan is handed over (:mod:`core.warmup`),
so a fresh process does not load it between one task's result and the next
task's call; only results with boxes or masks to draw go to a thread to be
drawn (:func:`core.postprocess.draws`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Literal

from core import telemetry
from core.catalog import ModelInfo
from core.errors import TaskCode, TaskFailed
from core.experts.base import Expert, LooksUpAhead, Prepares
from core.inputs import REF, HandleLoader, resolve_inputs
from core.outputs import check_output_async
from core.planning import PlannedTask
from core.postprocess import deliverable, draws, enrich
from core.result_cache import Cached, ResultCache
from core.results import TaskInputs, TaskResult
from core.routing import ExpertRouter
from core.tasks import AUDIO, TEXT, VIDEO, TaskTimeouts
from core.threads import work
from core.types import TaskError, TaskState, TaskStatus, terse_errors
from core.warmup import PROCESS, Warmups

log = logging.getLogger(__name__)

LOCAL = "local"  # the name of the backend that runs on this machine (core.experts.local)

StateListener = Callable[[tuple[TaskState, ...]], Awaitable[None]]
# Told of the models in force once the choice is known, before any task is committed.
ChoiceListener = Callable[["Assignment"], Awaitable[None]]
# How a run of a task on its models ended: "final" when no other model would do better.
Tried = Literal["done", "failed", "final"]
# Stores a finished task's media and returns the result with blobs named by handle.
ResultSaver = Callable[["TaskOutcome"], Awaitable[TaskResult]]
# Told of each task that ran to an end (done or failed): a checkpoint.
OutcomeListener = Callable[["TaskOutcome"], Awaitable[None]]


@dataclass(slots=True)
class TaskOutcome:
    id: int
    task: str
    status: TaskStatus = TaskStatus.PENDING
    model: ModelInfo | None = None
    reason: str | None = None
    backend: str | None = None
    started: datetime | None = None
    ended: datetime | None = None
    error: str | None = None  # the terse form of errors (older checkpoints: a sentence)
    result: TaskResult | None = None
    args: dict[str, str] = field(default_factory=dict)  # args after substitution (text)
    attempts: list[str] = field(default_factory=list)
    errors: tuple[TaskError, ...] = ()  # why it failed or was skipped (each model tried)

    def state(self) -> TaskState:
        model = self.model.id if self.model else None
        return TaskState(self.id, self.task, model, self.status, self.error, self.errors)

    def fail(self, status: TaskStatus, errors: Sequence[TaskError]) -> None:
        """Mark this task failed or skipped, for ``errors``."""
        self.status, self.errors = status, tuple(errors)
        self.error = terse_errors(self.errors)

    def succeed(self) -> None:
        self.status, self.error, self.errors = TaskStatus.DONE, None, ()


@dataclass(frozen=True, slots=True)
class Assignment:
    """The models each task runs on, the chosen one first, and why it was chosen."""

    candidates: Mapping[int, Sequence[ModelInfo]]
    reasons: Mapping[int, str] = field(default_factory=dict)


def _now() -> datetime:
    return datetime.now(UTC)


class Executor:
    """Runs task graphs; one per agent, shared by its requests.

    ``concurrency``: local inference calls at once in this process (they
    share its CPU/GPU).  ``max_parallel``: tasks of one request running at
    once.  ``cache``: results reused within a conversation (``scope``)."""

    def __init__(
        self,
        router: ExpertRouter,
        *,
        concurrency: int = 4,
        max_parallel: int = 8,
        timeouts: TaskTimeouts | None = None,
        attempts: int = 2,
        cache: ResultCache | None = None,
        warmups: Warmups = PROCESS,
    ) -> None:
        self.router = router
        self.warmups = warmups
        self.timeouts = timeouts or TaskTimeouts()
        self.attempts = max(1, attempts)
        self.max_parallel = max(1, max_parallel)
        self.cache = cache
        self._local = asyncio.Semaphore(max(1, concurrency))

    def prepare(self) -> None:
        """A request is coming: the backends start building, in the
        background, what their first call would build on its critical path."""
        for backend in (self.router.remote, self.router.local):
            if isinstance(backend, Prepares):
                backend.prepare()

    def look_up_ahead(self, task: str, model: ModelInfo) -> None:
        """``task`` will run on ``model``: the backends that serve it and
        look something up before a call start looking it up (returns at once)."""
        for backend in self.router.backends_for(task, model):
            if isinstance(backend, LooksUpAhead):
                backend.look_up_ahead(task, model)

    async def run(
        self,
        plan: Sequence[PlannedTask],
        candidates: Mapping[int, Sequence[ModelInfo]],
        *,
        load_handle: HandleLoader,
        listener: StateListener | None = None,
        reasons: Mapping[int, str] | None = None,
        save_result: ResultSaver | None = None,
        finished_before: Mapping[int, TaskOutcome] | None = None,
        on_finished: OutcomeListener | None = None,
        choice: Awaitable[Assignment] | None = None,
        on_chosen: ChoiceListener | None = None,
        scope: str | None = None,
    ) -> dict[int, TaskOutcome]:
        """Run ``plan``; ``candidates[id]`` lists the chosen model first.

        ``finished_before``: outcomes of tasks a previous run finished (a
        resumed request): they are not run again, their results feed their
        dependents.  ``on_finished`` is awaited with each task that ran to an
        end here (done or failed), once its result is saved (a checkpoint).
        ``choice``: the final models, still being chosen; meanwhile tasks run
        on ``candidates`` (see the module doc), and ``reasons`` are what a
        guess that finishes first keeps.  ``on_chosen`` is awaited with the
        models in force (each task's first: the one its result came from or
        will be run on first) and their reasons once the choice is known or
        cancelled, before any task is committed.  ``scope``: the
        conversation, for the result cache (None: no reuse)."""
        # What these tasks' outputs need loaded (codecs, drawing), loaded in a
        # thread while the first calls run, not after them (core.warmup).
        self.warmups.for_tasks(t.task for t in plan if t.id not in (finished_before or {}))
        # Each task's first model's look-ups (the Hub's provider mapping) start
        # now, not after the tasks it waits for have run.
        for t in plan:
            if t.id not in (finished_before or {}) and candidates.get(t.id):
                self.look_up_ahead(t.task, candidates[t.id][0])
        graph = _Graph(
            self,
            plan,
            candidates,
            load_handle=load_handle,
            listener=listener,
            reasons=reasons,
            save_result=save_result,
            finished_before=finished_before,
            on_finished=on_finished,
            on_chosen=on_chosen,
            scope=scope,
        )
        return await graph.run(choice)

    @contextlib.asynccontextmanager
    async def _gate(self, backend: Expert) -> AsyncIterator[None]:
        """The process-wide limit, for local inference only (hosted calls are I/O)."""
        if backend.name != LOCAL:
            yield
            return
        async with self._local:
            yield

    async def _attempt(
        self,
        t: PlannedTask,
        attempts: Sequence[tuple[ModelInfo, Sequence[Expert]]],
        inputs: TaskInputs,
        out: TaskOutcome,
        errors: list[TaskError],
        *,
        started: Callable[[], Awaitable[None]],
        scope: str | None,
    ) -> Tried:
        """Run ``t`` on ``attempts`` (a model and the backends that serve it,
        from :meth:`_plan_attempts`) in order until one succeeds; what fails
        is added to ``errors``."""
        timeout = self.timeouts.for_task(t.task)
        cache = self.cache if scope is not None else None
        for model, backends in attempts:
            key = await cache.key(scope, t.task, model.id, inputs) if cache and scope else None
            hit = cache.get(key) if cache else None
            if hit is not None:
                await started()
                log.info("task %s (%s): reused %s's earlier result", t.id, t.task, model.id)
                out.model, out.backend, out.result = model, hit.backend, hit.result
                out.attempts.append(f"cache:{model.id}")
                out.succeed()
                return "done"
            if not backends:
                errors.append(TaskError(TaskCode.NO_BACKEND, {"model": model.id}))
                continue
            for backend in backends:
                out.model = model
                out.backend = backend.name
                out.attempts.append(f"{backend.name}:{model.id}")
                final = False
                try:
                    async with self._gate(backend):
                        await started()
                        with telemetry.model_call(t.task, model.id, provider=backend.name):
                            async with asyncio.timeout(timeout):
                                result = await backend.run(t.task, model, inputs)
                            # A 200 with an error page, or audio that is a picture, is a failure.
                            await check_output_async(t.task, model.id, result)
                    out.result = (  # boxes and masks are drawn on the input image
                        await work(enrich, t.task, inputs, result)
                        if draws(t.task, inputs, result)
                        else result
                    )
                    out.succeed()
                    if cache:
                        cache.put(key, Cached(out.result, model.id, backend.name))
                    return "done"
                except TimeoutError:
                    error = TaskError(TaskCode.TIMED_OUT, {"model": model.id, "seconds": timeout})
                except TaskFailed as e:
                    error = TaskError.of(e)
                    final = e.final  # the input or the account is at fault
                except Exception as e:  # an expert bug must not sink the graph
                    log.exception("expert %s crashed on %s", backend.name, t.task)
                    crash = {"model": model.id, "cause": type(e).__name__}
                    error = TaskError(TaskCode.EXPERT_CRASHED, crash)
                log.warning("task %s (%s) attempt failed: %s", t.id, t.task, error)
                errors.append(error)
                if final:
                    return "final"
        return "failed"

    def _plan_attempts(
        self, task: str, models: list[ModelInfo]
    ) -> list[tuple[ModelInfo, list[Expert]]]:
        """The chosen model on each backend that can serve it (hybrid: local
        first, then remote), then the next candidates.  In hybrid mode the
        next candidate is, when possible, one the other side can serve, so a
        failing side falls back to the other rather than failing again."""
        first = models[0]
        plan = [(first, self.router.backends_for(task, first))]
        used = {b.name for b in plan[0][1]}
        rest = models[1:]
        while rest and len(plan) < self.attempts:
            pick = rest[0]
            if self.router.mode == "hybrid":
                pick = next(
                    (
                        m
                        for m in rest
                        if any(b.name not in used for b in self.router.backends_for(task, m))
                    ),
                    rest[0],
                )
            rest.remove(pick)
            backends = self.router.backends_for(task, pick)
            used |= {b.name for b in backends}
            plan.append((pick, backends))
        return plan


class _Graph:
    """One run of one request's graph: its outcomes, the events tasks wait
    on, and the tasks running it.  ``ready[id]`` is set once a task's result
    (or failure) is final, ``committed[id]`` once it is stored and reported.
    ``decided`` is set once the models are final, ``confirmed`` once they
    are recorded (``on_chosen``)."""

    def __init__(
        self,
        ex: Executor,
        plan: Sequence[PlannedTask],
        candidates: Mapping[int, Sequence[ModelInfo]],
        *,
        load_handle: HandleLoader,
        listener: StateListener | None,
        reasons: Mapping[int, str] | None,
        save_result: ResultSaver | None,
        finished_before: Mapping[int, TaskOutcome] | None,
        on_finished: OutcomeListener | None,
        on_chosen: ChoiceListener | None,
        scope: str | None,
    ) -> None:
        self.ex = ex
        self.plan = list(plan)
        self.by_id = {t.id: t for t in self.plan}
        self.load_handle = load_handle
        self.listener = listener
        self.save_result = save_result
        self.on_finished = on_finished
        self.on_chosen = on_chosen
        self.scope = scope
        self.models = {t.id: list(candidates.get(t.id) or ()) for t in self.plan}
        self.reasons = dict(reasons or {})
        self.earlier = {k: v for k, v in (finished_before or {}).items() if k in self.by_id}
        self.outcomes = {t.id: self.earlier.get(t.id) or self._fresh(t) for t in self.plan}
        self.ready = {t.id: asyncio.Event() for t in self.plan}
        self.committed = {t.id: asyncio.Event() for t in self.plan}
        for k in self.earlier:  # finished by an earlier run of this request
            self.ready[k].set()
            self.committed[k].set()
        self.decided = asyncio.Event()  # the models are final
        self.confirmed = asyncio.Event()  # ... and recorded: results may be committed
        self.slots = asyncio.Semaphore(ex.max_parallel)
        self.notes: dict[int, str] = {}  # attempts that failed before the one that worked
        self.running: dict[int, asyncio.Task[None]] = {}
        self.guessing: dict[int, str] = {}  # task → the model its guess is running on
        self._asking: asyncio.Future[Assignment] | None = None
        self._tg: asyncio.TaskGroup | None = None

    def _fresh(self, t: PlannedTask) -> TaskOutcome:
        return TaskOutcome(t.id, t.task, model=next(iter(self.models[t.id]), None))

    async def run(self, choice: Awaitable[Assignment] | None) -> dict[int, TaskOutcome]:
        if choice is None:
            self.decided.set()
            self.confirmed.set()
        else:
            self._asking = asyncio.ensure_future(choice)
        try:
            async with asyncio.TaskGroup() as tg:
                self._tg = tg
                if self._asking is not None:
                    tg.create_task(self._choose(self._asking), name="model-choice")
                for t in self.plan:
                    if t.id not in self.earlier:
                        self._spawn(t)
        except BaseExceptionGroup as group:  # one failure: raise it as itself
            if len(group.exceptions) == 1:
                raise group.exceptions[0] from None
            raise
        finally:  # stopped before the choice was waited for: stop making it
            if self._asking is not None and not self._asking.done():
                self._asking.cancel()
        return self.outcomes

    def _spawn(self, t: PlannedTask) -> None:
        assert self._tg is not None
        out = self.outcomes[t.id]
        self.running[t.id] = self._tg.create_task(self._one(t, out), name=f"task-{t.id}-{t.task}")

    async def _notify(self) -> None:
        if self.listener is not None:
            try:
                await self.listener(tuple(self.outcomes[t.id].state() for t in self.plan))
            except Exception:  # a broken renderer must not break the run
                log.exception("progress listener failed")

    async def _one(self, t: PlannedTask, out: TaskOutcome) -> None:
        ran = await self._work(t, out)
        self.ready[t.id].set()
        await self._notify()
        self._settle_early()
        await self.confirmed.wait()  # nothing is stored or reported before the models are final
        for d in t.dep:
            await self.committed[d].wait()
        out.reason = self._reason(t.id)
        if ran:
            if out.result is not None and any(b.kind in (AUDIO, VIDEO) for b in out.result.media):
                # re-encoded for people as it is stored (later tasks had the model's own)
                out.result = await work(deliverable, out.result)
            if out.status is TaskStatus.DONE and self.save_result is not None:
                out.result = await self.save_result(out)
            if self.on_finished is not None:
                await self.on_finished(out)
        self.committed[t.id].set()

    async def _work(self, t: PlannedTask, out: TaskOutcome) -> bool:
        """Run ``t`` once its dependencies are ready; False when it did not
        get as far as a model (skipped, no model, unusable inputs).  Before
        the choice, only the guess runs; if it fails, the rest waits for
        the choice."""
        for d in t.dep:
            await self.ready[d].wait()
        bad = [d for d in t.dep if self.outcomes[d].status is not TaskStatus.DONE]
        if bad:
            failed = {"dependency": bad[0], "task": self.outcomes[bad[0]].task}
            out.fail(TaskStatus.SKIPPED, [TaskError(TaskCode.SKIPPED, failed)])
            return False
        if not self.models[t.id]:
            out.fail(TaskStatus.FAILED, [TaskError(TaskCode.NO_MODEL)])
            return False
        for n in self._handles_needed(t):  # a file's handle exists once it is stored
            await self.committed[n].wait()
        try:
            inputs, out.args = await resolve_inputs(t, self.outcomes, self.load_handle)
        except TaskFailed as e:
            out.fail(TaskStatus.FAILED, [TaskError.of(e)])
            return False

        async def started() -> None:
            if out.started is None:
                out.status = TaskStatus.RUNNING
                out.started = _now()
                await self._notify()

        errors: list[TaskError] = []
        tried: set[str] = set()
        result: Tried = "failed"
        while True:
            async with self.slots:
                guess = not self.decided.is_set()
                attempts = [
                    (m, b)
                    for m, b in self.ex._plan_attempts(t.task, self.models[t.id])
                    if m.id not in tried
                ][: 1 if guess else None]
                if not attempts:
                    break
                tried.update(m.id for m, _ in attempts)
                if guess:
                    self.guessing[t.id] = attempts[0][0].id
                try:
                    result = await self.ex._attempt(
                        t, attempts, inputs, out, errors, started=started, scope=self.scope
                    )
                finally:
                    self.guessing.pop(t.id, None)
                out.ended = _now()
            if result != "failed" or not guess:
                break
            await self.decided.wait()  # a failed guess: the choice decides the fallback
        if result == "done":
            if errors:
                self.notes[t.id] = "; ".join(map(str, errors))
        else:
            out.fail(TaskStatus.FAILED, errors or [TaskError(TaskCode.NO_MODEL_RAN)])
        return True

    def _handles_needed(self, t: PlannedTask) -> list[int]:
        """Tasks whose output a text argument names by its file handle."""
        refs = {int(n) for n in REF.findall(t.args.get(TEXT, ""))}
        return [
            n
            for n in sorted(refs)
            if n in self.outcomes
            and (r := self.outcomes[n].result) is not None
            and r.media
            and not r.as_text()
        ]

    def _reason(self, task_id: int) -> str | None:
        why, note = self.reasons.get(task_id), self.notes.get(task_id)
        if not note:
            return why
        return f"{why or ''} (after: {note})".strip()

    def _settle_early(self) -> None:
        """Every task finished before the choice: no choice can change a
        thing, so stop making it (the guesses stand)."""
        asking = self._asking
        if asking is None or asking.done() or self.decided.is_set():
            return
        if all(e.is_set() for e in self.ready.values()):
            log.info("every task finished on its first candidate: the model choice is cancelled")
            asking.cancel()

    async def _choose(self, asking: asyncio.Future[Assignment]) -> None:
        """Wait for the final models (or cancel the choice, see
        :meth:`_settle_early`), then redirect what has not finished."""
        try:
            await asyncio.wait([asking])
        finally:
            if not asking.done():  # this run is being stopped
                asking.cancel()
                await asyncio.wait([asking])
        # Cancelled: every task finished on its guess, which stands.
        final = None if asking.cancelled() else asking.result()
        restart: list[int] = []
        for t in self.plan:
            i, out = t.id, self.outcomes[t.id]
            if i in self.earlier or final is None:
                continue
            chosen = list(final.candidates.get(i) or ())
            same = bool(chosen) and out.model is not None and chosen[0].id == out.model.id
            if self.ready[i].is_set() and not same:
                continue  # finished before the choice: kept, with the guess's reason
            self.models[i] = chosen
            if i in final.reasons:
                self.reasons[i] = final.reasons[i]
            if chosen and not same:  # a model of the choice, not the guess: look it up now
                self.ex.look_up_ahead(t.task, chosen[0])
            running_on = self.guessing.get(i)
            if running_on is not None and (not chosen or chosen[0].id != running_on):
                restart.append(i)
        stale = [self.running[i] for i in restart]
        for task in stale:
            task.cancel()
        if stale:
            await asyncio.wait(stale)
        for i in restart:
            self.outcomes[i] = self._fresh(self.by_id[i])
            self.notes.pop(i, None)
            self._spawn(self.by_id[i])
        if restart:
            log.info("model choice: tasks %s stopped and run on the chosen models", restart)
        self.decided.set()
        if self.on_chosen is not None:
            await self.on_chosen(
                Assignment(
                    {i: self._in_force(i) for i in self.by_id},
                    {i: why for i in self.by_id if (why := self.reasons.get(i)) is not None},
                )
            )
        self.confirmed.set()
        await self._notify()

    def _in_force(self, task_id: int) -> list[ModelInfo]:
        """The task's models, the one that made its result first when it has one."""
        models = self.models[task_id]
        used = self.outcomes[task_id].model
        if used is None or not self.ready[task_id].is_set():
            return list(models)
        return [used, *(m for m in models if m.id != used.id)]


def with_handles(result: TaskResult, handles: Sequence[str]) -> TaskResult:
    """The result with its media blobs named by their stored handles."""
    media = (
        tuple(replace(b, handle=h) for b, h in zip(result.media, handles, strict=False))
        + result.media[len(handles) :]
    )
    return replace(result, media=media)
