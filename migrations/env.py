"""Alembic environment, async-aware.

Two ways in:

* ``Database.upgrade()`` hands an open (sync-facing) connection of its async
  engine through ``config.attributes["connection"]``; migrations run on it
  directly, inside the caller's event loop (via ``run_sync``).
* The ``alembic`` CLI (``alembic -c migrations/alembic.ini upgrade head``)
  has no loop: build an async engine from the URL and ``asyncio.run`` it.

The URL for the CLI comes from ``sqlalchemy.url`` in the ini (or ``-x
url=...``), else ``DATABASE_URL`` (environment or ``.env`` via bot settings).
"""

from __future__ import annotations

import asyncio
import os
from logging.config import fileConfig

from alembic import context
from sqlalchemy.engine import Connection
from sqlalchemy.ext.asyncio import create_async_engine

from core.store.db import ensure_sqlite_dir
from core.store.models import Base

config = context.config
target_metadata = Base.metadata


def _url() -> str:
    url = context.get_x_argument(as_dictionary=True).get("url")
    url = url or config.get_main_option("sqlalchemy.url") or os.environ.get("DATABASE_URL")
    if url:
        return url
    try:
        from bot.settings import get_settings
    except ImportError:  # core installed without the bot package
        return "sqlite+aiosqlite:///./data/bot.db"
    return get_settings().store.database_url


def _run(connection: Connection) -> None:
    context.configure(
        connection=connection,
        target_metadata=target_metadata,
        render_as_batch=connection.dialect.name == "sqlite",
        compare_type=True,
    )
    with context.begin_transaction():
        context.run_migrations()


async def _run_async(url: str) -> None:
    ensure_sqlite_dir(url)
    engine = create_async_engine(url)
    try:
        async with engine.begin() as conn:
            if conn.dialect.name == "sqlite":
                await conn.exec_driver_sql("PRAGMA foreign_keys=ON")
            await conn.run_sync(_run)
    finally:
        await engine.dispose()


def run_migrations_offline() -> None:
    url = _url()
    context.configure(
        url=url,
        target_metadata=target_metadata,
        literal_binds=True,
        render_as_batch=url.startswith("sqlite"),
        dialect_opts={"paramstyle": "named"},
    )
    with context.begin_transaction():
        context.run_migrations()


def run_migrations_online() -> None:
    connection = config.attributes.get("connection")
    if connection is not None:
        _run(connection)
        return
    if config.config_file_name is not None:
        fileConfig(config.config_file_name, disable_existing_loggers=False)
    asyncio.run(_run_async(_url()))


if context.is_offline_mode():
    run_migrations_offline()
else:
    run_migrations_online()
