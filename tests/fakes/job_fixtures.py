"""Durable-turn fixtures: a store URL that several agents (or processes) can
share, a fake clock for leases, and a recording :class:`JobRunner`.

* ``shared_db_url`` – parametrized like ``db_url``: a SQLite file under
  ``tmp_path``, or (``TEST_DATABASE_URL`` set) a fresh PostgreSQL *database*
  created for the test and dropped after it, so separate engines and
  processes configured by ``DATABASE_URL`` alone see the same rows.
* :class:`FakeClock` – :class:`tests.fakes.clock.FakeClock` on the real time:
  ``now()`` is the real time plus an offset a test moves (``advance``) to make
  leases run out without waiting; intervals and sleeps are real.
* :class:`RecordingRunner` – runs ``"test"`` jobs whose payload is
  ``{"key": [...], "user": …, "text": …}`` through ``agent.handle`` and
  records replies, queue notices and how many ran at once.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy.engine import make_url
from sqlalchemy.ext.asyncio import create_async_engine

from core.errors import RunFailed
from core.jobs import LeasedJob
from core.store.jobs import JobRow
from core.types import AgentAPI, ConversationKey, Notice, Reply, Request, new_request_id
from tests.fakes import clock
from tests.fakes.db_fixtures import PG_URL, POSTGRES, sqlite_url

KIND = "test"


async def _admin(url: str, sql: str) -> None:
    engine = create_async_engine(url, isolation_level="AUTOCOMMIT")
    try:
        async with engine.connect() as conn:
            await conn.exec_driver_sql(sql)
    finally:
        await engine.dispose()


async def fresh_pg_database(base_url: str) -> AsyncIterator[str]:
    name = f"t_{uuid.uuid4().hex[:16]}"
    await _admin(base_url, f'CREATE DATABASE "{name}"')
    try:
        yield make_url(base_url).set(database=name).render_as_string(hide_password=False)
    finally:
        await _admin(base_url, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture(
    params=[
        pytest.param("sqlite", id="sqlite"),
        POSTGRES,
    ]
)
async def shared_db_url(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[str]:
    if request.param == "sqlite":
        yield sqlite_url(tmp_path / "shared.db")
        return
    async for url in fresh_pg_database(PG_URL):
        yield url


class FakeClock(clock.FakeClock):
    """Real time plus a movable offset (leases expire when it is advanced)."""

    def __init__(self) -> None:
        super().__init__(wall=None, real_monotonic=True)


def job_payload(key: ConversationKey, text: str, user: str = "u1") -> dict[str, Any]:
    return {"key": [key.platform, key.scope, key.channel, key.thread], "user": user, "text": text}


@dataclass
class RecordingRunner:
    agent: AgentAPI
    replies: list[tuple[int, Reply]] = field(default_factory=list)
    notices: list[tuple[int, Notice]] = field(default_factory=list)
    gave_up: list[tuple[int, RunFailed]] = field(default_factory=list)
    started: list[int] = field(default_factory=list)
    running: int = 0
    max_running: int = 0
    # awaited after the agent answered, before "posting" (a test may block here)
    before_post: Callable[[LeasedJob], Awaitable[None]] | None = None
    changed: asyncio.Condition = field(default_factory=asyncio.Condition)

    async def run(self, job: LeasedJob) -> None:
        self.running += 1
        self.max_running = max(self.max_running, self.running)
        try:
            await self._record(self.started, job.id)
            p = job.payload
            request = Request(
                ConversationKey(*p["key"]), p["user"], p["text"], request_id=job.request_id
            )
            reply = await self.agent.handle(request, None, job=job)
            if self.before_post is not None:
                await self.before_post(job)
            await self._record(self.replies, (job.id, reply))
        finally:
            self.running -= 1

    async def notify(self, job: LeasedJob, notice: Notice) -> None:
        await self._record(self.notices, (job.id, notice))

    async def give_up(self, job: LeasedJob, failure: RunFailed) -> None:
        await self._record(self.gave_up, (job.id, failure))

    async def _record(self, where: list[Any], item: Any) -> None:
        async with self.changed:
            where.append(item)
            self.changed.notify_all()

    async def wait(self, predicate: Callable[[], bool], within: float = 20.0) -> None:
        async with self.changed:
            await asyncio.wait_for(self.changed.wait_for(predicate), within)


async def submit(
    agent: AgentAPI, key: ConversationKey, text: str, *, dedup: str | None = None
) -> int:
    """Accept a ``"test"`` job; its id."""
    accepted = await agent.accept(
        KIND, key, job_payload(key, text), request_id=new_request_id(), dedup=dedup
    )
    return accepted.job.id


async def running_job_stored(
    agent: Any, predicate: Callable[[JobRow], bool], within: float = 20.0
) -> None:
    """Wait until a job running in ``agent`` has a stored row satisfying
    ``predicate`` (what reached the store, not what the process holds)."""
    async with asyncio.timeout(within):
        while True:
            running = list(agent.jobs._jobs)
            rows = await agent.jobs.store.get(running) if running else {}
            if any(predicate(r) for r in rows.values()):
                return
            await asyncio.sleep(0.02)


async def task_checkpointed(agent: Any, task_id: int, within: float = 20.0) -> None:
    """Wait until a job running in ``agent`` has task ``task_id``'s outcome in
    its stored checkpoint (a dependent may start before its parent's result
    is checkpointed: a test that kills the process must wait for this)."""
    await running_job_stored(
        agent, lambda r: str(task_id) in ((r.checkpoint or {}).get("outcomes") or {}), within
    )


async def status_recorded(
    agent: Any, predicate: Callable[[dict[str, Any]], bool], within: float = 20.0
) -> None:
    """Wait until a job running in ``agent`` has a stored ``status_ref`` (what
    its surface posted) that satisfies ``predicate``: the platform sees a post
    before the surface records it, so a test that kills the process after
    seeing a post must wait for its record too."""
    await running_job_stored(agent, lambda r: predicate(r.status_ref or {}), within)
