"""SQLite statements take one call on aiosqlite's thread each
(core.store.sqlite_driver), and read and write as the stock adapter does."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import aiosqlite
import pytest
import sqlalchemy as sa

from core.errors import StoreRejected, StoreUnavailable
from core.store import Database
from core.store.sqlite_driver import one_call_dbapi
from tests.fakes.db_fixtures import sqlite_url

ITEMS = sa.Table(
    "items",
    sa.MetaData(),
    sa.Column("id", sa.Integer, primary_key=True),
    sa.Column("name", sa.String(20), nullable=False, unique=True),
    sa.Column("doc", sa.JSON),
)


@pytest.fixture(params=["one call", "stock"])
async def db(
    request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[Database]:
    """The store's SQLite, and the same on SQLAlchemy's own adapter: the tests
    that take it read the same on both."""
    if request.param == "stock":
        monkeypatch.setattr("core.store.db.one_call_dbapi", lambda: None)
    async with _items_db(tmp_path) as database:
        yield database


@pytest.fixture
async def one_call_db(tmp_path: Path) -> AsyncIterator[Database]:
    """The store's SQLite on the one-call adapter only."""
    async with _items_db(tmp_path) as database:
        yield database


@asynccontextmanager
async def _items_db(tmp_path: Path) -> AsyncIterator[Database]:
    async with Database(sqlite_url(tmp_path / "driver.db")) as database:
        async with database.engine.begin() as conn:
            await conn.run_sync(ITEMS.metadata.create_all)
        yield database


def test_the_store_uses_it_on_sqlite(tmp_path: Path) -> None:
    database = Database(sqlite_url(tmp_path / "x.db"))
    assert one_call_dbapi() is not None
    assert database.engine.dialect.dbapi is one_call_dbapi()


async def test_each_statement_is_one_call_on_the_thread(
    one_call_db: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    db = one_call_db
    assert db.engine.dialect.dbapi is one_call_dbapi()
    calls: list[str] = []
    original = aiosqlite.Connection._execute

    async def counted(self: aiosqlite.Connection, fn: Any, *args: Any, **kw: Any) -> Any:
        calls.append(getattr(fn, "__name__", repr(fn)))
        return await original(self, fn, *args, **kw)

    async with db.connection("warm up", write=True) as conn:
        await conn.execute(sa.select(ITEMS.c.id))
    monkeypatch.setattr(aiosqlite.Connection, "_execute", counted)
    async with db.connection("write", write=True) as conn:
        calls.clear()
        await conn.execute(sa.insert(ITEMS).returning(ITEMS.c.id), {"name": "a", "doc": {}})
        await conn.execute(sa.update(ITEMS).values(doc={"x": 1}))
        await conn.execute(sa.select(ITEMS.c.id, ITEMS.c.doc))
        assert calls == ["_run", "_run", "_run"]
    # The commit; the pool's rollback of the connection given back is not sent
    # (no transaction is open after the commit).
    assert calls[3:] == ["commit"]


async def test_only_an_open_transaction_is_ended_on_the_thread(
    one_call_db: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A read opens no SQLite transaction: neither its commit nor the pool's
    rollback goes to the thread.  A write that fails is rolled back there."""
    db = one_call_db
    calls: list[str] = []
    original = aiosqlite.Connection._execute

    async def counted(self: aiosqlite.Connection, fn: Any, *args: Any, **kw: Any) -> Any:
        calls.append(getattr(fn, "__name__", repr(fn)))
        return await original(self, fn, *args, **kw)

    monkeypatch.setattr(aiosqlite.Connection, "_execute", counted)
    async with db.connection("read") as conn:
        await conn.execute(sa.select(ITEMS.c.id))
    assert calls == ["_run"]
    calls.clear()
    with pytest.raises(RuntimeError):
        async with db.connection("write", write=True) as conn:
            await conn.execute(sa.insert(ITEMS).values(name="kept?"))
            raise RuntimeError("the caller fails after its write")
    assert calls == ["_run", "rollback"]
    async with db.connection("read") as conn:
        assert (await conn.execute(sa.select(sa.func.count()).select_from(ITEMS))).scalar() == 0


async def test_rows_counts_and_ids_read_as_before(db: Database) -> None:
    async with db.connection("write", write=True) as conn:
        first = (
            await conn.execute(sa.insert(ITEMS).values(name="a", doc={"n": 1}))
        ).inserted_primary_key
        many = await conn.execute(
            sa.insert(ITEMS), [{"name": f"b{i}", "doc": {"n": i}} for i in range(3)]
        )
        assert many.rowcount == 3
        ids = (
            (
                await conn.execute(
                    sa.insert(ITEMS).returning(ITEMS.c.id, sort_by_parameter_order=True),
                    [{"name": "c1"}, {"name": "c2"}],
                )
            )
            .scalars()
            .all()
        )
        updated = await conn.execute(
            sa.update(ITEMS).where(ITEMS.c.name.like("b%")).values(doc=None)
        )
        assert updated.rowcount == 3
    assert first is not None and first[0] == 1
    assert ids == [5, 6]
    async with db.connection("read") as conn:
        result = await conn.execute(sa.select(ITEMS.c.name, ITEMS.c.doc).order_by(ITEMS.c.id))
        assert result.keys() == ["name", "doc"]
        assert result.fetchmany(2) == [("a", {"n": 1}), ("b0", None)]
        assert len(result.fetchall()) == 4
        assert (await conn.execute(sa.select(ITEMS.c.id).where(ITEMS.c.id < 0))).all() == []
        streamed = await conn.stream(sa.select(ITEMS.c.name).order_by(ITEMS.c.id))
        assert [r.name async for r in streamed] == ["a", "b0", "b1", "b2", "c1", "c2"]


async def test_errors_come_out_as_the_stores_and_the_connection_goes_on(db: Database) -> None:
    with pytest.raises(StoreRejected):
        async with db.connection("add", write=True) as conn:
            await conn.execute(sa.insert(ITEMS), [{"name": "same"}, {"name": "same"}])
    with pytest.raises(StoreUnavailable, match="could not read"):
        async with db.connection("read") as conn:
            await conn.execute(sa.text("SELECT nothing FROM nowhere"))
    async with db.connection("add", write=True) as conn:
        await conn.execute(sa.insert(ITEMS).values(name="same"))
    async with db.connection("read") as conn:
        assert (await conn.execute(sa.select(sa.func.count()).select_from(ITEMS))).scalar() == 1
