"""The connection pool: sized by the caller, no overflow, callers wait in line
(FIFO) instead of failing, and a burst of 500 turns all land."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from core.errors import StoreRejected, StoreUnavailable
from core.store import Database, MediaStore, Repo
from core.store.models import Conversation, Message
from core.types import ConversationKey
from tests.core.store.builders import CHANNEL, turn
from tests.fakes.clock import FakeClock
from tests.fakes.db_fixtures import PG_URL, sqlite_url

BURST = 500


async def test_pool_size_comes_from_the_constructor(db_url: str) -> None:
    async with Database(db_url, pool_size=3, pool_timeout=5) as db:
        assert (db.pool_size, db.pool_timeout) == (3, 5)
        assert db.engine.pool.size() == 3  # type: ignore[attr-defined]
        assert "Current Overflow: -3" in db.engine.pool.status()  # max_overflow=0
        assert await db.ping()
    async with Database("sqlite+aiosqlite://") as memory:  # one shared connection, no pool
        assert await memory.ping()
    with pytest.raises(ValueError):
        Database(db_url, pool_size=0)


async def test_callers_wait_in_line_for_a_connection(tmp_path: Path) -> None:
    async with Database(sqlite_url(tmp_path / "line.db"), pool_size=1) as db:
        order: list[int] = []

        async def caller(i: int) -> None:
            async with db.slot():
                order.append(i)
                await asyncio.sleep(0)

        async with db.slot():
            waiting = []
            for i in range(5):
                waiting.append(asyncio.create_task(caller(i)))
                await asyncio.sleep(0)  # each one queues before the next arrives
        await asyncio.gather(*waiting)
        assert order == [0, 1, 2, 3, 4]


async def test_a_pool_that_stays_full_says_busy(tmp_path: Path) -> None:
    db = Database(sqlite_url(tmp_path / "busy.db"), pool_size=1, pool_timeout=0.2)
    try:
        await db.upgrade()
        repo = Repo(db, MediaStore(tmp_path / "media"))
        async with db.slot():  # someone holds the only connection and never gives it back
            with pytest.raises(StoreUnavailable, match="busy"):
                await repo.load_history(CHANNEL)
        assert (await repo.load_history(CHANNEL)).turns == []
    finally:
        await db.aclose()


async def test_a_burst_of_500_turns_all_land(repo: Repo) -> None:
    """500 requests at once, each loading its history and saving its turn,
    on the default pool: none fails, and no more connections than the pool's
    size are ever open at once."""
    db = repo.db
    busy = peak = 0

    def checkout(*_: Any) -> None:
        nonlocal busy, peak
        busy += 1
        peak = max(peak, busy)

    def checkin(*_: Any) -> None:
        nonlocal busy
        busy -= 1

    sa.event.listen(db.engine.sync_engine.pool, "checkout", checkout)
    sa.event.listen(db.engine.sync_engine.pool, "checkin", checkin)
    keys = [ConversationKey("slack", "T1", f"C{i}") for i in range(50)]

    async def request(i: int) -> int:
        key = keys[i % len(keys)]
        await repo.load_history(key)
        await repo.save_turn(turn(key, f"request {i}", f"answer {i}", user=f"U{i}"))
        return i

    results = await asyncio.gather(*(request(i) for i in range(BURST)), return_exceptions=True)
    failures = [r for r in results if isinstance(r, BaseException)]
    assert failures == []
    assert 1 < peak <= db.pool_size

    async with db.sessions() as s:
        assert await s.scalar(sa.select(sa.func.count()).select_from(Message)) == 2 * BURST
        assert await s.scalar(sa.select(sa.func.count()).select_from(Conversation)) == len(keys)
    history = await repo.load_history(keys[7], turns=BURST)
    assert len(history.turns) == 2 * BURST // len(keys)


@pytest.mark.postgres
@pytest.mark.skipif(not PG_URL, reason="TEST_DATABASE_URL is not set")
async def test_a_connection_idle_past_ping_after_is_pinged_and_replaced_when_dead() -> None:
    """A pooled PostgreSQL connection is pinged before use only after it sat
    idle ``ping_after`` seconds (on the store's clock); one the server has
    closed meanwhile is then replaced, and the store call goes through."""
    clock = FakeClock()
    pings: list[object] = []
    async with Database(PG_URL, pool_size=1, ping_after=30, clock=clock) as db:
        original = db.engine.dialect.do_ping

        def counted(dbapi_connection: Any) -> bool:
            pings.append(dbapi_connection)
            return original(dbapi_connection)

        db.engine.dialect.do_ping = counted  # type: ignore[method-assign]
        async with db.connection("read") as conn:
            pid = await conn.scalar(sa.text("SELECT pg_backend_pid()"))
        clock.advance(29)
        async with db.connection("read") as conn:  # used just now: no ping
            assert await conn.scalar(sa.text("SELECT pg_backend_pid()")) == pid
        assert pings == []

        async with Database(PG_URL) as admin, admin.connection("kill", write=True) as conn:
            await conn.execute(sa.text("SELECT pg_terminate_backend(:pid)"), {"pid": pid})
        clock.advance(30)
        async with db.connection("read") as conn:  # idle 30 s: pinged, found dead, replaced
            assert await conn.scalar(sa.text("SELECT pg_backend_pid()")) != pid
        assert len(pings) == 1


async def test_store_calls_on_a_connection_map_errors_as_sessions_do(tmp_path: Path) -> None:
    async with Database(sqlite_url(tmp_path / "errors.db")) as db:
        await db.upgrade()
        with pytest.raises(StoreUnavailable, match="could not read the void"):
            async with db.connection("read the void") as conn:
                await conn.execute(sa.text("SELECT * FROM no_such_table"))
        with pytest.raises(StoreRejected, match="refused a value when asked to add"):
            async with db.connection("add", write=True) as conn:
                await conn.execute(sa.text("INSERT INTO turn_jobs (id) VALUES (NULL)"))
