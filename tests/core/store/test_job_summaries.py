"""Finishing a job keeps a summary of its last checkpoint (``AgentAPI.recall``)
without reading back what this process wrote itself; whatever it does not
know for sure (a write that failed, a job another process checkpointed) is
read from the row, as before.  SQLite and PostgreSQL."""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from core.errors import StoreRejected
from core.store import Database, MediaStore, Repo
from core.store.jobs import JobFence, JobStore
from core.store.models import utcnow
from core.store.summaries import UNKNOWN, JobSummaries
from tests.core.store.builders import CHANNEL, turn

LEASE = 60.0
PLAN = [{"id": 0, "task": "summarization", "dep": [-1], "args": {"text": "t"}}]


@contextmanager
def statements(db: Database) -> Iterator[list[str]]:
    seen: list[str] = []

    def before(_c: Any, _cur: Any, statement: str, *_: Any) -> None:
        seen.append(re.sub(r"\s+", " ", statement))

    sa.event.listen(db.engine.sync_engine, "before_cursor_execute", before)
    try:
        yield seen
    finally:
        sa.event.remove(db.engine.sync_engine, "before_cursor_execute", before)


def reads_the_checkpoint(seen: list[str]) -> bool:
    return any(s.startswith("SELECT turn_jobs.checkpoint") for s in seen)


async def running_job(jobs: JobStore, owner: str = "p1") -> int:
    accepted = await jobs.accept(
        kind="test",
        conversation=str(CHANNEL),
        payload={},
        request_id="r1",
        dedup_key=None,
        owner=owner,
        now=utcnow(),
        lease=LEASE,
    )
    [job] = await jobs.claim(owner=owner, kinds=["test"], now=utcnow(), lease=LEASE, limit=1)
    assert job.id == accepted.job.id
    return job.id


async def recalled(jobs: JobStore, job_id: int) -> dict[str, Any] | None:
    return (await jobs.get([job_id]))[job_id].checkpoint


async def test_a_saved_turn_is_finished_with_its_reply_without_reading_it_back(
    repo: Repo,
) -> None:
    jobs = JobStore(repo)
    job = await running_job(jobs)
    await jobs.save_checkpoint(job, owner="p1", checkpoint={"v": 2, "plan": PLAN}, now=utcnow())
    reply = {"text": "done", "files": [{"handle": "x.png"}], "tasks": []}
    fence = JobFence(job, "p1", lambda _final: {"v": 2, "plan": PLAN, "reply": reply})
    await repo.save_turn(replace(turn(CHANNEL, "q", "done"), job=fence))
    with statements(repo.db) as seen:
        assert await jobs.finish(job, owner="p1", now=utcnow())
    assert not reads_the_checkpoint(seen)
    assert await recalled(jobs, job) == {
        "v": 2,
        "plan": PLAN,
        "selections": {},
        "usage": None,
        "timings": None,
        "reply": {"text": "done", "files": [], "tasks": []},
    }


async def test_a_job_checkpointed_by_another_process_is_finished_with_its_checkpoint(
    database: Database, tmp_path: Path
) -> None:
    """p1 checkpoints, hands the job back; p2 answers it and hands it back
    before finishing; p1 takes it again and finishes it: with p2's reply."""
    p1 = JobStore(Repo(database, MediaStore(tmp_path / "m")))
    p2 = JobStore(Repo(database, MediaStore(tmp_path / "m")))
    job = await running_job(p1)
    await p1.save_checkpoint(job, owner="p1", checkpoint={"v": 2, "plan": PLAN}, now=utcnow())
    assert await p1.release([job], owner="p1", now=utcnow()) == 1
    [taken] = await p2.claim(owner="p2", kinds=["test"], now=utcnow(), lease=LEASE, limit=1)
    reply = {"text": "from p2", "files": [], "tasks": []}
    cp = {"v": 2, "plan": PLAN, "reply": reply}
    await p2.save_checkpoint(taken.id, owner="p2", checkpoint=cp, now=utcnow())
    assert await p2.release([job], owner="p2", now=utcnow()) == 1
    [again] = await p1.claim(owner="p1", kinds=["test"], now=utcnow(), lease=LEASE, limit=1)
    with statements(database) as seen:
        assert await p1.finish(again.id, owner="p1", now=utcnow())
    assert not reads_the_checkpoint(seen)  # the claim read it
    summary = await recalled(p1, job)
    assert summary is not None and summary["reply"]["text"] == "from p2"


async def test_after_a_failed_checkpoint_write_finish_reads_the_row(repo: Repo) -> None:
    jobs = JobStore(repo)
    job = await running_job(jobs)
    reply = {"text": "kept", "files": [], "tasks": []}
    await jobs.save_checkpoint(
        job, owner="p1", checkpoint={"v": 2, "plan": PLAN, "reply": reply}, now=utcnow()
    )
    async with repo.db.engine.begin() as conn:  # the database refuses the next write
        if repo.db.dialect == "sqlite":
            await conn.exec_driver_sql(
                "CREATE TRIGGER no_boom BEFORE UPDATE ON turn_jobs "
                "WHEN NEW.checkpoint LIKE '%boom%' "
                "BEGIN SELECT RAISE(ABORT, 'refused by the test'); END"
            )
        else:
            await conn.exec_driver_sql(
                "ALTER TABLE turn_jobs ADD CONSTRAINT no_boom "
                "CHECK (checkpoint IS NULL OR checkpoint::text NOT LIKE '%boom%') NOT VALID"
            )
    with pytest.raises(StoreRejected):
        await jobs.save_checkpoint(job, owner="p1", checkpoint={"boom": 1}, now=utcnow())
    with statements(repo.db) as seen:
        assert await jobs.finish(job, owner="p1", now=utcnow())
    assert reads_the_checkpoint(seen)
    summary = await recalled(jobs, job)
    assert summary is not None and summary["reply"]["text"] == "kept"


def test_the_summaries_are_bounded_oldest_first() -> None:
    known = JobSummaries(limit=2)
    known.remember(1, None)
    known.remember(2, {"reply": {}})
    known.remember(3, None)
    assert len(known) == 2
    assert known.pop(1) is UNKNOWN
    assert known.pop(2) == {"reply": {}}
    known.forget(3)
    assert known.pop(3) is UNKNOWN
