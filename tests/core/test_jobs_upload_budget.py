"""Admission weighs uploads (SQLite and PostgreSQL): a process runs at most
``max_inflight`` jobs, holding at most ``max_upload_bytes`` of declared
uploads between them.  A job with files that does not fit waits, jobs with
files behind it wait too, text-only ones go past; one bigger than the whole
budget runs alone; one conversation still runs in order.  Jobs end when the
test opens their gate; nothing depends on how long anything takes."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest

from core.errors import RunFailed
from core.jobs import JobQueue
from core.store import Repo
from core.store.jobs import JobStore
from core.types import ConversationKey, Job, Notice, QueuePosition, new_request_id

KIND = "gated"
BUDGET = 100


class GatedRunner:
    """Runs a job until the test opens its gate; records starts, notices and
    the declared upload bytes running at once."""

    def __init__(self) -> None:
        self.weights: dict[int, int] = {}  # job id → declared upload bytes
        self.gates: dict[int, asyncio.Event] = {}
        self.started: list[int] = []
        self.running: set[int] = set()
        self.notices: list[tuple[int, Notice]] = []
        self.peak_bytes = 0
        self.ran_with: dict[int, set[int]] = {}  # job → the jobs running when it started
        self.changed = asyncio.Condition()

    def gate(self, job_id: int) -> asyncio.Event:
        return self.gates.setdefault(job_id, asyncio.Event())

    async def run(self, job: Job) -> None:
        self.ran_with[job.id] = set(self.running)
        self.running.add(job.id)
        self.peak_bytes = max(self.peak_bytes, sum(self.weights[j] for j in self.running))
        await self._record(self.started, job.id)
        try:
            await self.gate(job.id).wait()
        finally:
            self.running.discard(job.id)

    async def notify(self, job: Job, notice: Notice) -> None:
        await self._record(self.notices, (job.id, notice))

    async def give_up(self, job: Job, failure: RunFailed) -> None:
        raise AssertionError(f"job {job.id} given up: {failure}")

    async def _record(self, where: list[Any], item: Any) -> None:
        async with self.changed:
            where.append(item)
            self.changed.notify_all()

    async def wait(self, predicate: Callable[[], bool], within: float = 20.0) -> None:
        async with self.changed:
            await asyncio.wait_for(self.changed.wait_for(predicate), within)

    def told(self, job_id: int) -> bool:
        return any(j == job_id for j, _ in self.notices)


class Harness:
    def __init__(self, queue: JobQueue, runner: GatedRunner) -> None:
        self.queue = queue
        self.runner = runner
        self.outcomes: dict[int, asyncio.Task[str]] = {}

    async def submit(self, conversation: str, upload_bytes: int = 0) -> int:
        """Accept a job and ask the queue to process it (as an adapter does)."""
        key = ConversationKey("cli", "local", conversation, None)
        accepted = await self.queue.accept(
            KIND, key, {}, request_id=new_request_id(), upload_bytes=upload_bytes
        )
        job_id = accepted.job.id
        self.runner.weights[job_id] = upload_bytes
        self.outcomes[job_id] = asyncio.create_task(self.queue.process(job_id))
        return job_id

    async def finish(self, *job_ids: int) -> None:
        for job_id in job_ids:
            self.runner.gate(job_id).set()
        assert await asyncio.gather(*(self.outcomes[j] for j in job_ids)) == ["done"] * len(job_ids)

    async def round(self) -> None:
        """One more scheduler round: whatever may start has started after it."""
        await self.queue._tick()


@pytest.fixture
async def harness(repo: Repo) -> AsyncIterator[Harness]:
    queue = JobQueue(JobStore(repo), max_inflight=8, max_upload_bytes=BUDGET, poll=0.05)
    runner = GatedRunner()
    queue.register(KIND, runner)
    h = Harness(queue, runner)
    try:
        yield h
    finally:
        for job_id in list(h.outcomes):
            runner.gate(job_id).set()
        await queue.aclose()  # a job that never started is handed on, not waited for
        await asyncio.gather(*h.outcomes.values(), return_exceptions=True)


async def test_a_job_with_uploads_that_does_not_fit_waits_and_runs_after(
    harness: Harness,
) -> None:
    h, runner = harness, harness.runner
    first = await h.submit("a", upload_bytes=60)
    big = await h.submit("b", upload_bytes=60)  # 60 + 60 > 100
    text = await h.submit("c")
    await runner.wait(lambda: set(runner.started) == {first, text} and runner.told(big))
    assert dict(runner.notices)[big] == QueuePosition(0)
    await h.round()
    assert big not in runner.started  # waits while the first holds its bytes
    assert h.queue.upload_bytes_running == 60

    await h.finish(first)
    await runner.wait(lambda: big in runner.started)
    await h.finish(big, text)
    assert runner.started == [first, text, big]
    assert runner.peak_bytes == 60
    assert h.queue.upload_bytes_running == 0


async def test_later_uploads_wait_behind_one_that_does_not_fit_text_goes_past(
    harness: Harness,
) -> None:
    h, runner = harness, harness.runner
    first = await h.submit("a", upload_bytes=60)
    blocked = await h.submit("b", upload_bytes=60)
    small = await h.submit("c", upload_bytes=30)  # would fit (60 + 30), but is behind
    text = await h.submit("d")
    await runner.wait(
        lambda: set(runner.started) == {first, text} and runner.told(blocked) and runner.told(small)
    )
    await h.round()
    assert runner.started == [first, text]

    await h.finish(first)  # room for both: the first that waited, then the one behind it
    await runner.wait(lambda: {blocked, small} <= set(runner.started))
    assert runner.started == [first, text, blocked, small]
    await h.finish(blocked, small, text)
    assert runner.peak_bytes == 90


async def test_a_job_bigger_than_the_budget_runs_alone(harness: Harness) -> None:
    h, runner = harness, harness.runner
    small = await h.submit("a", upload_bytes=30)
    huge = await h.submit("b", upload_bytes=150)  # more than the whole budget
    after = await h.submit("c", upload_bytes=10)
    text = await h.submit("d")
    await runner.wait(
        lambda: set(runner.started) == {small, text} and runner.told(huge) and runner.told(after)
    )
    await h.round()
    assert runner.started == [small, text]  # the huge one waits for the uploads to end

    await h.finish(small)
    await runner.wait(lambda: huge in runner.started)
    await h.round()
    assert after not in runner.started  # nothing with uploads beside it
    assert runner.ran_with[huge] == {text}  # text only beside it

    late_text = await h.submit("e")
    await runner.wait(lambda: late_text in runner.started)  # text still goes on
    assert after not in runner.started

    await h.finish(huge)
    await runner.wait(lambda: after in runner.started)
    await h.finish(after, text, late_text)
    assert runner.started == [small, text, huge, late_text, after]
    assert runner.peak_bytes == 150


async def test_one_conversation_still_runs_in_order(harness: Harness) -> None:
    """A text-only job goes past a waiting upload, but never past an earlier
    job of its own conversation."""
    h, runner = harness, harness.runner
    other = await h.submit("x", upload_bytes=60)
    upload = await h.submit("k", upload_bytes=60)  # waits for bytes
    follow_up = await h.submit("k")  # same conversation: waits for it
    elsewhere = await h.submit("y")
    await runner.wait(lambda: set(runner.started) == {other, elsewhere} and runner.told(follow_up))
    assert dict(runner.notices)[follow_up] == QueuePosition(1)  # its conversation's one ahead
    await h.round()
    assert follow_up not in runner.started

    await h.finish(other)
    await runner.wait(lambda: upload in runner.started)
    await h.round()
    assert follow_up not in runner.started  # its conversation's turn is still running
    await h.finish(upload)
    await runner.wait(lambda: follow_up in runner.started)
    await h.finish(follow_up, elsewhere)
    assert runner.started == [other, elsewhere, upload, follow_up]


async def test_without_a_budget_only_the_count_bounds(repo: Repo) -> None:
    queue = JobQueue(JobStore(repo), max_inflight=2, max_upload_bytes=0, poll=0.05)
    runner = GatedRunner()
    queue.register(KIND, runner)
    h = Harness(queue, runner)
    try:
        a = await h.submit("a", upload_bytes=10**12)
        b = await h.submit("b", upload_bytes=10**12)
        c = await h.submit("c")
        await runner.wait(lambda: runner.started == [a, b] and runner.told(c))
        await h.finish(a)
        await runner.wait(lambda: c in runner.started)
        await h.finish(b, c)
    finally:
        await queue.aclose()
