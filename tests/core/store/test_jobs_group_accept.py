"""Accepts asked for together share a transaction (one commit, on SQLite one
disk sync), in the order they were asked, and each caller still gets its own
row, its own dedup answer and its own failure (SQLite and PostgreSQL)."""

from __future__ import annotations

import asyncio
import zlib
from datetime import datetime
from typing import cast
from uuid import uuid4

import pytest
import sqlalchemy as sa

from core.errors import StoreRejected, StoreUnavailable
from core.store import Repo
from core.store.jobs import QUEUED, AcceptedRow, JobStore
from core.store.models import StoredJob, utcnow
from tests.fakes.db_transactions import Commits

LEASE = 60.0


async def accept(
    jobs: JobStore,
    conversation: str,
    *,
    dedup: str | None = None,
    now: datetime | None = None,
    request_id: str = "r",
) -> AcceptedRow:
    return await jobs.accept(
        kind="test",
        conversation=conversation,
        payload={"text": conversation},
        request_id=request_id,
        dedup_key=dedup,
        owner="p1",
        now=now or utcnow(),
        lease=LEASE,
    )


async def test_accepts_asked_together_share_one_transaction_in_order(repo: Repo) -> None:
    jobs = JobStore(repo)
    before = await accept(jobs, "warm")  # a lone accept goes at once
    commits = Commits(repo.db)
    names = ["A", "B", "A", "C", "B"]
    got = await asyncio.gather(*(accept(jobs, n, request_id=f"r{i}") for i, n in enumerate(names)))
    assert commits.n == 1
    ids = [g.job.id for g in got]
    assert ids == sorted(ids) and len(set(ids)) == len(ids) and ids[0] > before.job.id
    assert all(g.fresh for g in got)
    assert [g.job.conversation for g in got] == names
    assert [g.job.request_id for g in got] == [f"r{i}" for i in range(5)]
    assert {g.job.state for g in got} == {QUEUED}
    rows = await jobs.get(ids)
    assert [rows[i].payload for i in ids] == [{"text": n} for n in names]
    # one conversation's jobs run in the order they were accepted
    started = await jobs.claim(owner="p1", kinds=["test"], now=utcnow(), lease=LEASE, limit=10)
    assert [r.id for r in started] == [before.job.id, ids[0], ids[1], ids[3]]


async def test_a_known_dedup_key_gives_its_job_within_and_across_batches(repo: Repo) -> None:
    jobs = JobStore(repo)
    old = await accept(jobs, "A", dedup="E0")
    got = await asyncio.gather(
        accept(jobs, "A", dedup="E1"),
        accept(jobs, "B", dedup="E0"),  # known before this batch
        accept(jobs, "A", dedup="E1"),  # the same event twice in one batch
        accept(jobs, "C"),
        accept(jobs, "C"),  # no key: two jobs
    )
    assert [g.fresh for g in got] == [True, False, False, True, True]
    assert got[1].job.id == old.job.id and got[1].job.conversation == "A"
    assert got[2].job.id == got[0].job.id
    assert got[3].job.id != got[4].job.id
    again = await asyncio.gather(accept(jobs, "A", dedup="E1"), accept(jobs, "D", dedup="E2"))
    assert [g.fresh for g in again] == [False, True]
    assert again[0].job.id == got[0].job.id
    ids = {old.job.id, *(g.job.id for g in [*got, *again])}
    assert len(ids) == 5  # E0, E1, two without a key, E2
    assert set(await jobs.get(range(1, max(ids) + 10))) == ids


async def test_a_refused_accept_fails_alone(repo: Repo) -> None:
    jobs = JobStore(repo)
    naive = datetime.now()  # the store keeps aware UTC times: the database layer refuses it

    async def one(i: int) -> int | None:
        try:
            return (
                await accept(jobs, f"c{i}", dedup=f"E{i}", now=naive if i == 1 else None)
            ).job.id
        except StoreRejected:
            return None

    got = await asyncio.gather(*(one(i) for i in range(3)))
    assert got[1] is None and got[0] is not None and got[2] is not None
    assert got[0] < got[2]
    # nothing was recorded for the refused one: its key is still free
    again = await accept(jobs, "c1", dedup="E1")
    assert again.fresh and again.job.id > got[2]


