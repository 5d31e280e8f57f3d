"""Checkpoints and finishes asked for together share a transaction (one
commit, on SQLite one disk sync), and each caller still learns its own
outcome: written, not held (LeaseLost / False), or refused (SQLite and
PostgreSQL)."""

from __future__ import annotations

import asyncio
from datetime import datetime, timedelta
from typing import Any

import pytest
import sqlalchemy as sa

from core.errors import LeaseLost, StoreRejected, StoreUnavailable
from core.store import Repo
from core.store.jobs import DONE, JobStore
from core.store.models import StoredJob, utcnow
from tests.core.store.builders import running
from tests.fakes.db_transactions import Commits, transactions

LEASE = 60.0


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


async def _times(repo: Repo, ids: list[int]) -> dict[int, Any]:
    """updated_at, finished_at and error of each job (not in a JobRow)."""
    c = StoredJob.__table__.c
    async with repo.db.engine.connect() as conn:
        rows = await conn.execute(
            sa.select(c.id, c.updated_at, c.finished_at, c.error).where(c.id.in_(ids))
        )
        return {r.id: r for r in rows}


def _updates_of_jobs(done: list[list[str]]) -> list[str]:
    return [s for t in done for s in t if s.upper().startswith("UPDATE TURN_JOBS")]


async def test_on_postgresql_a_group_of_checkpoints_is_one_statement(pg_repo: Repo) -> None:
    """Each write still learns its own outcome: the statement returns the
    ids it changed (a job another process took is not among them)."""
    jobs = JobStore(pg_repo)
    ids = await running(jobs, 5)
    taken = ids[2]
    assert await jobs.release([taken], owner="p1", now=utcnow()) == 1
    later = utcnow() + timedelta(seconds=1)
    assert [
        r.id for r in await jobs.claim(owner="p2", kinds=["test"], now=later, lease=LEASE, limit=1)
    ] == [taken]

    async def save(job_id: int) -> str:
        try:
            cp = {"n": job_id, "text": 'naïve ☃ "quoted"'}
            await jobs.save_checkpoint(job_id, owner="p1", checkpoint=cp, now=utcnow())
        except LeaseLost:
            return "lost"
        return "saved"

    first = asyncio.ensure_future(save(ids[0]))  # alone: the group forms behind it
    await asyncio.sleep(0)
    with transactions(pg_repo.db) as done:
        outcomes = await asyncio.gather(first, *(save(j) for j in ids[1:]))
    assert outcomes == ["saved", "saved", "lost", "saved", "saved"]
    assert len(_updates_of_jobs(done)) == 2  # the first alone, then the other four as one
    rows, times = await jobs.get(ids), await _times(pg_repo, ids)
    for j in ids:
        expected = None if j == taken else {"n": j, "text": 'naïve ☃ "quoted"'}
        assert rows[j].checkpoint == expected
        assert times[j].updated_at.tzinfo is not None


async def test_on_postgresql_a_group_of_finishes_is_one_statement(pg_repo: Repo) -> None:
    jobs = JobStore(pg_repo)
    ids = await running(jobs, 4)
    for j in ids:  # the summaries finish keeps come from the last checkpoint
        cp = {"v": 1, "plan": [{"n": j}], "reply": {"text": f"answer {j}", "files": ["x"]}}
        await jobs.save_checkpoint(j, owner="p1", checkpoint=cp, now=utcnow())
    taken = ids[3]
    assert await jobs.release([taken], owner="p1", now=utcnow()) == 1
    when = utcnow()
    with transactions(pg_repo.db) as done:
        finished = await asyncio.gather(
            *(
                jobs.finish(j, owner="p1", now=when, error="boom" if j == ids[1] else None)
                for j in ids
            )
        )
    assert finished == [True, True, True, False]
    assert len(_updates_of_jobs(done)) == 1  # asked before the first transaction began
    rows, times = await jobs.get(ids), await _times(pg_repo, ids)
    for j in ids[:3]:
        assert (rows[j].state, rows[j].lease_owner, rows[j].payload) == (DONE, None, {})
        summary = rows[j].checkpoint or {}
        assert (summary["plan"], summary["reply"]) == (
            [{"n": j}],
            {"text": f"answer {j}", "files": []},
        )
        assert times[j].finished_at == when == times[j].updated_at
        assert times[j].error == ("boom" if j == ids[1] else None)
    assert rows[taken].state != DONE and times[taken].finished_at is None


async def test_two_checkpoints_of_one_job_asked_together_land_in_order(repo: Repo) -> None:
    """One statement for a group cannot order two rows of one job: such a
    group goes one write at a time, the later checkpoint last."""
    jobs = JobStore(repo)
    (job,) = await running(jobs, 1)
    first = asyncio.ensure_future(
        jobs.save_checkpoint(job, owner="p1", checkpoint={"step": 0}, now=utcnow())
    )
    await asyncio.sleep(0)  # goes alone; the next two queue behind it together
    await asyncio.gather(
        first,
        jobs.save_checkpoint(job, owner="p1", checkpoint={"step": 1}, now=utcnow()),
        jobs.save_checkpoint(job, owner="p1", checkpoint={"step": 2}, now=utcnow()),
    )
    assert (await jobs.get([job]))[job].checkpoint == {"step": 2}


async def test_checkpoints_and_finishes_of_other_jobs_go_as_one_statement_each(
    repo: Repo,
) -> None:
    """Asked interleaved (as a burst's requests end at different stages),
    a group's writes of distinct jobs go grouped by statement."""
    jobs = JobStore(repo)
    ids = await running(jobs, 6)
    for j in ids[1::2]:  # these finish: their summaries known
        await jobs.save_checkpoint(j, owner="p1", checkpoint={"n": j}, now=utcnow())
    with transactions(repo.db) as done:
        outcomes = await asyncio.gather(
            *(
                jobs.save_checkpoint(j, owner="p1", checkpoint={"again": j}, now=utcnow())
                if k % 2 == 0
                else jobs.finish(j, owner="p1", now=utcnow())
                for k, j in enumerate(ids)
            )
        )
    assert outcomes == [None, True] * 3
    assert len(_updates_of_jobs(done)) == 2  # asked before the first transaction began
    rows = await jobs.get(ids)
    assert [rows[j].checkpoint for j in ids[0::2]] == [{"again": j} for j in ids[0::2]]
    assert all(rows[j].state == DONE for j in ids[1::2])
