"""A database that is not there surfaces as StoreUnavailable, quickly."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from core.errors import StoreUnavailable
from core.store import Database, MediaStore, Repo
from tests.core.store.builders import CHANNEL, turn
from tests.fakes.db_fixtures import sqlite_url
from tests.fakes.loopback import free_port as closed_port


@pytest.fixture(params=["sqlite", "postgres"])
async def dead_repo(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Repo]:
    if request.param == "sqlite":
        blocker = tmp_path / "not-a-dir"
        blocker.write_text("a file where the database directory should be")
        url = sqlite_url(blocker / "bot.db")
    else:
        url = f"postgresql+asyncpg://postgres@127.0.0.1:{closed_port()}/test"
    db = Database(url, connect_timeout=2)
    yield Repo(db, MediaStore(tmp_path / "media"))
    await db.aclose()
    # aiosqlite stops the worker thread of a failed connect without awaiting
    # it; let those threads finish while this loop can still take their reply.
    for thread in threading.enumerate():
        if thread.name.endswith("(_connection_worker_thread)"):
            await asyncio.to_thread(thread.join, 5)


async def test_every_call_says_store_unavailable(dead_repo: Repo) -> None:
    async with asyncio.timeout(10):
        assert not await dead_repo.db.ping()
        with pytest.raises(StoreUnavailable):
            await dead_repo.db.upgrade()
        with pytest.raises(StoreUnavailable, match="load the conversation history"):
            await dead_repo.load_history(CHANNEL)
        with pytest.raises(StoreUnavailable, match="save the turn"):
            await dead_repo.save_turn(turn(CHANNEL, "q", "a"))
        with pytest.raises(StoreUnavailable):
            await dead_repo.forget(CHANNEL)
        with pytest.raises(StoreUnavailable):
            await dead_repo.claim_event("slack", "E1")
        with pytest.raises(StoreUnavailable):
            await dead_repo.taken_handles(CHANNEL)
