"""The job table: accept with a dedup key, claim in order with a lease, one
conversation at a time, fenced writes, release, expiry (SQLite and PostgreSQL)."""

from __future__ import annotations

from datetime import timedelta

import pytest

from core.errors import LeaseLost
from core.store import Repo
from core.store.jobs import DONE, QUEUED, RUNNING, JobStore
from core.store.models import utcnow

LEASE = 60.0


async def accept(jobs: JobStore, conversation: str, owner: str = "p1", dedup: str | None = None):  # type: ignore[no-untyped-def]
    return await jobs.accept(
        kind="test",
        conversation=conversation,
        payload={"text": conversation},
        request_id="r",
        dedup_key=dedup,
        owner=owner,
        now=utcnow(),
        lease=LEASE,
    )


async def claim(jobs: JobStore, owner: str = "p1", *, later: float = 0.0) -> list[int]:
    now = utcnow() + timedelta(seconds=later)
    rows = await jobs.claim(owner=owner, kinds=["test"], now=now, lease=LEASE, limit=10)
    return [r.id for r in rows]


async def test_claims_in_order_one_job_per_conversation_at_a_time(repo: Repo) -> None:
    jobs = JobStore(repo)
    a1 = (await accept(jobs, "A")).job.id
    b1 = (await accept(jobs, "B")).job.id
    a2 = (await accept(jobs, "A")).job.id
    assert a1 < b1 < a2  # acceptance order

    assert await claim(jobs) == [a1, b1]  # a2 waits for a1
    assert await claim(jobs) == []
    assert await jobs.finish(a1, owner="p1", now=utcnow())
    assert await claim(jobs) == [a2]
    rows = await jobs.get([a1, b1, a2])
    assert [rows[i].state for i in (a1, b1, a2)] == [DONE, RUNNING, RUNNING]
    assert rows[a1].payload == {} and rows[a1].lease_owner is None  # the payload is dropped


async def test_another_process_takes_a_job_only_when_its_lease_ran_out(repo: Repo) -> None:
    jobs = JobStore(repo)
    running = (await accept(jobs, "B", owner="p1")).job.id
    queued = (await accept(jobs, "A", owner="p1")).job.id  # reserved by p1, not started
    started = await jobs.claim(owner="p1", kinds=["test"], now=utcnow(), lease=LEASE, limit=1)
    assert [r.id for r in started] == [running]
    assert await claim(jobs, "p2") == []  # p1 is alive: its leases hold
    assert await claim(jobs, "p2", later=LEASE + 1) == [running, queued]
    rows = await jobs.get([queued, running])
    assert {r.lease_owner for r in rows.values()} == {"p2"}
    assert [rows[queued].attempts, rows[running].attempts] == [1, 2]  # started once, twice
    # p1 lost them: its writes are refused
    with pytest.raises(LeaseLost):
        await jobs.save_checkpoint(running, owner="p1", checkpoint={"x": 1}, now=utcnow())
    assert not await jobs.finish(running, owner="p1", now=utcnow())
    assert await jobs.heartbeat(owner="p1", now=utcnow(), lease=LEASE) == set()
    assert await jobs.heartbeat(owner="p2", now=utcnow(), lease=LEASE) == {queued, running}


async def test_released_jobs_are_free_at_once(repo: Repo) -> None:
    jobs = JobStore(repo)
    job = (await accept(jobs, "A", owner="p1")).job.id
    assert await claim(jobs, "p1") == [job]
    assert await jobs.release([job], owner="p1", now=utcnow()) == 1
    row = (await jobs.get([job]))[job]
    assert (row.state, row.lease_owner) == (QUEUED, None)
    assert await claim(jobs, "p2") == [job]


async def test_a_known_event_finds_its_job(repo: Repo) -> None:
    jobs = JobStore(repo)
    first = await accept(jobs, "A", dedup="slack:Ev1")
    again = await accept(jobs, "A", owner="p2", dedup="slack:Ev1")
    assert first.fresh and not again.fresh
    assert again.job.id == first.job.id and again.job.lease_owner == "p1"
    other = await accept(jobs, "A", dedup="slack:Ev2")
    assert other.fresh and other.job.id != first.job.id


async def test_unsafe_text_in_a_payload_is_stored(repo: Repo) -> None:
    jobs = JobStore(repo)
    accepted = await jobs.accept(
        kind="test",
        conversation="A",
        payload={"text": "nul \x00 here", "score": float("nan")},
        request_id="r",
        dedup_key=None,
        owner="p1",
        now=utcnow(),
        lease=LEASE,
    )
    row = (await jobs.get([accepted.job.id]))[accepted.job.id]
    assert row.payload == {"text": "nul  here", "score": None}


async def test_finished_jobs_are_pruned_after_a_while(repo: Repo) -> None:
    jobs = JobStore(repo)
    job = (await accept(jobs, "A", dedup="slack:Ev9")).job.id
    assert await claim(jobs) == [job]
    await jobs.finish(job, owner="p1", now=utcnow())
    assert await jobs.prune(before=utcnow() - timedelta(hours=1)) == 0
    assert await jobs.prune(before=utcnow() + timedelta(seconds=1)) == 1
    assert (await accept(jobs, "A", dedup="slack:Ev9")).fresh


async def test_a_claim_starts_no_more_than_its_limit_oldest_first(repo: Repo) -> None:
    """One statement picks and starts the jobs: never more than ``limit``
    (PostgreSQL may evaluate a subquery again), the oldest heads first, each
    row as a whole with its new lease and attempt."""
    jobs = JobStore(repo)
    ids = [(await accept(jobs, f"c{i}")).job.id for i in range(5)]
    now = utcnow()
    first = await jobs.claim(owner="p1", kinds=["test"], now=now, lease=LEASE, limit=2)
    assert [r.id for r in first] == ids[:2]
    assert {(r.state, r.lease_owner, r.attempts) for r in first} == {(RUNNING, "p1", 1)}
    assert [r.payload for r in first] == [{"text": "c0"}, {"text": "c1"}]
    assert all(r.lease_expires == now + timedelta(seconds=LEASE) for r in first)
    second = await jobs.claim(owner="p1", kinds=["test"], now=now, lease=LEASE, limit=1)
    assert [r.id for r in second] == ids[2:3]
    assert await jobs.claim(owner="p1", kinds=["other"], now=now, lease=LEASE, limit=9) == []
    rows = await jobs.get(ids)
    assert [rows[i].state for i in ids] == [RUNNING] * 3 + [QUEUED] * 2


async def test_queue_slots_carry_the_lease(repo: Repo) -> None:
    jobs = JobStore(repo)
    a = (await accept(jobs, "A", owner="p1")).job
    b = (await accept(jobs, "B", owner="p2")).job
    assert await jobs.finish(a.id, owner="p1", now=utcnow())
    (slot,) = await jobs.unfinished(b.id)
    assert (slot.id, slot.lease_owner, slot.lease_expires) == (b.id, "p2", b.lease_expires)
