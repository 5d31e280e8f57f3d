"""Checkpoints and finishes asked for together share a transaction (one
commit, on SQLite one disk sync), and each caller still learns its own
outcome: written, not held (LeaseLost / False), or refused (SQLite and
PostgreSQL)."""

from __future__ import annotations

import asyncio
from datetime import datetime, timedelta

import pytest

from core.errors import LeaseLost, StoreRejected, StoreUnavailable
from core.store import Repo
from core.store.jobs import DONE, JobStore
from core.store.models import utcnow
from tests.fakes.db_transactions import Commits

LEASE = 60.0


async def running(jobs: JobStore, n: int, owner: str = "p1") -> list[int]:
    ids = []
    for i in range(n):
        accepted = await jobs.accept(
            kind="test",
            conversation=f"c{i}",
            payload={},
            request_id=f"r{i}",
            dedup_key=None,
            owner=owner,
            now=utcnow(),
            lease=LEASE,
        )
        ids.append(accepted.job.id)
    started = await jobs.claim(owner=owner, kinds=["test"], now=utcnow(), lease=LEASE, limit=n)
    assert sorted(r.id for r in started) == ids
    return ids


async def test_checkpoints_asked_together_share_one_transaction(repo: Repo) -> None:
    jobs = JobStore(repo)
    ids = await running(jobs, 4)
    taken = ids[3]  # another process has this one now
    assert await jobs.release([taken], owner="p1", now=utcnow()) == 1
    later = utcnow() + timedelta(seconds=1)
    stolen = await jobs.claim(owner="p2", kinds=["test"], now=later, lease=LEASE, limit=1)
    assert [r.id for r in stolen] == [taken]
    commits = Commits(repo.db)

    async def save(job_id: int) -> str:
        try:
            await jobs.save_checkpoint(job_id, owner="p1", checkpoint={"n": job_id}, now=utcnow())
        except LeaseLost:
            return "lost"
        return "saved"

    outcomes = await asyncio.gather(*(save(j) for j in ids))
    assert outcomes == ["saved", "saved", "saved", "lost"]
    assert commits.n == 1
    rows = await jobs.get(ids)
    assert [rows[j].checkpoint for j in ids] == [{"n": j} for j in ids[:3]] + [None]
    # finishing together, the summary known from the checkpoints just written
    commits.n = 0
    done = await asyncio.gather(*(jobs.finish(j, owner="p1", now=utcnow()) for j in ids[:3]))
    assert done == [True, True, True]
    assert commits.n == 1
    assert not await jobs.finish(taken, owner="p1", now=utcnow())
    rows = await jobs.get(ids)
    assert [rows[j].state for j in ids[:3]] == [DONE] * 3
    assert rows[taken].lease_owner == "p2"


async def test_a_refused_write_fails_alone(repo: Repo) -> None:
    jobs = JobStore(repo)
    ids = await running(jobs, 3)
    naive = datetime.now()  # the store keeps aware UTC times: the database layer refuses it

    async def save(job_id: int) -> str:
        when = naive if job_id == ids[1] else utcnow()
        try:
            await jobs.save_checkpoint(job_id, owner="p1", checkpoint={"n": job_id}, now=when)
        except StoreRejected:
            return "refused"
        return "saved"

    assert await asyncio.gather(*(save(j) for j in ids)) == ["saved", "refused", "saved"]
    rows = await jobs.get(ids)
    assert [rows[j].checkpoint for j in ids] == [{"n": ids[0]}, None, {"n": ids[2]}]
    # the job whose write was refused is still held and takes the next one
    await jobs.save_checkpoint(ids[1], owner="p1", checkpoint={"again": True}, now=utcnow())
    assert (await jobs.get([ids[1]]))[ids[1]].checkpoint == {"again": True}


async def test_a_caller_that_goes_away_does_not_stop_the_others(repo: Repo) -> None:
    jobs = JobStore(repo)
    ids = await running(jobs, 3)
    tasks = [
        asyncio.ensure_future(
            jobs.save_checkpoint(j, owner="p1", checkpoint={"n": j}, now=utcnow())
        )
        for j in ids
    ]
    await asyncio.sleep(0)  # all three asked
    tasks[0].cancel()
    results = await asyncio.gather(*tasks, return_exceptions=True)
    assert isinstance(results[0], asyncio.CancelledError)
    assert results[1:] == [None, None]
    rows = await jobs.get(ids)
    assert [rows[j].checkpoint for j in ids[1:]] == [{"n": j} for j in ids[1:]]


@pytest.mark.parametrize("n", [1, 70])
async def test_any_number_of_writes_all_land(repo: Repo, n: int) -> None:
    """More than fit one transaction (GROUP_LIMIT) go in the next ones."""
    jobs = JobStore(repo)
    ids = await running(jobs, n)
    await asyncio.gather(
        *(jobs.save_checkpoint(j, owner="p1", checkpoint={"n": j}, now=utcnow()) for j in ids)
    )
    rows = await jobs.get(ids)
    assert all(rows[j].checkpoint == {"n": j} for j in ids)


async def test_settle_waits_for_queued_writes_or_stops_them(repo: Repo) -> None:
    jobs = JobStore(repo)
    ids = await running(jobs, 2)
    first = asyncio.ensure_future(
        jobs.save_checkpoint(ids[0], owner="p1", checkpoint={"n": 1}, now=utcnow())
    )
    await asyncio.sleep(0)
    first.cancel()  # its caller went away: the write still lands, and settle waits for it
    await jobs.settle()
    assert (await jobs.get([ids[0]]))[ids[0]].checkpoint == {"n": 1}
    second = asyncio.ensure_future(
        jobs.save_checkpoint(ids[1], owner="p1", checkpoint={"n": 2}, now=utcnow())
    )
    await asyncio.sleep(0)
    await jobs.settle(cancel=True)  # a crash: the queued write is dropped
    with pytest.raises((StoreUnavailable, asyncio.CancelledError)):
        await second
    assert (await jobs.get([ids[1]]))[ids[1]].checkpoint is None
