"""Two processes starting on an empty PostgreSQL both upgrade the schema at
once: both succeed and leave one schema (``Database.upgrade`` serialises on
an advisory lock; without it the second one's ``CREATE TABLE`` fails on the
first one's)."""

from __future__ import annotations

import asyncio
import sys
from asyncio.subprocess import PIPE
from contextlib import aclosing
from pathlib import Path

import pytest
import sqlalchemy as sa
from alembic.script import ScriptDirectory
from sqlalchemy.ext.asyncio import create_async_engine

from core.store import alembic_config
from tests.fakes.db_fixtures import PG_URL
from tests.fakes.job_fixtures import fresh_pg_database
from tests.fakes.process_env import clean_env

pytestmark = [
    pytest.mark.postgres,
    pytest.mark.skipif(not PG_URL, reason="TEST_DATABASE_URL is not set"),
]


def _head() -> str:
    head = ScriptDirectory.from_config(alembic_config()).get_current_head()
    assert head is not None
    return head


async def _schema(url: str) -> tuple[list[str], int]:
    """(alembic version rows, number of tables) of the database at ``url``."""
    engine = create_async_engine(url)
    try:
        async with engine.connect() as conn:
            versions = (
                await conn.execute(sa.text("SELECT version_num FROM alembic_version"))
            ).all()
            tables = await conn.scalar(
                sa.text("SELECT count(*) FROM pg_tables WHERE schemaname = 'public'")
            )
    finally:
        await engine.dispose()
    return [v[0] for v in versions], int(tables or 0)


async def test_two_processes_migrating_an_empty_database_at_once_both_succeed(
    tmp_path: Path,
) -> None:
    # aclosing: the database is dropped even when the test fails
    async with aclosing(fresh_pg_database(PG_URL)) as databases:
        async for url in databases:
            env = clean_env(tmp_path) | {"DATABASE_URL": url}
            command = [sys.executable, "-m", "bot", "db", "upgrade"]
            procs = [
                await asyncio.create_subprocess_exec(
                    *command, env=env, cwd=tmp_path, stdout=PIPE, stderr=PIPE
                )
                for _ in range(2)
            ]
            outs = [await asyncio.wait_for(p.communicate(), 120) for p in procs]
            for p, (_, err) in zip(procs, outs, strict=True):
                assert p.returncode == 0, err.decode()
            versions, _ = await _schema(url)
            assert versions == [_head()]
