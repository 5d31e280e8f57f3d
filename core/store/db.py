"""The async engine, its sessions, and schema upgrades.

One :class:`Database` per process, built in the composition root (nothing
connects at import).  SQLite gets ``PRAGMA foreign_keys=ON`` on every
connection so ``ON DELETE CASCADE`` works as on PostgreSQL.  ``upgrade()``
runs ``alembic upgrade head`` on a connection of this engine, handed to the
migrations' ``env.py`` through ``config.attributes`` (alembic's own async
template calls ``asyncio.run``, which cannot run inside our loop).
"""

from __future__ import annotations

import logging
from importlib import resources
from pathlib import Path
from typing import Any

from alembic import command
from alembic.config import Config
from sqlalchemy import event, text
from sqlalchemy.engine import URL, Connection, make_url
from sqlalchemy.exc import DBAPIError, SQLAlchemyError
from sqlalchemy.ext.asyncio import AsyncEngine, async_sessionmaker, create_async_engine

from core.errors import StoreUnavailable

log = logging.getLogger(__name__)

# What a store call can raise when the database is missing, down or broken.
# asyncpg lets some connect failures through unwrapped as OSError
# (ConnectionRefusedError, TimeoutError); SQLAlchemy wraps the rest.
DB_ERRORS: tuple[type[BaseException], ...] = (SQLAlchemyError, OSError)


def describe_db_error(exc: BaseException) -> str:
    """A one-line reason for a database failure, without the SQL statement and
    its parameters (which may hold user text) that SQLAlchemy appends."""
    if isinstance(exc, DBAPIError) and exc.orig is not None:
        exc = exc.orig
    return f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}".rstrip(": ")


def alembic_config(url: str | None = None) -> Config:
    """The alembic config shipped in the ``migrations`` package, found next to
    its ``env.py`` (not via the working directory)."""
    root = Path(str(resources.files("migrations")))
    cfg = Config(str(root / "alembic.ini"))
    cfg.set_main_option("script_location", str(root))
    if url is not None:
        cfg.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    return cfg


def ensure_sqlite_dir(url: str | URL) -> None:
    """Create the directory of a file-based SQLite database (best effort: if it
    cannot be made, connecting fails and says so)."""
    u = make_url(url)
    if u.get_backend_name() != "sqlite" or not u.database or u.database == ":memory:":
        return
    if u.database.startswith("file:"):
        return
    try:
        Path(u.database).expanduser().parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        log.warning("cannot create the SQLite directory for %s: %s", u.database, exc)


def _sqlite_on_connect(dbapi_connection: Any, _record: Any) -> None:
    cursor = dbapi_connection.cursor()
    try:
        cursor.execute("PRAGMA foreign_keys=ON")
        cursor.execute("PRAGMA busy_timeout=15000")
        cursor.execute("PRAGMA journal_mode=WAL")  # readers never wait for the writer
    finally:
        cursor.close()


class Database:
    """The engine and session factory for one database URL.

    ``schema`` (PostgreSQL only) puts every table, including alembic's version
    table, in that schema via the connection's ``search_path``: tests give
    each run a fresh schema this way.
    """

    def __init__(
        self,
        url: str,
        *,
        echo: bool = False,
        schema: str | None = None,
        connect_timeout: float = 10.0,
    ) -> None:
        self.url = make_url(url)
        self.dialect = self.url.get_backend_name()
        connect_args: dict[str, Any] = {}
        if self.dialect == "sqlite":
            if schema is not None:
                raise ValueError("schema= is for PostgreSQL; SQLite has one schema per file")
            ensure_sqlite_dir(self.url)
            connect_args["timeout"] = connect_timeout
        elif self.url.drivername == "postgresql+asyncpg":
            connect_args["timeout"] = connect_timeout
            if schema is not None:
                connect_args["server_settings"] = {"search_path": schema}
        elif schema is not None:
            raise ValueError(
                f"schema= is supported with postgresql+asyncpg, not {self.url.drivername}"
            )
        self.schema = schema
        self.engine: AsyncEngine = create_async_engine(
            self.url,
            echo=echo,
            connect_args=connect_args,
            pool_pre_ping=self.dialect != "sqlite",
            pool_timeout=connect_timeout,
        )
        if self.dialect == "sqlite":
            event.listen(self.engine.sync_engine, "connect", _sqlite_on_connect)
        self.sessions = async_sessionmaker(self.engine, expire_on_commit=False)

    async def upgrade(self, revision: str = "head") -> None:
        """Bring the schema to ``revision`` (idempotent); StoreUnavailable if
        the database cannot be reached."""
        ensure_sqlite_dir(self.url)
        try:
            async with self.engine.begin() as conn:
                await conn.run_sync(self._upgrade, revision)
        except DB_ERRORS as exc:
            raise StoreUnavailable(
                f"could not migrate the database {self.safe_url}: {describe_db_error(exc)}"
            ) from exc

    def _upgrade(self, connection: Connection, revision: str) -> None:
        cfg = alembic_config()
        cfg.attributes["connection"] = connection
        command.upgrade(cfg, revision)

    async def current_revision(self) -> str | None:
        """The alembic revision the database is at (None before the first upgrade)."""
        from alembic.runtime.migration import MigrationContext

        def _current(connection: Connection) -> str | None:
            return MigrationContext.configure(connection).get_current_revision()

        async with self.engine.connect() as conn:
            return await conn.run_sync(_current)

    async def ping(self) -> bool:
        """True when a trivial query succeeds."""
        try:
            async with self.engine.connect() as conn:
                await conn.execute(text("SELECT 1"))
        except DB_ERRORS as exc:
            log.warning("database %s unreachable: %s", self.safe_url, describe_db_error(exc))
            return False
        return True

    @property
    def safe_url(self) -> str:
        """The URL with any password masked, fit for logs and messages."""
        return self.url.render_as_string(hide_password=True)

    async def aclose(self) -> None:
        await self.engine.dispose()

    async def __aenter__(self) -> Database:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()
