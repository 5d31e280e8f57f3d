"""The HuggingGPT agent: planning → model selection → execution → response.

``Agent.run`` is the one entry point every adapter uses: the request's typed
events, then its reply (see :mod:`core.run`).  It never raises for
user-caused or upstream failures: a dead LLM, a bad attachment or a store
that went away all end in a ``Reply`` whose ``status`` says so, with a
message fit for the user, plus a log line with the request id.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import weakref
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Sequence
from dataclasses import replace
from typing import Any

from core import telemetry
from core.catalog import Catalog, ModelInfo
from core.clock import SYSTEM_CLOCK, Clock
from core.config import AgentConfig
from core.errors import (
    ErrorCode,
    InputRejected,
    PlanError,
    RunFailed,
    StoreConflict,
    StoreRejected,
    StoreUnavailable,
    TaskFailed,
    wording,
)
from core.execution import Assignment, Executor, TaskOutcome, with_handles
from core.jobs import Outcome, TurnQueue
from core.llm import LLM, Deadline
from core.mediatypes import inspect_attachment, sniff
from core.planner import PlanAsk, make_plan
from core.planning import RETRY_HINT, PlannedTask, check_plan
from core.ratelimit import QuotaLimiter, Quotas
from core.response import Answer, answer_cap, fallback_answer, generate_response
from core.result_cache import ResultCache
from core.results import Blob, TaskResult
from core.routing import ExpertRouter
from core.run import AgentRun, InFlight, run_to_end
from core.selection import Selection, first_guesses, select_models
from core.server_settings import ServerKey, ServerSettingsService, TurnSettings, apply_settings
from core.store.handles import allocate_handle
from core.store.jobs import Accepted, JobFence, JobStore
from core.store.media import MediaStore
from core.store.quotas import QuotaStore
from core.store.repo import History, Repo, TurnRecord
from core.store.server_settings import ServerSettingsStore
from core.store.usage import UsageStore
from core.tasks import canonical_task
from core.turn import Turn, chat_log, record, states
from core.turn_state import TurnState, dump_state, load_state
from core.types import (
    AnswerDelta,
    AnswerDiscarded,
    ConversationKey,
    DiscardReason,
    EventSink,
    Job,
    JobRunner,
    ModelChoice,
    PastRequest,
    PlannedStep,
    PlanNote,
    PlanPreview,
    QueuePosition,
    Reply,
    ReplyStatus,
    Request,
    Resource,
    Stage,
    StageStarted,
    StillWaiting,
    TaskRecord,
    TasksChanged,
    TaskState,
    Timings,
    Usage,
    UsageLine,
    UsageReport,
)
from core.usage import (
    Caller,
    GroupBy,
    TurnUsage,
    UsageTotals,
    parse_since,
    provider_resolver,
    turn_usage,
)

log = logging.getLogger(__name__)

PREVIEW_KIND = "plan-preview"  # a /plan preview, kept as a job that never runs
# Of a message refused for its length, the characters stored (see _as_stored).
REFUSED_KEPT_CHARS = 1_000
# Seconds the planning call may take before every warm-up starts meanwhile.
WARM_WHILE_PLANNING_AFTER = 0.1


class Agent:
    def __init__(
        self,
        *,
        llm: LLM,
        catalog: Catalog,
        router: ExpertRouter,
        repo: Repo,
        media: MediaStore,
        config: AgentConfig | None = None,
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        self.llm = llm
        self.catalog = catalog
        self.router = router
        self.repo = repo
        self.media = media
        self.config = config or AgentConfig()
        self.clock = clock  # quota windows, job leases, the settings cache
        self.limiter = QuotaLimiter(QuotaStore(repo.db), quotas(self.config), clock=clock)
        # Usage per user, channel and server (/usage), and per-server settings (/config).
        self.usage_store = UsageStore(repo.db)
        self.server_settings = ServerSettingsService(
            ServerSettingsStore(repo.db), catalog=catalog, clock=clock
        )
        self._provider_of = provider_resolver(catalog)
        self.executor = Executor(
            router,
            concurrency=self.config.concurrency,
            max_parallel=self.config.max_parallel_tasks,
            timeouts=self.config.task_timeouts,
            cache=ResultCache(
                max_entries=self.config.result_cache_entries,
                max_bytes=self.config.result_cache_bytes,
            ),
        )
        # Shutdown: stop taking requests, let the running ones finish (drain).
        self._closing = False
        self._inflight = InFlight()
        # Accepted requests, as durable jobs: ordered per conversation across
        # processes, at most max_inflight_requests at once here, resumed after a crash.
        self.jobs = TurnQueue(
            JobStore(repo),
            max_inflight=self.config.max_inflight_requests,
            max_upload_bytes=self.config.max_inflight_upload_bytes,
            lease=self.config.job_lease_seconds,
            poll=self.config.job_poll_seconds,
            clock=clock,
        )
        self._llm_asked: asyncio.Task[int | None] | None = None  # see _ask_llm_ahead
        # One turn at a time per conversation, so handles and history stay ordered.
        self._locks: weakref.WeakValueDictionary[ConversationKey, asyncio.Lock] = (
            weakref.WeakValueDictionary()
        )

    # ------------------------------------------------------------------ API
    def run(self, request: Request, *, job: Job | None = None) -> AgentRun:
        """``async with agent.run(request) as run: async for event in run: …``
        then ``run.reply`` (see :mod:`core.run`)."""
        return AgentRun(
            request.request_id, lambda emit: self._serve(request, emit, job), self._inflight
        )

    async def handle(
        self, request: Request, events: EventSink | None = None, job: Job | None = None
    ) -> Reply:
        """:meth:`run` to the end, handing each event to ``events``."""
        return await run_to_end(self.run(request, job=job), events)

    async def _serve(self, request: Request, emit: EventSink, job: Job | None) -> Reply:
        # Shutting down: a new request is refused (kept in the history); a job
        # was claimed before the shutdown began, so it runs.
        with telemetry.turn(request) as scope:
            if job is None and self._closing:
                turn = Turn(request)
                log.info("request %s refused: shutting down", request.request_id)
                refused = wording(ErrorCode.SHUTTING_DOWN)
                reply = self._reply(turn, refused, (), status=ReplyStatus.REFUSED)
                reply = await self._persist(turn, reply)
            else:
                reply = await self._turn(request, emit, job)
            scope.finish(reply)
            return reply

    # Durable turns (core.jobs): adapters accept, then process; runners run.
    def register_runner(self, kind: str, runner: JobRunner) -> None:
        self.jobs.register(kind, runner)

    async def accept(
        self,
        kind: str,
        conversation: ConversationKey,
        payload: dict[str, Any],
        *,
        request_id: str,
        dedup: str | None = None,
        upload_bytes: int = 0,
    ) -> Accepted:
        return await self.jobs.accept(
            kind,
            conversation,
            payload,
            request_id=request_id,
            dedup=dedup,
            upload_bytes=upload_bytes,
        )

    async def process(self, job_id: int) -> Outcome:
        return await self.jobs.process(job_id)

    def begin_shutdown(self) -> int:
        """Refuse new requests from now on (accepted ones are handed on to the
        next process); returns how many are still running."""
        self._closing = True
        return max(self._inflight.count, self.jobs.begin_shutdown())

    async def drain(self, grace: float) -> bool:
        """Wait until no request is running (True), or ``grace`` seconds passed (False)."""
        try:
            async with asyncio.timeout(grace):
                await self.jobs.drain(grace)
                await self._inflight.wait_idle()
        except TimeoutError:
            return False
        return True

    async def interrupt(self) -> int:
        """After the grace period: stop the requests still running, tell their
        people the bot is restarting and will finish them, and release them
        for the next process.  Returns how many."""
        return await self.jobs.interrupt()

    @contextlib.contextmanager
    def _warm_while_planning(self) -> Iterator[None]:
        """A planner still thinking after :data:`WARM_WHILE_PLANNING_AFTER`
        leaves this process idle: use it to load what any task's output may
        need (core.warmup), which a plan known only later could not load in
        time for a task of its first wave.  A planner that answers sooner
        (a local server, a cache) costs nothing: the plan's own kinds load
        when it is handed over."""
        later = asyncio.get_running_loop().call_later(
            WARM_WHILE_PLANNING_AFTER, self.executor.warmups.all
        )
        try:
            yield
        finally:
            later.cancel()

    def warm_up(self) -> None:
        """For a process that will run many requests (``run``, ``serve``):
        start loading, in the background, what any task's output needs
        (:mod:`core.warmup`), building the first hosted call's session and
        asking the LLM server its context size, so its first requests do not
        wait for them.  Returns at once."""
        self.executor.warmups.all()
        self.executor.prepare()
        self._ask_llm_ahead()

    def _ask_llm_ahead(self) -> None:
        """Ask the LLM server how large its context is (a local server: one or
        two GETs, once) in the background, while the request's files and
        history load, not in front of the first planning call, which waits
        for this one instead of asking again."""
        if self._llm_asked is None:
            self._llm_asked = asyncio.get_running_loop().create_task(
                self._llm_context(), name="llm-context-window"
            )

    async def _llm_context(self) -> int | None:
        try:
            return await self.llm.context_window()
        except Exception:  # best effort, as the probe itself: planning goes on without it
            log.debug("asking the LLM server its context size ahead failed", exc_info=True)
            return None

    async def aclose(self) -> None:
        """Release every job this process holds (the composition root calls it)."""
        await self.jobs.aclose()

    async def _turn(self, request: Request, emit: EventSink, job: Job | None = None) -> Reply:
        lock = self._locks.setdefault(request.conversation, asyncio.Lock())
        if lock.locked():
            await emit(QueuePosition(0, conversation_busy=True))
        async with lock:
            cp = load_state(job.checkpoint if job else None, self.media)
            if cp.reply is not None:
                # Saved before the last process stopped: only the posting is left.
                log.info("request %s: resumed with its answer saved already", request.request_id)
                return cp.reply
            turn = Turn(request)
            t0 = time.perf_counter()
            try:
                reply = await self._run(turn, emit, job, cp)
            except InputRejected as e:
                log.warning("request %s refused: %s", request.request_id, e)
                reply = self._reply(turn, str(e), (), status=ReplyStatus.REFUSED)
            except RunFailed as e:
                log.warning("request %s failed: %s", request.request_id, e)
                reply = self._reply(turn, str(e), (), status=ReplyStatus.FAILED)
            except StoreUnavailable as e:
                log.error("request %s: store unavailable: %s", request.request_id, e)
                reply = self._reply(
                    turn, wording(ErrorCode.STORE_DOWN), (), status=ReplyStatus.FAILED
                )
            except Exception:
                log.exception("request %s crashed", request.request_id)
                reply = self._reply(
                    turn,
                    f"Something went wrong on my side (request {request.request_id}). "
                    "The details are in the log.",
                    (),
                    status=ReplyStatus.FAILED,
                )
            turn.timings["total"] = round(time.perf_counter() - t0, 3)
            reply = replace(reply, timings=Timings.of(turn.timings))
            reply = await self._persist(turn, reply, job, cp, with_usage=True)
            log.info(
                "request %s done in %.2fs: %d tasks, %d llm calls, %s",
                request.request_id,
                turn.timings["total"],
                len(reply.tasks),
                reply.usage.llm_calls,
                reply.status,
            )
            return reply

    # ------------------------------------------------------ usage, settings
    async def usage(
        self,
        conversation: ConversationKey,
        user_id: str,
        *,
        server_wide: bool = False,
        is_admin: bool = False,
        since: str | None = None,
    ) -> UsageReport:
        if server_wide and not is_admin:
            raise InputRejected(ErrorCode.USAGE_ADMINS_ONLY)
        try:
            start = parse_since(since) if since else None
        except ValueError as e:
            raise InputRejected(ErrorCode.BAD_PERIOD, value=since or "", reason=str(e)) from None
        caller = Caller(conversation.platform, conversation.scope, user_id, is_admin)
        where = caller.filters(start)[-1 if server_wide else 0]
        turns = await self.usage_store.totals(GroupBy.SERVER, where)
        rows = await self.usage_store.totals(GroupBy.MODEL, where)
        lines = tuple(_usage_line(r) for r in rows)
        total = UsageLine(
            "total",
            llm_calls=sum(x.llm_calls for x in lines),
            prompt_tokens=sum(x.prompt_tokens for x in lines),
            completion_tokens=sum(x.completion_tokens for x in lines),
            model_calls=sum(x.model_calls for x in lines),
            model_seconds=round(sum(x.model_seconds for x in lines), 3),
            cost_usd=None
            if all(x.cost_usd is None for x in lines)
            else sum(x.cost_usd or 0.0 for x in lines),
            unpriced_calls=sum(x.unpriced_calls for x in lines),
        )
        return UsageReport(
            "server" if server_wide else "you",
            start,
            lines,
            total,
            turns=sum(r.requests for r in turns),
        )

    async def settings(self, conversation: ConversationKey) -> dict[str, str]:
        current = await self.server_settings.for_conversation(conversation)
        return _shown(current.stored())

    async def configure(
        self,
        conversation: ConversationKey,
        key: str,
        value: str | None,
        *,
        user_id: str,
        is_admin: bool,
    ) -> dict[str, str]:
        if not is_admin:
            raise InputRejected(ErrorCode.SETTINGS_ADMINS_ONLY)
        server = ServerKey.of(conversation)
        if server is None:
            raise InputRejected(ErrorCode.SETTINGS_NO_SERVER)
        if value is None:
            new = await self.server_settings.unset(server, key, by=user_id)
        else:
            new = await self.server_settings.set(server, key, value, by=user_id)
        return _shown(new.stored())

    async def _turn_settings(self, request: Request) -> TurnSettings:
        """What this turn runs with: the deployment's settings changed by its
        server's (the deployment's alone when the store cannot say)."""
        try:
            server = await self.server_settings.for_conversation(request.conversation)
        except StoreUnavailable as e:
            log.error("request %s: server settings unavailable: %s", request.request_id, e)
            server = None
        return apply_settings(
            server,
            runnable=self.router.runnable_tasks(self.catalog),
            catalog=self.catalog,
            selection="downloads" if self.config.selection == "downloads" else "llm",
            quotas=self.limiter.quotas,
            llm_model=self.llm.model,
            usable=lambda task, m: bool(self.router.usable_models(task, [m])),
        )

    def _turn_usage(self, request: Request, reply: Reply) -> TurnUsage:
        return turn_usage(
            request,
            reply.usage,
            reply.tasks,
            llm_model=self.llm.model,
            error=reply.error,
            provider_of=self._provider_of,
        )

    async def _record_usage(self, usage: TurnUsage) -> None:
        """The usage of a turn that could not be saved, in a transaction of
        its own (a saved turn's is written with it: :meth:`_persist`); a
        request recorded before is ignored.  Never fails the turn."""
        try:
            await self.usage_store.record(usage)
        except (StoreUnavailable, StoreRejected) as e:
            log.error("request %s: usage not recorded: %s", usage.request_id, e)

    async def plan_only(self, request: Request) -> PlanPreview:
        usage = Usage()
        try:
            # The same checks and quotas as a request that runs (/plan costs LLM calls too).
            ts = await self._turn_settings(request)
            await self._check_request(request, ts)
            try:
                with self.llm.using(ts.llm_model):
                    plan, selections = await self._preview(request, usage, ts)
            finally:
                await self._charge(request, usage, ts)
        except InputRejected as e:
            return PlanPreview((), usage, ReplyStatus.REFUSED, str(e))
        except RunFailed as e:
            log.warning("plan preview failed: %s", e)
            return PlanPreview((), usage, ReplyStatus.FAILED, str(e))
        except StoreUnavailable as e:
            log.error("plan preview: store unavailable: %s", e)
            return PlanPreview((), usage, ReplyStatus.FAILED, wording(ErrorCode.STORE_DOWN))
        steps = tuple(
            PlannedStep(
                t.id,
                t.task,
                tuple(t.dep),
                dict(t.args),
                selections[t.id].model.id if t.id in selections else None,
                selections[t.id].reason if t.id in selections else None,
                typical_seconds=self.config.task_timeouts.typical(t.task),
                max_seconds=self.config.task_timeouts.for_task(t.task),
            )
            for t in plan
        )
        await self._remember_preview(request, steps, usage)
        return PlanPreview(steps, usage)  # no steps: answered directly, without a model

    async def _remember_preview(
        self, request: Request, steps: tuple[PlannedStep, ...], usage: Usage
    ) -> None:
        """Keep the preview, so it can be approved and run as it is (``recall``)."""
        try:
            await self.jobs.store.remember(
                kind=PREVIEW_KIND,
                conversation=str(request.conversation),
                payload=_preview_to_json(request, steps, usage),
                request_id=request.request_id,
                now=self.jobs.now(),
            )
        except (StoreUnavailable, StoreRejected) as e:
            log.error("request %s: the plan preview was not kept: %s", request.request_id, e)

    async def recall(self, request_id: str) -> PastRequest | None:
        row = await self.jobs.store.by_request(request_id)
        if row is not None and row.kind == PREVIEW_KIND:
            return _preview_from_json(request_id, row.payload)
        asked = await self.repo.asked(request_id)
        if asked is None:
            return None
        key, user_id, text = asked
        cp = load_state(row.checkpoint if row is not None else None, self.media)
        reply = cp.reply
        ran = {t.id: t.model for t in reply.tasks} if reply is not None else {}
        steps = tuple(
            PlannedStep(
                t.id,
                t.task,
                tuple(t.dep),
                dict(t.args),
                ran.get(t.id) or (cp.selections[t.id].model if t.id in cp.selections else None),
                cp.selections[t.id].reason if t.id in cp.selections else None,
            )
            for t in cp.plan or ()
        )
        return PastRequest(
            request_id, key, user_id, text, steps, reply, reply.usage if reply else Usage()
        )

    def _approved(self, turn: Turn) -> tuple[list[PlannedTask], dict[int, Selection]]:
        """The request's approved plan, checked as a planned one is, and each
        step's model where it is still a usable candidate."""
        steps = turn.request.plan or ()
        plan = [
            PlannedTask(s.id, canonical_task(s.task) or s.task, list(s.dep), dict(s.args))
            for s in steps
        ]
        runnable = (
            list(turn.settings.runnable)
            if turn.settings
            else self.router.runnable_tasks(self.catalog)
        )
        try:
            check_plan(
                plan, handles=turn.handles(), runnable=runnable, max_tasks=self.config.max_tasks
            )
        except PlanError as e:
            why = str(e).replace(RETRY_HINT, "").strip()
            raise InputRejected(ErrorCode.PLAN_STALE, reason=why) from e
        candidates = self._candidates(plan, turn.settings)
        pinned: dict[int, Selection] = {}
        for step in steps:
            usable = {m.id: m for m in candidates.get(step.id, ())}
            if step.model in usable:
                pinned[step.id] = Selection(usable[step.model], step.reason or "", False)
        return plan, pinned

    async def _preview(
        self, request: Request, usage: Usage, ts: TurnSettings
    ) -> tuple[list[PlannedTask], dict[int, Selection]]:
        history = await self.repo.load_history(
            request.conversation, turns=self.config.history_turns
        )
        handles = {h: r.kind for h, r in history.resources.items()}
        for a in request.attachments:
            # Decoding is CPU-bound: off the event loop, like the uploads of a turn.
            checked = await asyncio.to_thread(
                inspect_attachment,
                a.name,
                a.mime,
                a.data,
                max_bytes=self.config.max_attachment_bytes,
                max_pixels=self.config.max_image_pixels,
            )
            handles[allocate_handle(set(handles), a.name)] = checked.kind
        async with self._llm_stage(Stage.PLANNING, None):
            plan = await self._plan(request, history, handles, usage, ts.runnable)
        async with self._llm_stage(Stage.SELECTING, None):
            selections = await self._select(request, plan, usage, ts=ts)
        return plan, selections

    async def forget(self, conversation: ConversationKey, user_id: str | None = None) -> int:
        return await self.repo.forget(conversation, user_id)

    def models(self, task: str | None = None) -> dict[str, list[ModelChoice]]:
        return self.router.choices(self.catalog, task, self.config.top_k)

    async def claim_event(self, source: str, event_id: str) -> bool:
        return await self.repo.claim_event(source, event_id)

    async def read_file(self, resource: Resource) -> bytes:
        return await self.repo.read(resource)

    async def fit_image(self, data: bytes, max_bytes: int) -> tuple[bytes, str] | None:
        from core.experts.images import fit_image  # numpy: not at start-up (the CLI)

        try:
            return await asyncio.to_thread(fit_image, data, max_bytes)
        except ValueError:  # not an image, or cannot be made that small
            return None

    def sniff(self, data: bytes) -> str | None:
        found = sniff(data)
        return found.mime if found is not None else None

    # ------------------------------------------------------------- stages
    async def _check_request(self, req: Request, ts: TurnSettings | None = None) -> None:
        """Refuse what no plan can use, and what is over a quota, before any
        work (and any LLM cost); a request that passes is counted."""
        if len(req.attachments) > self.config.max_attachments:
            raise InputRejected(
                ErrorCode.TOO_MANY_FILES,
                count=len(req.attachments),
                limit=self.config.max_attachments,
            )
        if len(req.text) > self.config.max_request_chars:
            raise InputRejected(
                ErrorCode.MESSAGE_TOO_LONG,
                count=len(req.text),
                limit=self.config.max_request_chars,
            )
        if not req.text.strip() and not req.attachments:
            raise InputRejected(ErrorCode.MESSAGE_EMPTY)
        await self.limiter.admit(
            req, ts.quotas if ts else None
        )  # QuotaExceeded (an InputRejected) when over

    async def _charge(self, req: Request, usage: Usage, ts: TurnSettings | None = None) -> None:
        """Add the request's LLM tokens to its quotas (never fails the request)."""
        try:
            await self.limiter.charge(req, usage, ts.quotas if ts else None)
        except StoreUnavailable as e:
            log.error("request %s: could not count its LLM tokens: %s", req.request_id, e)

    @contextlib.asynccontextmanager
    async def _llm_stage(
        self, stage: Stage, emit: EventSink | None, tasks: tuple[TaskState, ...] = ()
    ) -> AsyncIterator[_Notices]:
        """One deadline for every LLM call inside (LLM_TIMEOUT, retries and
        re-asks included) and, while they last, a :class:`StillWaiting` event
        every ``llm_wait_notice`` seconds (until the stage says it stopped
        waiting: the answer's first words arrived)."""
        with self.llm.stage() as deadline:
            every = self.config.llm_wait_notice
            notices = _Notices()
            if emit is not None and every > 0:
                notices.task = asyncio.create_task(
                    _still_waiting(stage, emit, tasks, deadline, every),
                    name=f"llm-wait-{stage.value}",
                )
            try:
                yield notices
            finally:
                notices.stop()
                if notices.task is not None:
                    await asyncio.wait([notices.task])

    async def _run(
        self,
        turn: Turn,
        emit: EventSink,
        job: Job | None = None,
        cp: TurnState | None = None,
    ) -> Reply:
        cp = cp or TurnState()
        turn.settings = ts = await self._turn_settings(turn.request)
        if not cp.started:  # a resumed request passed its checks (and was counted) before
            await self._check_request(turn.request, ts)
        earlier = replace(cp.usage)  # charged by the process that spent it
        try:
            with self.llm.using(ts.llm_model):
                return await self._stages(turn, emit, _Progress(self, job, cp))
        finally:
            spent = turn.usage
            await self._charge(
                turn.request,
                Usage(
                    spent.llm_calls - earlier.llm_calls,
                    spent.prompt_tokens - earlier.prompt_tokens,
                    spent.completion_tokens - earlier.completion_tokens,
                ),
                ts,
            )

    async def _stages(self, turn: Turn, emit: EventSink, saved: _Progress) -> Reply:
        req = turn.request
        cp = saved.cp
        self.executor.prepare()  # a first hosted call's session, built while we plan
        self._ask_llm_ahead()
        resumed = cp.started
        await emit(StageStarted(Stage.PLANNING, resumed=resumed))
        turn.history = await self.repo.load_history(
            req.conversation, turns=self.config.history_turns
        )
        if resumed:
            assert cp.uploads is not None
            turn.uploads = list(cp.uploads)
            turn.generated = list(cp.generated)
            turn.usage = cp.usage
            turn.timings.update(cp.timings)
        else:
            await turn.store_uploads(
                self.media,
                max_bytes=self.config.max_attachment_bytes,
                max_pixels=self.config.max_image_pixels,
            )
            cp.uploads = list(turn.uploads)
            await saved.save(turn)

        if cp.plan is not None:
            plan = cp.plan
            log.info("request %s resumed with its plan of %d tasks", req.request_id, len(plan))
        elif req.plan is not None:  # approved: no planning, no selection call
            plan, pinned = self._approved(turn)
            cp.plan = list(plan)
            cp.select(pinned)
            await saved.save(turn)
            log.info("request %s runs its approved plan of %d tasks", req.request_id, len(plan))
        else:
            with telemetry.stage("planning") as st:
                handles = turn.handles()
                async with self._llm_stage(Stage.PLANNING, emit):
                    runnable = turn.settings.runnable if turn.settings else None
                    with self._warm_while_planning():
                        plan = await self._plan(
                            req, turn.history, handles, turn.usage, runnable, turn.plan_notes
                        )
                st.note(tasks=len(plan))
            turn.timings["planning"] = st.seconds

        outcomes: dict[int, TaskOutcome] = {}
        if plan:
            with telemetry.stage("execution") as st:
                if cp.plan is not None:  # resumed or approved: the models chosen then
                    selections = self._restore_selections(plan, cp)
                    outcomes = await self._execute(
                        turn,
                        plan,
                        _ordered(self._candidates(plan, turn.settings), selections),
                        emit,
                        reasons={k: v.reason for k, v in selections.items()},
                        finished_before=await self._restore_outcomes(turn, cp),
                        on_finished=saved.task_finished(turn),
                    )
                else:
                    outcomes = await self._select_and_execute(turn, plan, emit, saved)
                st.note(tasks=",".join(f"{o.id}:{o.status.value}" for o in outcomes.values()))
            turn.timings["execution"] = st.seconds
        elif cp.plan is None:
            cp.plan = []
            await saved.save(turn)

        records = tuple(record(outcomes[t.id], t) for t in plan if t.id in outcomes)
        with telemetry.stage("answer") as st:
            answer = await self._answer(turn, records, states(outcomes), emit)
            st.note(fallback=answer.fallback)
        turn.timings["response"] = st.seconds
        # A fallback answer is marked so callers can tell the answer stage failed.
        status = ReplyStatus.FALLBACK if answer.fallback else ReplyStatus.ANSWERED
        return self._reply(turn, answer.text, records, status=status)

    async def _answer(
        self,
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
            async with self._llm_stage(Stage.ANSWERING, emit, tasks) as waiting:

                async def delta(text: str) -> None:
                    nonlocal streamed
                    if not streamed:
                        streamed = True
                        waiting.stop()  # the model is answering: no more "still waiting"
                    await emit(AnswerDelta(text))

                answer = await generate_response(
                    self.llm,
                    request_text=req.text,
                    chat_log=chat_log(turn.history),
                    records=records,
                    files=tuple(turn.generated),
                    usage=turn.usage,
                    max_tokens=answer_cap(self.config.answer_max_tokens, self.llm.reasons),
                    on_delta=delta,
                    instruction=turn.settings.answer_instruction() if turn.settings else None,
                )
        except RunFailed as e:
            log.warning("request %s: response stage failed: %s", req.request_id, e)
            discard = DiscardReason.BROKE_OFF
            answer = Answer(fallback_answer(records, tuple(turn.generated), str(e)), fallback=True)
        if answer.fallback and streamed:
            await emit(AnswerDiscarded(discard))
        return answer

    async def _plan(
        self,
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
        runnable = (
            list(offered) if offered is not None else self.router.runnable_tasks(self.catalog)
        )
        ask = PlanAsk(
            request_text=req.text,
            chat_log=chat_log(history),
            handles=handles,
            runnable=runnable,
            max_tasks=self.config.max_tasks,
            max_tokens=self.config.planning_max_tokens,
            needs_models=bool(req.attachments),
        )
        result = await make_plan(self.llm, ask, usage, label=f"request {req.request_id}")
        if result.llm_error is not None:
            raise result.llm_error
        plan = result.plan
        if plan is None:
            log.warning("request %s: no plan: %s", req.request_id, result.failure)
            raise RunFailed(ErrorCode.NO_PLAN, reason=result.failure or "")
        if notes is not None:
            notes.extend(result.notes)
        return plan

    async def _select_and_execute(
        self, turn: Turn, plan: Sequence[PlannedTask], emit: EventSink, saved: _Progress
    ) -> dict[int, TaskOutcome]:
        """Stages 2 and 3 at once: each task starts on its most downloaded
        candidate while the LLM chooses (one batched call, or none when no
        task has a choice).  A guess that finished first is kept; the choice
        redirects what has not finished, and when every task finished first
        the call is cancelled (:mod:`core.execution`).  The plan and the
        models in force are checkpointed together, before any task's result."""
        req = turn.request
        candidates = self._candidates(plan, turn.settings)
        guesses = first_guesses(plan, candidates)
        await emit(StageStarted(Stage.SELECTING, planned=len(plan)))
        chosen: dict[int, Selection] = {}
        mode = self._selection_mode(turn.settings)
        # Every task starts now on its guess: one that finishes within the delay
        # keeps it whatever the LLM would say, so the LLM is asked only if one
        # still runs then (a plan with dependents asks at once: their choice
        # must be there before they start).
        delay = self.config.selection_delay if mode == "llm" and not any(t.dep for t in plan) else 0

        async def choose() -> Assignment:
            timer: telemetry.StageTimer | None = None
            try:
                if delay > 0:
                    await asyncio.sleep(delay)
                with telemetry.stage("selection") as timer:
                    async with self._llm_stage(Stage.SELECTING, emit):
                        chosen.update(
                            await self._select(req, plan, turn.usage, candidates, turn.settings)
                        )
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
            return Assignment(_ordered(candidates, chosen), reasons)

        async def record(final: Assignment) -> None:
            """The models in force (chosen, or guesses that finished first), with the plan."""
            selections: dict[int, Selection] = {}
            for i, models in final.candidates.items():
                if models:
                    pick = chosen.get(i)
                    by_llm = pick is not None and pick.by_llm and pick.model.id == models[0].id
                    selections[i] = Selection(models[0], final.reasons.get(i, ""), by_llm)
            saved.cp.plan = list(plan)
            saved.cp.select(selections)
            await saved.save(turn)

        return await self._execute(
            turn,
            plan,
            candidates,
            emit,
            reasons={k: v.reason for k, v in guesses.items()},
            choice=choose(),
            on_chosen=record,
            on_finished=saved.task_finished(turn),
        )

    async def _select(
        self,
        req: Request,
        plan: Sequence[PlannedTask],
        usage: Usage,
        candidates: dict[int, list[ModelInfo]] | None = None,
        ts: TurnSettings | None = None,
    ) -> dict[int, Selection]:
        if candidates is None:
            candidates = self._candidates(plan, ts)
        mode = self._selection_mode(ts)
        return await select_models(
            self.llm,
            plan,
            candidates,
            request_text=req.text,
            usage=usage,
            mode="downloads" if mode == "downloads" else "llm",
            max_tokens=self.config.selection_max_tokens,
        )

    def _selection_mode(self, ts: TurnSettings | None) -> str:
        """``llm`` or ``downloads``: the server's setting, else the bot's."""
        return ts.selection if ts else self.config.selection

    def _candidates(
        self, plan: Sequence[PlannedTask], ts: TurnSettings | None = None
    ) -> dict[int, list[ModelInfo]]:
        """Each task's candidates: the top ``top_k`` usable models by
        downloads, or the model its server pinned for the task alone."""
        out: dict[int, list[ModelInfo]] = {}
        for t in plan:
            ranked = self.router.usable_models(t.task, self.catalog.models(t.task))[
                : self.config.top_k
            ]
            out[t.id] = ts.candidates(t.task, ranked) if ts else ranked
        return out

    def _restore_selections(
        self, plan: Sequence[PlannedTask], cp: TurnState
    ) -> dict[int, Selection]:
        """The models an earlier run chose (as the catalog describes them now)."""
        out: dict[int, Selection] = {}
        by_task = {t.id: t.task for t in plan}
        for task_id, c in cp.selections.items():
            task = by_task.get(task_id)
            if task is not None:
                out[task_id] = Selection(self._model(c.model, task), c.reason, c.by_llm)
        return out

    def _restored(self, o: TaskOutcome, data: dict[str, bytes]) -> TaskOutcome:
        """A checkpointed outcome as the executor takes it: its model as the
        catalog describes it now, its media's bytes read back."""
        model = self._model(o.model.id, o.task) if o.model else None
        result = o.result
        if result is not None and result.media:
            media = tuple(replace(b, data=data.get(b.handle or "", b"")) for b in result.media)
            result = replace(result, media=media)
        return replace(o, model=model, result=result)

    def _model(self, model_id: str, task: str) -> ModelInfo:
        return self.catalog.get(model_id, task) or ModelInfo(model_id, task)

    async def _restore_outcomes(self, turn: Turn, cp: TurnState) -> dict[int, TaskOutcome]:
        """Tasks an earlier run finished, with their stored outputs' bytes."""
        if not cp.outcomes:
            return {}
        data = {r.handle: await self.repo.read(r) for r in turn.generated}

        restored = {k: self._restored(o, data) for k, o in cp.outcomes.items()}
        log.info(
            "request %s resumed: tasks %s finished before, not run again",
            turn.request.request_id,
            sorted(restored),
        )
        return restored

    async def _execute(
        self,
        turn: Turn,
        plan: Sequence[PlannedTask],
        candidates: dict[int, list[ModelInfo]],
        emit: EventSink,
        *,
        reasons: dict[int, str] | None = None,
        finished_before: dict[int, TaskOutcome] | None = None,
        on_finished: Any = None,
        choice: Awaitable[Assignment] | None = None,
        on_chosen: Callable[[Assignment], Awaitable[None]] | None = None,
    ) -> dict[int, TaskOutcome]:
        """Run ``plan`` on ``candidates`` (the chosen model first; while
        ``choice`` is pending, a guess that it corrects)."""

        async def listener(states: tuple[TaskState, ...]) -> None:
            await emit(TasksChanged(states))

        async def load_handle(handle: str) -> Blob:
            r = turn.resource(handle)
            if r is None:
                raise TaskFailed(f"there is no file named {handle} here", retryable=False)
            try:
                data = await self.repo.read(r)
            except (OSError, ValueError) as e:
                log.error("request %s: cannot read %s: %s", turn.request.request_id, handle, e)
                raise TaskFailed(f"the stored file {handle} is missing", retryable=False) from e
            return Blob(r.kind, r.mime, data, handle=r.handle)

        async def save_result(o: TaskOutcome) -> TaskResult:
            assert o.result is not None
            handles: list[str] = []
            for blob in o.result.media:
                res = await turn.store_output(self.media, blob, o.task, o.id)
                handles.append(res.handle)
            return with_handles(o.result, handles)

        return await self.executor.run(
            plan,
            candidates,
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

    # ------------------------------------------------------------ finishing
    def _reply(
        self,
        turn: Turn,
        text: str,
        records: tuple[TaskRecord, ...],
        *,
        status: ReplyStatus = ReplyStatus.ANSWERED,
    ) -> Reply:
        return Reply(
            text=text,
            files=tuple(turn.generated),
            tasks=records,
            timings=Timings.of(turn.timings),
            usage=turn.usage,
            request_id=turn.request.request_id,
            status=status,
            plan_notes=tuple(turn.plan_notes),
        )

    async def _persist(
        self,
        turn: Turn,
        reply: Reply,
        job: Job | None = None,
        cp: TurnState | None = None,
        *,
        with_usage: bool = False,
    ) -> Reply:
        """Save the turn (with the job's final checkpoint, and ``with_usage``
        its usage rows: one transaction).  A turn the store refuses or cannot
        take is answered anyway, with a note; its usage is then recorded on
        its own, so every turn is counted exactly once."""
        usage = self._turn_usage(turn.request, reply) if with_usage else None
        stored = _as_stored(turn.request, reply, self.config.max_request_chars)
        record = TurnRecord(stored, tuple(turn.uploads), reply, usage=usage)
        if job is not None:
            state = cp or TurnState()

            def checkpoint(final: tuple[Resource, ...]) -> dict[str, Any]:
                generated = tuple(r for r in final if r.source == "generated")
                state.reply = replace(reply, files=generated) if generated else reply
                return dump_state(state, self.media)

            record = replace(record, job=JobFence(job.id, job.owner, checkpoint))
        try:
            final = await self.repo.save_turn(record)
        except StoreUnavailable as e:
            log.error("request %s: could not save the turn: %s", turn.request.request_id, e)
            note = "(Note: the history database is unavailable, so this turn was not saved.)"
        except (StoreConflict, StoreRejected) as e:
            log.error("request %s: %s", turn.request.request_id, e)
            note = "(Note: this turn could not be saved; the details are in the log.)"
        else:
            generated = tuple(r for r in final if r.source == "generated")
            return replace(reply, files=generated) if generated else reply
        if usage is not None:
            await self._record_usage(usage)
        return replace(reply, text=f"{reply.text}\n\n{note}")


class _Progress:
    """Checkpoints one request's progress on its job (nothing without a job).

    Group commit: one write at a time, each with the newest state.  A save
    asked for while a write is under way does not queue a write of its own:
    the next write carries the state of every caller who asked meanwhile,
    and each caller returns once a write begun after it asked has finished
    (its state is in the checkpoint then: a finished task's result is
    stored before the task is reported as kept).  A slower write never
    overwrites a newer one."""

    def __init__(self, agent: Agent, job: Job | None, cp: TurnState) -> None:
        self.agent = agent
        self.job = job
        self.cp = cp
        self._lock = asyncio.Lock()
        self._asked = 0  # saves asked for so far (each caller's number)
        self._written = 0  # every save up to this number is in a finished write

    async def save(self, turn: Turn) -> None:
        if self.job is None:
            return
        self._asked += 1
        mine = self._asked
        async with self._lock:
            if self._written >= mine:
                return  # a write that began after this caller asked carried its state
            # No await from here to the write's start: the state taken is that
            # of every save asked for so far.
            covers = self._asked
            self.cp.generated = list(turn.generated)
            self.cp.usage = turn.usage
            self.cp.timings = dict(turn.timings)
            await self.job.save_checkpoint(dump_state(self.cp, self.agent.media))
            self._written = covers

    def task_finished(self, turn: Turn) -> Any:
        async def on_finished(o: TaskOutcome) -> None:
            self.cp.finished(o)
            await self.save(turn)

        return on_finished if self.job is not None else None


def quotas(config: AgentConfig) -> Quotas:
    return Quotas(
        user_per_minute=config.requests_per_user_per_minute,
        user_per_day=config.requests_per_user_per_day,
        user_tokens_per_day=config.llm_tokens_per_user_per_day,
        server_per_minute=config.requests_per_server_per_minute,
        server_per_day=config.requests_per_server_per_day,
        server_tokens_per_day=config.llm_tokens_per_server_per_day,
    )


def _ordered(
    candidates: dict[int, list[ModelInfo]], selections: dict[int, Selection]
) -> dict[int, list[ModelInfo]]:
    """Each task's candidates with its chosen model first."""
    ordered: dict[int, list[ModelInfo]] = {}
    for task_id, models in candidates.items():
        chosen = selections.get(task_id)
        rest = [m for m in models if not chosen or m.id != chosen.model.id]
        ordered[task_id] = ([chosen.model] if chosen else []) + rest
    return ordered


class _Notices:
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
) -> None:
    n = 1
    while True:
        await asyncio.sleep(max(0.0, n * every - deadline.elapsed()))
        n += 1
        await emit(StillWaiting(stage, deadline.elapsed(), max(1, deadline.attempts), tasks))


def _usage_line(r: UsageTotals) -> UsageLine:
    kind, model, provider = (*r.key, "", "", "")[:3]
    label = f"{model} (language model)" if kind == "llm" else model
    if provider:
        label = f"{label} via {provider}"
    return UsageLine(
        label or "?",
        llm_calls=r.llm_calls,
        prompt_tokens=r.prompt_tokens,
        completion_tokens=r.completion_tokens,
        model_calls=r.model_calls,
        model_seconds=round(r.model_seconds, 3),
        cost_usd=r.cost_usd,
        unpriced_calls=r.unpriced_calls,
    )


def _shown(stored: dict[str, Any]) -> dict[str, str]:
    """Settings as text: lists comma-separated, pins as ``pinned_model.TASK``."""
    out: dict[str, str] = {}
    for key, value in stored.items():
        if isinstance(value, dict):
            out.update({f"pinned_model.{k}": str(v) for k, v in value.items()})
        elif isinstance(value, list | tuple):
            out[key] = ", ".join(str(v) for v in value)
        else:
            out[key] = str(value)
    return out


def _step_to_json(s: PlannedStep) -> dict[str, Any]:
    return {
        "id": s.id,
        "task": s.task,
        "dep": list(s.dep),
        "args": dict(s.args),
        "model": s.model,
        "reason": s.reason,
        "typical_seconds": s.typical_seconds,
        "max_seconds": s.max_seconds,
        "cost_usd": s.cost_usd,
    }


def _step_from_json(d: dict[str, Any]) -> PlannedStep:
    def num(v: Any) -> float | None:
        return float(v) if isinstance(v, int | float) else None

    return PlannedStep(
        int(d["id"]),
        str(d["task"]),
        tuple(int(x) for x in d.get("dep") or ()),
        {str(k): str(v) for k, v in (d.get("args") or {}).items()},
        d.get("model"),
        d.get("reason"),
        num(d.get("typical_seconds")),
        num(d.get("max_seconds")),
        num(d.get("cost_usd")),
    )


def _preview_to_json(
    request: Request, steps: tuple[PlannedStep, ...], usage: Usage
) -> dict[str, Any]:
    key = request.conversation
    return {
        "preview": {
            "key": [key.platform, key.scope, key.channel, key.thread],
            "user_id": request.user_id,
            "text": request.text,
            "steps": [_step_to_json(s) for s in steps],
            "usage": [usage.llm_calls, usage.prompt_tokens, usage.completion_tokens],
        }
    }


def _preview_from_json(request_id: str, payload: dict[str, Any]) -> PastRequest:
    d = payload["preview"]
    return PastRequest(
        request_id,
        ConversationKey(*d["key"]),
        str(d["user_id"]),
        str(d["text"]),
        tuple(_step_from_json(x) for x in d["steps"]),
        None,
        Usage(*d.get("usage") or (0, 0, 0)),
    )


def _as_stored(request: Request, reply: Reply, limit: int) -> Request:
    """The request as its turn stores it.  A message refused for its length
    keeps its first :data:`REFUSED_KEPT_CHARS` characters and a note of how
    long it was: the chat log (and every later prompt built from the history)
    still shows what was sent and, with the refusal stored beside it, why
    nothing was done, while the database holds a bounded row per refusal
    rather than whatever was pasted.  (Storing nothing would leave the
    refusal answering a message nobody can see.)"""
    if reply.status is not ReplyStatus.REFUSED or len(request.text) <= limit:
        return request
    note = (
        f"\n[… {len(request.text):,} characters in all, refused for its length; "
        f"only the first {REFUSED_KEPT_CHARS:,} are kept]"
    )
    return replace(request, text=request.text[:REFUSED_KEPT_CHARS] + note)