async def test_an_accept_whose_caller_went_away_first_is_not_recorded(repo: Repo) -> None:
    jobs = JobStore(repo)
    await accept(jobs, "warm")
    tasks = [asyncio.ensure_future(accept(jobs, f"c{i}", request_id=f"r{i}")) for i in range(3)]
    await asyncio.sleep(0)  # all three asked, none written yet
    tasks[1].cancel()
    results = await asyncio.gather(*tasks, return_exceptions=True)
    assert isinstance(results[1], asyncio.CancelledError)
    assert all(isinstance(r, AcceptedRow) and r.fresh for r in (results[0], results[2]))
    assert await jobs.by_request("r1") is None


@pytest.mark.parametrize("n", [1, 70])
async def test_any_number_of_accepts_all_land_in_order(repo: Repo, n: int) -> None:
    """More than fit one transaction (GROUP_LIMIT) go in the next ones."""
    jobs = JobStore(repo)
    got = await asyncio.gather(*(accept(jobs, f"c{i % 3}", request_id=f"r{i}") for i in range(n)))
    ids = [g.job.id for g in got]
    assert ids == sorted(ids) and len(set(ids)) == n
    assert [g.job.request_id for g in got] == [f"r{i}" for i in range(n)]


async def test_accepts_and_checkpoints_share_a_transaction(repo: Repo) -> None:
    jobs = JobStore(repo)
    first = await accept(jobs, "A")
    await jobs.claim(owner="p1", kinds=["test"], now=utcnow(), lease=LEASE, limit=1)
    commits = Commits(repo.db)
    saved, got = await asyncio.gather(
        jobs.save_checkpoint(first.job.id, owner="p1", checkpoint={"n": 1}, now=utcnow()),
        accept(jobs, "B"),
    )
    assert saved is None and got.fresh
    assert commits.n == 1
    assert (await jobs.get([first.job.id]))[first.job.id].checkpoint == {"n": 1}


async def test_postgres_one_conversations_jobs_get_ids_in_commit_order(pg_repo: Repo) -> None:
    """A batch waits for the conversation's lock, held by another process's
    accept that has its id but has not committed: the batch's job comes after."""
    repo = pg_repo
    jobs = JobStore(repo)
    conversation, other = f"c-{uuid4().hex}", f"o-{uuid4().hex}"
    key = zlib.crc32(conversation.encode()) - (1 << 31)
    table = cast(sa.Table, StoredJob.__table__)
    async with asyncio.timeout(20), repo.db.engine.connect() as held:
        await held.execute(sa.text("SELECT pg_advisory_xact_lock(:k)"), {"k": key})
        theirs = await held.scalar(
            sa.insert(table)
            .values(
                kind="test",
                conversation=conversation,
                request_id="theirs",
                state=QUEUED,
                payload={},
                attempts=0,
                created_at=utcnow(),
                updated_at=utcnow(),
            )
            .returning(table.c.id)
        )
        batch = asyncio.ensure_future(
            asyncio.gather(accept(jobs, other), accept(jobs, conversation))
        )
        async with repo.db.engine.connect() as look:
            waiting = sa.text(
                "SELECT count(*) FROM pg_locks"
                " WHERE locktype = 'advisory' AND NOT granted AND objid = :objid"
            )
            while not await look.scalar(waiting, {"objid": key & 0xFFFFFFFF}):
                assert not batch.done()
                await asyncio.sleep(0.01)  # the batch is in another connection: poll
        await held.commit()
        got = await batch
    assert theirs is not None
    assert all(g.job.id > theirs for g in got)


async def test_every_caller_of_a_batch_hears_the_store_is_unavailable(dead_repo: Repo) -> None:
    jobs = JobStore(dead_repo)
    async with asyncio.timeout(20):
        results = await asyncio.gather(
            *(accept(jobs, f"c{i}") for i in range(3)), return_exceptions=True
        )
    assert all(isinstance(r, StoreUnavailable) for r in results)
    assert "record the request" in str(results[0])
