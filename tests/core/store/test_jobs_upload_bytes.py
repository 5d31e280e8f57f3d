"""Jobs' declared upload bytes (SQLite and PostgreSQL): the column round-trips,
the claim statement weighs them against a byte budget, and the migration
adds the column to a database that already holds jobs."""

from __future__ import annotations

from pathlib import Path

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from core.store import Database, MediaStore, Repo
from core.store.jobs import QUEUED, JobStore
from core.store.models import UTCDateTime, utcnow

LEASE = 60.0


async def accept(jobs: JobStore, conversation: str, upload_bytes: int = 0, **kw: str) -> int:
    accepted = await jobs.accept(
        kind="test",
        conversation=conversation,
        payload={},
        request_id="r",
        dedup_key=kw.get("dedup"),
        owner=kw.get("owner", "p1"),
        now=utcnow(),
        lease=LEASE,
        upload_bytes=upload_bytes,
    )
    return accepted.job.id


async def claim(
    jobs: JobStore,
    *,
    limit: int = 10,
    budget: int | None = 100,
    held: int = 0,
    owner: str = "p1",
) -> list[int]:
    rows = await jobs.claim(
        owner=owner,
        kinds=["test"],
        now=utcnow(),
        lease=LEASE,
        limit=limit,
        upload_budget=budget,
        uploads_held=held,
    )
    return [r.id for r in rows]


async def test_the_declared_bytes_round_trip(repo: Repo) -> None:
    jobs = JobStore(repo)
    first = await jobs.accept(
        kind="test",
        conversation="A",
        payload={},
        request_id="r",
        dedup_key="slack:Ev1",
        owner="p1",
        now=utcnow(),
        lease=LEASE,
        upload_bytes=3 * 20 * 1024 * 1024,
    )
    assert first.job.upload_bytes == 62_914_560
    again = await jobs.accept(
        kind="test",
        conversation="A",
        payload={},
        request_id="r",
        dedup_key="slack:Ev1",
        owner="p2",
        now=utcnow(),
        lease=LEASE,
        upload_bytes=1,
    )
    assert not again.fresh and again.job.upload_bytes == 62_914_560  # the first record's
    text = await accept(jobs, "B")
    big = await accept(jobs, "C", upload_bytes=5 * 1024**3)  # past 32 bits
    rows = await jobs.get([first.job.id, text, big])
    assert [rows[i].upload_bytes for i in (first.job.id, text, big)] == [62_914_560, 0, 5 * 1024**3]
    claimed = await jobs.claim(owner="p1", kinds=["test"], now=utcnow(), lease=LEASE, limit=9)
    assert {r.id: r.upload_bytes for r in claimed} == {
        first.job.id: 62_914_560,
        text: 0,
        big: 5 * 1024**3,
    }


async def test_uploads_start_while_they_fit_the_rest_wait_in_order(repo: Repo) -> None:
    jobs = JobStore(repo)
    a = await accept(jobs, "a", 40)
    b = await accept(jobs, "b", 50)
    c = await accept(jobs, "c", 20)  # 40 + 50 + 20 > 100: waits
    d = await accept(jobs, "d")
    e = await accept(jobs, "e", 5)  # would fit, but is behind c
    assert await claim(jobs) == [a, b, d]
    assert await claim(jobs, held=90) == []  # c still does not fit; e waits behind it
    assert await claim(jobs, held=40) == [c, e]  # room for 60: c, then e behind it
    rows = await jobs.get([c, e])
    assert rows[c].state != QUEUED and rows[e].state != QUEUED


async def test_the_count_covers_both_kinds_oldest_first(repo: Repo) -> None:
    jobs = JobStore(repo)
    ids = [await accept(jobs, f"c{i}", 10 * (i % 2)) for i in range(6)]  # text, 10, text, 10…
    assert await claim(jobs, limit=3) == ids[:3]
    assert await claim(jobs, limit=2, held=10) == ids[3:5]
    assert await claim(jobs, limit=5, held=100) == []  # only an upload is left: no room
    assert await claim(jobs, limit=5, held=90) == ids[5:]


async def test_one_bigger_than_the_budget_starts_only_when_no_upload_runs(repo: Repo) -> None:
    jobs = JobStore(repo)
    huge = await accept(jobs, "a", 500)
    small = await accept(jobs, "b", 10)
    text = await accept(jobs, "c")
    assert await claim(jobs, held=10) == [text]  # an upload runs here: the huge one waits
    assert await claim(jobs, held=0) == [huge]  # alone, the small one behind it
    assert await claim(jobs, held=500) == []
    assert await claim(jobs, held=0) == [small]


async def test_the_budget_is_each_process_own(repo: Repo) -> None:
    jobs = JobStore(repo)
    a = await accept(jobs, "a", 80, owner="p1")
    b = await accept(jobs, "b", 80, owner="p1")
    assert await claim(jobs) == [a]
    await jobs.release_reserved(owner="p1", now=utcnow())  # b free for anyone
    assert await claim(jobs, held=80) == []
    assert await claim(jobs, owner="p2") == [b]  # another process has its own memory


async def test_without_a_budget_bytes_do_not_matter(repo: Repo) -> None:
    jobs = JobStore(repo)
    ids = [await accept(jobs, f"c{i}", 10**12) for i in range(3)]
    assert await claim(jobs, budget=None, held=10**13) == ids


# ------------------------------------------------------------------ migration

# turn_jobs as revision 0005 made it (no upload_bytes), typed like the models
OLD_JOBS = sa.table(
    "turn_jobs",
    *(sa.column(name) for name in ("kind", "dedup_key", "conversation", "request_id", "state")),
    sa.column("payload", sa.JSON),
    sa.column("attempts", sa.Integer),
    sa.column("created_at", UTCDateTime),
    sa.column("updated_at", UTCDateTime),
)


def _columns(conn: Connection) -> set[str]:
    return {c["name"] for c in sa.inspect(conn).get_columns("turn_jobs")}


async def test_the_upgrade_keeps_queued_jobs_and_weighs_them_nothing(
    shared_db_url: str, tmp_path: Path
) -> None:
    """A database with a job queued before the column existed (the last
    release's schema): it survives the upgrade, counts as text only, and
    starts in order with the new ones."""
    async with Database(shared_db_url) as db:
        await db.upgrade("0005")
        now = utcnow()
        async with db.engine.begin() as conn:
            assert "upload_bytes" not in await conn.run_sync(_columns)
            await conn.execute(
                sa.insert(OLD_JOBS).values(
                    kind="test",
                    dedup_key="old:1",
                    conversation="A",
                    request_id="r0",
                    state=QUEUED,
                    payload={},
                    attempts=0,
                    created_at=now,
                    updated_at=now,
                )
            )
        await db.upgrade()
        assert await db.at_head()
        jobs = JobStore(Repo(db, MediaStore(tmp_path / "media")))
        (old,) = await jobs.unfinished(10**9)
        new = await accept(jobs, "B", 70)
        rows = await jobs.get([old.id, new])
        assert (rows[old.id].upload_bytes, rows[old.id].request_id) == (0, "r0")
        assert rows[new].upload_bytes == 70
        assert await claim(jobs, held=40) == [old.id]  # 70 does not fit in 60 more
        assert await claim(jobs) == [new]
