"""Durable turns: every accepted request is a job in the store until answered.

An adapter *accepts* a request before it tells the platform it has it
(:meth:`JobQueue.accept`: one fast insert into ``turn_jobs``, the
platform's event id as the job's unique ``dedup_key``), then asks the queue
to *process* it (:meth:`JobQueue.process`), which returns once the job is
answered (here or by another process).  What "running a job" means is the
adapter's: it registers a :class:`JobRunner` per ``kind`` that rebuilds the
request from the job's opaque JSON payload and posts the answer; the core
never sees a platform.

States: ``queued`` → ``running`` → ``done``.  A queued job is *reserved*
(leased) by the process that accepted it; a running one is leased by the
process working on it, which renews every lease it holds every
``heartbeat`` seconds.  A job whose lease ran out (its process died) or was
released (its process stopped) is claimed by any process that has a runner
for its kind, and resumed from its checkpoint (see :mod:`core.checkpoint`):
finished tasks are not run again, a reply already saved is only posted.  A
holder that is provably gone (same host and PID namespace, its process no
more: :mod:`core.lease_holder`) has its jobs released at once, by a queue's
first round and by a request waiting behind them, not after the lease.

Order: a job can be claimed only when no earlier job of its conversation is
unfinished, in any process, so one conversation's turns run, and are
stored, in acceptance order; and ``max_inflight`` jobs at most run in one
process at a time, holding at most ``max_upload_bytes`` of uploads between
them (each job weighs the sizes its platform declared for its files, known
at accept; a request holds about three times that while its files are
downloaded and decoded).  A job with files that does not fit waits, and
later jobs with files wait behind it; jobs without files go on past it; one
bigger than the whole budget runs alone.  The rest wait in the table (the
queue) in id order, and their runners are told how many requests are ahead
of them.

On shutdown (:meth:`JobQueue.begin_shutdown`, :meth:`drain`,
:meth:`interrupt`): no new job starts, queued ones are released at once
with a notice, running ones get the grace period; those still running after
it are cancelled, their person is told the bot is restarting and will
finish, and their leases are released for the next process.

Lease times and the intervals between heartbeats and surveys come from the
injected :class:`~core.clock.Clock` (a test expires a lease by moving it);
the waits between scheduler rounds are real sleeps.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Iterable
from datetime import datetime, timedelta
from typing import Any

from core.clock import SYSTEM_CLOCK, Clock, utc
from core.errors import ErrorCode, LeaseLost, RunFailed, StoreRejected, StoreUnavailable
from core.lease_holder import gone, owner_name
from core.store.jobs import QUEUED, RUNNING, AcceptedRow, JobRow, JobStore, Slot
from core.store.repo import fit_key
from core.telemetry import metrics
from core.types import ConversationKey, JobOutcome, JobRunner, Notice, QueuePosition, Restarting

log = logging.getLogger(__name__)

Outcome = JobOutcome  # "done" | "elsewhere" | "deferred"
__all__ = ["JobQueue", "JobRunner", "LeasedJob", "Outcome"]

FINISH_TRIES = 3
HOLD = 30.0  # seconds an accepted job waits for its adapter's process() call


class LeasedJob:
    """A job this process holds (its lease), as its runner sees it (a
    :class:`core.types.Job`): the adapter's payload, where its status message
    is, and (for the agent) the checkpoint."""

    def __init__(self, row: JobRow, queue: JobQueue) -> None:
        self._row = row
        self._queue = queue
        self.status_ref: dict[str, Any] | None = row.status_ref
        self.checkpoint: dict[str, Any] | None = row.checkpoint

    @property
    def id(self) -> int:
        return self._row.id

    @property
    def kind(self) -> str:
        return self._row.kind

    @property
    def conversation(self) -> str:
        return self._row.conversation

    @property
    def request_id(self) -> str:
        return self._row.request_id

    @property
    def created_at(self) -> datetime:
        return self._row.created_at

    @property
    def payload(self) -> dict[str, Any]:
        return self._row.payload

    @property
    def attempts(self) -> int:
        """How many times a process has started this job (this one included)."""
        return self._row.attempts

    @property
    def resumed(self) -> bool:
        """True when an earlier process started this job and did not finish it."""
        return self._row.attempts > 1

    @property
    def inputs_stored(self) -> bool:
        """True once the request's files are checked and in the media store
        (a resumed job): the adapter need not download them again."""
        return bool(self.checkpoint and self.checkpoint.get("uploads") is not None)

    def now(self) -> datetime:
        return self._queue.now()

    async def set_status_ref(self, ref: dict[str, Any]) -> None:
        """Remember where this request's status message is (a resumed job
        edits the same message)."""
        self.status_ref = ref
        try:
            await self._queue.store.set_status_ref(
                self.id, owner=self._queue.owner, ref=ref, now=self.now()
            )
        except (StoreUnavailable, StoreRejected) as exc:
            log.warning("job %s: could not remember its status message: %s", self.id, exc)

    async def save_checkpoint(self, data: dict[str, Any]) -> None:
        """Record progress (the core's JSON).  A store failure is logged and
        the work goes on (the next checkpoint may land); :class:`LeaseLost`
        if another process holds the job now."""
        self.checkpoint = data
        try:
            await self._queue.store.save_checkpoint(
                self.id, owner=self._queue.owner, checkpoint=data, now=self.now()
            )
        except (StoreUnavailable, StoreRejected) as exc:
            log.warning("job %s: checkpoint not saved: %s", self.id, exc)

    @property
    def owner(self) -> str:
        return self._queue.owner


def default_owner() -> str:
    """This process's lease owner name: ``host:pid:random``, and where the
    system shows it, what proves the process gone (:mod:`core.lease_holder`)."""
    return owner_name()


def conversation_name(key: ConversationKey) -> str:
    """The job table's conversation column (one string per conversation): the
    key as the conversation tables store it (each part shortened by
    :func:`core.store.repo.fit_key`), so the column takes every key they take."""
    key = fit_key(key)
    return f"{key.platform}\x1f{key.scope}\x1f{key.channel}\x1f{key.thread or ''}"


class JobQueue:
    """The queue of durable jobs: accepts, orders, runs and resumes them for one process."""

    def __init__(
        self,
        store: JobStore,
        *,
        max_inflight: int = 64,
        max_upload_bytes: int | None = None,
        lease: float = 60.0,
        heartbeat: float | None = None,
        poll: float = 2.0,
        max_attempts: int = 5,
        keep_done: float = 86_400.0,
        clock: Clock = SYSTEM_CLOCK,
        owner: str | None = None,
    ) -> None:
        self.store = store
        self.max_inflight = max(1, max_inflight)
        # None (or 0): no byte budget, only the count.
        self.max_upload_bytes = max_upload_bytes or None
        self.lease = lease
        self.heartbeat = heartbeat if heartbeat is not None else lease / 3
        self.poll = poll
        self.max_attempts = max_attempts
        self.keep_done = keep_done
        self.clock = clock
        self.owner = owner or default_owner()
        self._runners: dict[str, JobRunner] = {}
        self._running: dict[int, asyncio.Task[None]] = {}
        self._upload_bytes: dict[int, int] = {}  # of the running jobs that carry files
        self._jobs: dict[int, LeasedJob] = {}
        self._waiters: dict[int, asyncio.Future[Outcome]] = {}
        self._shown: dict[int, tuple[int, bool]] = {}
        self._notices: dict[int, asyncio.Task[None]] = {}
        self._lost: set[int] = set()
        self._interrupting: set[int] = set()
        self._finishing: set[int] = set()
        # Answered, but not marked done yet (the store was down): retried each
        # round, their leases renewed meanwhile so nobody answers them again.
        self._unmarked: dict[int, str | None] = {}
        self._wake = asyncio.Event()
        self._idle = asyncio.Event()
        self._idle.set()
        self._loop_task: asyncio.Task[None] | None = None
        self._handing_on: asyncio.Task[None] | None = None
        self._closing = False
        self._stopping = False
        self._abandoned = False
        self._last_beat = self.clock.monotonic()
        self._last_prune = float("-inf")
        self._last_survey = float("-inf")
        self._last_claim_survey = float("-inf")
        self._swept = False  # the jobs of holders gone before we started were looked for

    def now(self) -> datetime:
        """The clock's wall time, as lease times are kept."""
        return utc(self.clock)

    # ------------------------------------------------------------ adapters
    def register(self, kind: str, runner: JobRunner) -> None:
        """Run jobs of ``kind`` (and resume any left unfinished) with ``runner``."""
        self._runners[kind] = runner
        self.start()
        self.wake()

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
        """Record a request (a fast insert); call before acknowledging it.
        A known ``dedup`` key returns its existing job (``fresh=False``).
        ``upload_bytes``: the sizes its platform declared for its files."""
        self.start()
        accepted = await self.store.accept(
            kind=kind,
            conversation=conversation_name(conversation),
            payload=payload,
            request_id=request_id,
            dedup_key=dedup,
            owner=self.owner,
            now=self.now(),
            lease=self.lease,
            upload_bytes=upload_bytes,
        )
        return accepted

    async def process(self, job_id: int) -> Outcome:
        """Run an accepted job here when its turn comes; returns once it is
        answered (``"done"``), or another process has it (``"elsewhere"``),
        or this process is stopping and handed it on (``"deferred"``)."""
        if self._closing:
            await self._hand_on([job_id])
            return "deferred"
        fut = self._waiters.get(job_id)
        if fut is None:
            fut = asyncio.get_running_loop().create_future()
            self._waiters[job_id] = fut
        self.start()
        self.wake()
        self._report_depth()
        return await asyncio.shield(fut)

    def wake(self) -> None:
        self._wake.set()
        self.start()

    @property
    def running(self) -> int:
        return len(self._running)

    @property
    def upload_bytes_running(self) -> int:
        """The declared upload bytes of the jobs running here."""
        return sum(self._upload_bytes.values())

    def _report_depth(self) -> None:
        waiting = sum(1 for j in self._waiters if j not in self._running)
        metrics.set_queue_depth(waiting=waiting, in_flight=len(self._running))

    # ------------------------------------------------------------ lifecycle
    def start(self) -> None:
        """Start the scheduler (once, from inside the event loop; without a
        running loop it starts with the first accept or process)."""
        if self._loop_task is not None or self._abandoned or self._stopping:
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return
        self._loop_task = loop.create_task(self._loop(), name="turn-queue")

    def begin_shutdown(self) -> int:
        """Start no new job; hand queued ones on.  Returns how many run."""
        self._closing = True
        waiting = [j for j in self._waiters if j not in self._running]
        if waiting:
            self._handing_on = asyncio.get_running_loop().create_task(
                self._hand_on(waiting), name="turn-queue-hand-on"
            )
        return len(self._running)

    async def drain(self, grace: float) -> bool:
        """Wait until no job runs here (True) or ``grace`` seconds passed (False)."""
        try:
            await asyncio.wait_for(self._idle.wait(), grace)
        except TimeoutError:
            return False
        return True

    async def interrupt(self, *, notify: bool = True) -> int:
        """Stop the jobs still running: cancel them, tell their people the bot
        is restarting and will finish (``notify``: while the platform clients
        are still open), release their leases.  A job already answered and
        being marked done is let finish.  Returns how many were stopped."""
        finishing = [self._running[i] for i in self._finishing if i in self._running]
        if finishing:
            await asyncio.wait(finishing, timeout=5.0)
        ids = [i for i in self._running if i not in self._finishing]
        self._interrupting.update(ids)
        jobs = [self._jobs[i] for i in ids if i in self._jobs]
        tasks = [self._running[i] for i in ids]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        if notify:
            await self._notify_all(jobs, Restarting())
        await self._release(ids)
        for i in ids:
            self._jobs.pop(i, None)
            self._interrupting.discard(i)
            self._resolve(i, "deferred")
        if ids:
            log.info("jobs %s interrupted and released for the next process", ids)
        return len(ids)

    async def aclose(self) -> None:
        """Stop: interrupt what runs, release every lease held, end the loop.
        (No notices: the platform clients may be closed by now; a graceful
        stop tells people through :meth:`interrupt` first.)"""
        self._closing = True
        if self._handing_on is not None:
            await asyncio.wait([self._handing_on], timeout=5.0)
        await self.interrupt(notify=False)
        try:  # every request still reserved here, asked for or not
            await self.store.release_reserved(owner=self.owner, now=self.now())
        except StoreUnavailable as exc:
            log.warning("queued requests not released (their leases will run out): %s", exc)
        for j in [j for j in self._waiters if j not in self._running]:
            self._resolve(j, "deferred")
        await self.store.settle()  # a cancelled job's last checkpoint, written or not
        await self._stop_loop()
        if self._unmarked:
            try:
                await self._mark_answered()
            except StoreUnavailable as exc:
                log.error(
                    "jobs %s were answered but are not marked done (the next process may "
                    "answer them again): %s",
                    sorted(self._unmarked),
                    exc,
                )

    async def abandon(self) -> None:
        """Stop at once without touching the store, as a killed process would
        (tests: a crash; the leases run out on their own)."""
        self._abandoned = True
        self._closing = True
        for task in [*self._running.values(), *self._notices.values()]:
            task.cancel()
        await asyncio.gather(
            *self._running.values(), *self._notices.values(), return_exceptions=True
        )
        await self.store.settle(cancel=True)  # a killed process writes nothing more
        await self._stop_loop()
        for i in list(self._waiters):
            self._resolve(i, "deferred")

    async def _stop_loop(self) -> None:
        """End the scheduler after its current round (a round cut off inside
        a query would leave the connection to be reset noisily)."""
        task, self._loop_task = self._loop_task, None
        if task is None:
            return
        self._stopping = True
        self._wake.set()
        try:
            await asyncio.wait_for(asyncio.shield(task), 5.0)
        except TimeoutError:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    # ------------------------------------------------------------ the loop
    async def _loop(self) -> None:
        while not self._stopping:
            self._wake.clear()
            try:
                await self._tick()
            except StoreUnavailable as exc:
                log.warning("job queue: %s", exc)
            except Exception:
                log.exception("job queue round failed")
            if self._stopping:
                return
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), self.poll)

    async def _tick(self) -> None:
        if self.clock.monotonic() - self._last_beat >= self.heartbeat:
            await self._beat()
        if self._unmarked:
            await self._mark_answered()
        if self._closing:
            return
        if not self._swept:  # a restart: take over at once what our predecessor held
            await self._take_over(await self.store.holders(now=self.now()))
            self._swept = True
        # Only requests that were waiting before this round's claim can be
        # said to wait (one that came in meanwhile is claimed next round).
        waiting = set(self._waiters)
        kinds = list(self._runners)
        free = self.max_inflight - len(self._running)
        now = self.now()
        # Our own fresh jobs start once their adapter asked (it has acknowledged
        # them: a Discord reply must not beat its defer), or if it never does.
        asked, hold_before = sorted(waiting), now - timedelta(seconds=HOLD)
        # Claim when a request here waits to start, or once a ``poll`` for work
        # nobody here asked for (another process's orphans, a reservation
        # never asked for): a round woken by a job ending, with nobody
        # waiting, has nothing to start (the claim's read was most of an idle
        # round's cost).
        pending = any(j not in self._running for j in waiting)
        survey = self.clock.monotonic() - self._last_claim_survey >= self.poll
        if free > 0 and kinds and (pending or survey):
            if survey:
                self._last_claim_survey = self.clock.monotonic()
            # One statement picks and starts what fits (nothing to start: no write).
            for row in await self.store.claim(
                owner=self.owner,
                kinds=kinds,
                now=now,
                lease=self.lease,
                limit=free,
                asked=asked,
                hold_before=hold_before,
                upload_budget=self.max_upload_bytes,
                uploads_held=self.upload_bytes_running,
            ):
                self._start(row)
        await self._update_waiters(waiting)
        self._report_depth()
        if self.clock.monotonic() - self._last_prune >= 3600:
            self._last_prune = self.clock.monotonic()
            pruned = await self.store.prune(before=now - timedelta(seconds=self.keep_done))
            if pruned:
                log.info("job queue: pruned %d finished jobs", pruned)

    async def _beat(self) -> None:
        self._last_beat = self.clock.monotonic()
        if not self._running and not self._waiters and not self._unmarked:
            return
        held = await self.store.heartbeat(owner=self.owner, now=self.now(), lease=self.lease)
        for job_id, task in list(self._running.items()):
            if job_id not in held:
                log.warning("job %s: lease lost to another process; stopping here", job_id)
                self._lost.add(job_id)
                task.cancel()

    def _start(self, row: JobRow) -> None:
        job = LeasedJob(row, self)
        self._jobs[row.id] = job
        if row.upload_bytes:
            self._upload_bytes[row.id] = row.upload_bytes
        self._shown.pop(row.id, None)
        self._idle.clear()
        self._running[row.id] = asyncio.get_running_loop().create_task(
            self._run(job), name=f"turn-job-{row.id}"
        )

    async def _run(self, job: LeasedJob) -> None:
        """Run one claimed job to its end (marked done, or handed on); it counts
        as running, for :meth:`drain`, until its row says so."""
        try:
            outcome, finish, error = await self._run_job(job)
            if finish:
                self._finishing.add(job.id)  # answered: an interrupt lets this end
                await self._finish(job, error)
            self._resolve(job.id, outcome)
            self.wake()
        finally:
            self._finishing.discard(job.id)
            self._running.pop(job.id, None)
            self._upload_bytes.pop(job.id, None)
            if job.id not in self._interrupting:
                self._jobs.pop(job.id, None)
            self._lost.discard(job.id)
            self._check_idle()
            self._report_depth()

    async def _run_job(self, job: LeasedJob) -> tuple[Outcome, bool, str | None]:
        """(outcome, whether to mark it done, the error to record)."""
        error: str | None = None
        try:
            notice = self._notices.pop(job.id, None)
            if notice is not None:  # a queue notice still being posted: let it land first
                with contextlib.suppress(Exception):
                    await notice
            runner = self._runners[job.kind]
            if job.resumed:
                log.info("job %s resumed (attempt %d)", job.id, job.attempts)
            if job.attempts > self.max_attempts:
                error = f"gave up after {job.attempts - 1} attempts"
                log.error("job %s: %s", job.id, error)
                await runner.give_up(job, RunFailed(ErrorCode.GAVE_UP, attempts=job.attempts - 1))
            else:
                await runner.run(job)
        except LeaseLost:
            log.warning("job %s: another process took it over; not finishing it here", job.id)
            return "elsewhere", False, None
        except asyncio.CancelledError:
            if job.id not in self._lost:
                raise  # interrupted (shutdown) or abandoned: nothing more here
            return "elsewhere", False, None
        except Exception as exc:
            log.exception("job %s: its runner failed", job.id)
            error = f"runner failed: {type(exc).__name__}"
        return "done", True, error

    async def _finish(self, job: LeasedJob, error: str | None) -> None:
        for attempt in range(1, FINISH_TRIES + 1):
            try:
                if not await self.store.finish(
                    job.id, owner=self.owner, now=self.now(), error=error
                ):
                    log.warning("job %s: finished, but another process held it by then", job.id)
                return
            except StoreUnavailable as exc:
                log.warning("job %s: could not mark it done (try %d): %s", job.id, attempt, exc)
                await self.clock.sleep(0.5 * attempt)
        log.error("job %s: answered; it will be marked done when the database is back", job.id)
        self._unmarked[job.id] = error

    async def _mark_answered(self) -> None:
        """Mark done the jobs answered while the store was down (StoreUnavailable:
        the next round tries again)."""
        for job_id, error in list(self._unmarked.items()):
            if await self.store.finish(job_id, owner=self.owner, now=self.now(), error=error):
                log.info("job %s: marked done, the database is back", job_id)
            else:
                log.warning("job %s: answered, but another process held it by then", job_id)
            del self._unmarked[job_id]

    def _check_idle(self) -> None:
        if not self._running:
            self._idle.set()

    def _resolve(self, job_id: int, outcome: Outcome) -> None:
        self._shown.pop(job_id, None)
        fut = self._waiters.pop(job_id, None)
        if fut is not None and not fut.done():
            fut.set_result(outcome)

    # ------------------------------------------------------ waiting requests
    async def _update_waiters(self, candidates: set[int]) -> None:
        """Resolve waiters whose job another process has, and tell the others
        their place in the queue (only when it changed).  A request that has
        not been told yet is looked at in the round after it came in; the
        rest once a ``poll`` (a place moves by one with every job that ends:
        not worth a read of the whole queue each time)."""
        waiting = [j for j in self._waiters if j not in self._running and j in candidates]
        if self.clock.monotonic() - self._last_survey >= self.poll:
            self._last_survey = self.clock.monotonic()
        else:
            waiting = [j for j in waiting if j not in self._shown]
        if not waiting:
            return
        slots = await self.store.unfinished(max(waiting))
        now = self.now()
        # A request waiting on a job whose process is gone need not wait for its lease.
        held = {
            s.lease_owner for s in slots if s.lease_expires is not None and s.lease_expires >= now
        }
        if released := await self._take_over(held):
            slots = [
                Slot(s.id, s.conversation, QUEUED, None) if s.id in released else s for s in slots
            ]
        places = self._places(slots, set(waiting))
        tell: dict[int, tuple[int, bool]] = {}
        for job_id in waiting:
            slot = places.get(job_id)
            if slot is None:
                self._resolve(job_id, "elsewhere")  # finished (elsewhere) or gone
                continue
            owner, expires, place = slot
            if owner not in (None, self.owner) and expires is not None and expires >= now:
                self._resolve(job_id, "elsewhere")  # a live process has it
            elif self._shown.get(job_id) != place:
                self._shown[job_id] = place
                if job_id not in self._notices:
                    tell[job_id] = place
        if not tell:
            return
        for row in (await self.store.get(tell)).values():
            runner = self._runners.get(row.kind)
            if runner is None or row.id in self._notices or row.id not in self._waiters:
                continue
            ahead, busy = tell[row.id]
            notice = QueuePosition(ahead, conversation_busy=busy)
            self._notices[row.id] = asyncio.get_running_loop().create_task(
                self._notify(runner, LeasedJob(row, self), notice), name=f"turn-job-{row.id}-notice"
            )

    def _places(
        self, slots: list[Slot], wanted: set[int]
    ) -> dict[int, tuple[str | None, datetime | None, tuple[int, bool]]]:
        """For each wanted unfinished job: its lease (owner, expiry) and place
        (requests that start before it, whether an earlier request of its
        conversation is running), in one pass over the unfinished jobs by id.
        Ahead of a job: its conversation's earlier queued requests, and the
        other queued requests this process reserved earlier."""
        mine = 0  # queued, reserved here, so far
        queued: dict[str, int] = {}  # per conversation, so far
        mine_in: dict[str, int] = {}  # of those, reserved here
        running: set[str] = set()
        out: dict[int, tuple[str | None, datetime | None, tuple[int, bool]]] = {}
        for s in slots:
            c = s.conversation
            if s.id in wanted:
                ahead = mine - mine_in.get(c, 0) + queued.get(c, 0)
                out[s.id] = (s.lease_owner, s.lease_expires, (ahead, c in running))
            if s.state == RUNNING:
                running.add(c)
            elif s.state == QUEUED:
                queued[c] = queued.get(c, 0) + 1
                if s.lease_owner == self.owner:
                    mine += 1
                    mine_in[c] = mine_in.get(c, 0) + 1
        return out

    async def _take_over(self, owners: Iterable[str | None]) -> set[int]:
        """Release the jobs of lease holders whose process has provably ended
        (the same host and PID namespace, and that process is no more: see
        :mod:`core.lease_holder`), so they are claimed now rather than when
        their leases run out; the ids released.  A holder nothing can be
        proved of (another host, a container of its own) keeps its lease."""
        dead = sorted({o for o in owners if o and o != self.owner and gone(o)})
        if not dead:
            return set()
        released = await self.store.release_owners(dead, now=self.now())
        if released:
            log.warning(
                "jobs %s taken over at once: the process holding them (%s) has ended",
                sorted(released),
                ", ".join(dead),
            )
            self.wake()
        return released

    async def _notify(self, runner: JobRunner, job: LeasedJob, notice: Notice) -> None:
        try:
            await runner.notify(job, notice)
        except Exception as exc:  # a notice is a courtesy: never worth more than a line
            log.warning("job %s: its notice failed: %s: %s", job.id, type(exc).__name__, exc)
        finally:
            self._notices.pop(job.id, None)

    async def _notify_all(self, jobs: list[LeasedJob], notice: Notice) -> None:
        async def one(job: LeasedJob) -> None:
            runner = self._runners.get(job.kind)
            if runner is not None:
                await self._notify(runner, job, notice)

        await asyncio.gather(*(one(j) for j in jobs))

    async def _hand_on(self, job_ids: list[int]) -> None:
        """Stopping: tell the people behind queued jobs and release them."""
        rows = await self.store.get(job_ids)
        mine = [r for r in rows.values() if r.lease_owner == self.owner and r.state == QUEUED]
        await self._notify_all([LeasedJob(r, self) for r in mine], Restarting())
        await self._release([r.id for r in mine])
        for job_id in job_ids:
            self._resolve(job_id, "deferred")

    async def _release(self, job_ids: list[int]) -> None:
        try:
            await self.store.release(job_ids, owner=self.owner, now=self.now())
        except StoreUnavailable as exc:
            log.warning("jobs %s not released (their leases will run out): %s", job_ids, exc)
