"""The HuggingGPT agent: the front every adapter calls (``AgentAPI``).

``Agent.run`` is the one entry point for a request: its typed events, then
its reply (see :mod:`core.run`).  It never raises for user-caused or
upstream failures: a dead LLM, a bad attachment or a store that went away
all end in a ``Reply`` whose ``status`` says so, plus a log line with the
request id.  The agent holds the parts (LLM, catalog, router, stores,
executor, job queue) and the process's lifecycle (warm-up, shutdown,
drain); the work is elsewhere:

* how a turn runs and resumes: :mod:`core.turn_steps` (its state:
  :mod:`core.turn_state`; the stages' calls: :mod:`core.stages`);
* ``/plan`` and ``recall``: :mod:`core.previews`; ``/usage`` and
  ``/config``: :mod:`core.admin`; the media helpers adapters import:
  :mod:`core.media_files`;
* durable jobs: :mod:`core.jobs`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import weakref
from collections.abc import Iterator
from typing import Any

from core import admin, previews, telemetry
from core.catalog import Catalog
from core.clock import SYSTEM_CLOCK, Clock
from core.config import AgentConfig
from core.errors import ErrorCode, InputRejected
from core.execution import Executor
from core.jobs import JobQueue, Outcome
from core.llm import LLM
from core.ratelimit import QuotaLimiter
from core.request_checks import quotas
from core.result_cache import ResultCache
from core.routing import ExpertRouter
from core.run import AgentRun, InFlight, run_to_end
from core.server_settings import ServerSettingsService
from core.store.jobs import AcceptedRow, JobStore
from core.store.media import MediaStore
from core.store.quotas import QuotaStore
from core.store.repo import Repo
from core.store.server_settings import ServerSettingsStore
from core.store.usage import UsageStore
from core.turn import Turn
from core.turn_save import persist, reply_of
from core.turn_steps import complete_turn
from core.types import (
    ConversationKey,
    EventSink,
    Job,
    JobRunner,
    ModelChoice,
    PastRequest,
    PlanPreview,
    QueuePosition,
    Reply,
    ReplyStatus,
    Request,
    Resource,
    UsageReport,
)

log = logging.getLogger(__name__)

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
        self.jobs = JobQueue(
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
                refused = InputRejected(ErrorCode.SHUTTING_DOWN)
                reply = reply_of(turn, str(refused), status=ReplyStatus.REFUSED)
                reply = await persist(self, turn, reply.with_error(refused))
            else:
                reply = await self._in_order(request, emit, job)
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
    ) -> AcceptedRow:
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
    def warm_while_planning(self) -> Iterator[None]:
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
        self.prepare()

    def prepare(self) -> None:
        """A turn starts: build a first hosted call's session and ask the LLM
        server its context size, in the background, while it loads and plans."""
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

    async def _in_order(self, request: Request, emit: EventSink, job: Job | None = None) -> Reply:
        """The turn, once the conversation's earlier one here is done."""
        lock = self._locks.setdefault(request.conversation, asyncio.Lock())
        if lock.locked():
            await emit(QueuePosition(0, conversation_busy=True))
        async with lock:
            return await complete_turn(self, request, emit, job)

    # ---------------------------------------------- admin: usage, settings, forget
    async def usage(
        self,
        conversation: ConversationKey,
        user_id: str,
        *,
        server_wide: bool = False,
        is_admin: bool = False,
        since: str | None = None,
    ) -> UsageReport:
        return await admin.usage(
            self.usage_store,
            conversation,
            user_id,
            server_wide=server_wide,
            is_admin=is_admin,
            since=since,
        )

    async def settings(self, conversation: ConversationKey) -> dict[str, str]:
        return await admin.settings(self.server_settings, conversation)

    async def configure(
        self,
        conversation: ConversationKey,
        key: str,
        value: str | None,
        *,
        user_id: str,
        is_admin: bool,
    ) -> dict[str, str]:
        return await admin.configure(
            self.server_settings, conversation, key, value, user_id=user_id, is_admin=is_admin
        )

    async def forget(self, conversation: ConversationKey, user_id: str | None = None) -> int:
        return await self.repo.forget(conversation, user_id)

    # ------------------------------------------------- plan previews, past requests
    async def plan_only(self, request: Request) -> PlanPreview:
        return await previews.plan_only(self, request)

    async def recall(self, request_id: str) -> PastRequest | None:
        return await previews.recall(self, request_id)

    # ------------------------------------------------------------------ the rest
    def models(self, task: str | None = None) -> dict[str, list[ModelChoice]]:
        return self.router.choices(self.catalog, task, self.config.top_k)

    async def claim_event(self, source: str, event_id: str) -> bool:
        return await self.repo.claim_event(source, event_id)

    async def read_file(self, resource: Resource) -> bytes:
        return await self.repo.read(resource)
