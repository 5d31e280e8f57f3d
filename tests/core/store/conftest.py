"""Fixtures shared by the store's tests."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from core.store import Database, MediaStore, Repo
from tests.fakes.db_fixtures import sqlite_url
from tests.fakes.loopback import free_port as closed_port


@pytest.fixture(params=["sqlite", "postgres"])
async def dead_repo(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Repo]:
    """A repo on a database that is not there (SQLite: a file where its
    directory should be; PostgreSQL: a port nobody listens on)."""
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
