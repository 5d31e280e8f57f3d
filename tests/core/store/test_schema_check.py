"""The start-up schema check: one query when the database is at head, a real
``alembic upgrade`` only when it is not (a new or an older database)."""

from __future__ import annotations

import uuid

import pytest
from alembic.script import ScriptDirectory
from sqlalchemy.engine import make_url

from core.errors import StoreUnavailable
from core.store import Database, alembic_config
from core.store.db import head_revisions
from tests.fakes.db_fixtures import _admin, open_database


def test_head_revisions_are_alembics_heads() -> None:
    """Read from the version files without alembic: the same as alembic says."""
    assert head_revisions() == frozenset(ScriptDirectory.from_config(alembic_config()).get_heads())


async def _fresh(db_url: str) -> tuple[Database, str | None]:
    """A Database on an empty SQLite file or an empty PostgreSQL schema."""
    schema = None
    if make_url(db_url).get_backend_name() == "postgresql":
        schema = f"t_{uuid.uuid4().hex[:16]}"
        await _admin(db_url, f'CREATE SCHEMA "{schema}"')
    return Database(db_url, schema=schema), schema


async def _drop(db_url: str, db: Database, schema: str | None) -> None:
    await db.aclose()
    if schema is not None:
        await _admin(db_url, f'DROP SCHEMA "{schema}" CASCADE')


async def test_a_new_database_is_migrated(db_url: str) -> None:
    db, schema = await _fresh(db_url)
    try:
        assert not await db.at_head()  # no version table yet
        await db.ensure_schema()
        assert await db.at_head()
        assert await db.current_revision() in head_revisions()
    finally:
        await _drop(db_url, db, schema)


async def test_at_head_nothing_is_migrated(db_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    async for db in open_database(db_url):  # upgraded to head by the fixture

        async def refuse(*_: object) -> None:
            raise AssertionError("upgrade ran on a database at head")

        monkeypatch.setattr(db, "upgrade", refuse)
        assert await db.at_head()
        await db.ensure_schema()  # one query, no upgrade


async def test_an_older_database_is_brought_to_head(db_url: str) -> None:
    (head,) = head_revisions()
    older = ScriptDirectory.from_config(alembic_config()).get_revision(head).down_revision
    assert isinstance(older, str)
    db, schema = await _fresh(db_url)
    try:
        await db.upgrade(older)
        assert not await db.at_head()
        await db.ensure_schema()
        assert await db.current_revision() == head
    finally:
        await _drop(db_url, db, schema)


async def test_an_unreachable_database_is_unavailable_not_new() -> None:
    db = Database("postgresql+asyncpg://nobody@127.0.0.1:9/none", connect_timeout=2)
    try:
        with pytest.raises(StoreUnavailable, match="could not open the database"):
            await db.at_head()
    finally:
        await db.aclose()
