"""Store fixtures: a migrated database, a media dir and a :class:`Repo`.

* ``db_url`` – parametrized: ``sqlite`` (a file under ``tmp_path``) always,
  ``postgres`` when ``TEST_DATABASE_URL`` is set (skipped otherwise).
* ``database`` – an upgraded :class:`Database` for ``db_url``; on PostgreSQL
  each test gets a fresh schema (dropped afterwards), so tests and parallel
  runs never see each other's rows.
* ``media_store`` – a :class:`MediaStore` in a tmp dir.
* ``repo`` – ``Repo(database, media_store)``, on both backends.
* ``sqlite_repo`` – a Repo on SQLite only, for tests that just need a store.
* ``pg_repo`` – a Repo on PostgreSQL only, for what only PostgreSQL does
  (skipped without ``TEST_DATABASE_URL``, as ``db_url``'s ``postgres``).
"""

from __future__ import annotations

import os
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from sqlalchemy.engine import make_url
from sqlalchemy.ext.asyncio import create_async_engine

from core.store import Database, MediaStore, Repo

PG_URL = os.environ.get("TEST_DATABASE_URL", "")


# The PostgreSQL case of a parametrized store fixture: skipped without a server.
POSTGRES = pytest.param(
    "postgres",
    id="postgres",
    marks=[
        pytest.mark.postgres,
        pytest.mark.skipif(not PG_URL, reason="TEST_DATABASE_URL is not set"),
    ],
)


def sqlite_url(path: Path) -> str:
    return f"sqlite+aiosqlite:///{path}"


@pytest.fixture(
    params=[
        pytest.param("sqlite", id="sqlite"),
        POSTGRES,
    ]
)
def db_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return sqlite_url(tmp_path / "db" / "test.db")
    return PG_URL


async def _admin(url: str, sql: str) -> None:
    engine = create_async_engine(url, isolation_level="AUTOCOMMIT")
    try:
        async with engine.connect() as conn:
            await conn.exec_driver_sql(sql)
    finally:
        await engine.dispose()


async def open_database(url: str) -> AsyncIterator[Database]:
    """An upgraded, isolated Database for ``url`` (a fresh schema on PostgreSQL)."""
    schema = None
    if make_url(url).get_backend_name() == "postgresql":
        schema = f"t_{uuid.uuid4().hex[:16]}"
        await _admin(url, f'CREATE SCHEMA "{schema}"')
    db = Database(url, schema=schema)
    try:
        await db.upgrade()
        yield db
    finally:
        await db.aclose()
        if schema is not None:
            await _admin(url, f'DROP SCHEMA "{schema}" CASCADE')


@pytest.fixture
async def database(db_url: str) -> AsyncIterator[Database]:
    async for db in open_database(db_url):
        yield db


@pytest.fixture
def media_store(tmp_path: Path) -> MediaStore:
    return MediaStore(tmp_path / "media")


@pytest.fixture
def repo(database: Database, media_store: MediaStore) -> Repo:
    return Repo(database, media_store)


@pytest.fixture
async def sqlite_repo(tmp_path: Path) -> AsyncIterator[Repo]:
    async for db in open_database(sqlite_url(tmp_path / "db" / "store.db")):
        yield Repo(db, MediaStore(tmp_path / "media"))


@pytest.fixture(params=[POSTGRES])
async def pg_repo(tmp_path: Path) -> AsyncIterator[Repo]:
    async for db in open_database(PG_URL):
        yield Repo(db, MediaStore(tmp_path / "media"))
