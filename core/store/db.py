"""The async engine, its sessions, and schema upgrades.

One :class:`Database` per process, built in the composition root (nothing
connects at import).  SQLite gets ``PRAGMA foreign_keys=ON`` on every
connection so ``ON DELETE CASCADE`` works as on PostgreSQL.  ``upgrade()``
runs ``alembic upgrade head`` on a connection of this engine, handed to the
migrations' ``env.py`` through ``config.attributes`` (alembic's own async
template calls ``asyncio.run``, which cannot run inside our loop).

Connections: a pool of ``pool_size`` (no overflow: PostgreSQL allows 100
connections in all, shared by every process), and a FIFO gate of the same
size in front of it.  A burst of calls queues at the gate in arrival order
and waits up to ``pool_timeout`` for its turn; SQLAlchemy's own pool queue is
not fair (a newcomer can take a connection a waiter was woken for), which
under a burst of a few hundred calls let some waiters time out while the
database kept up.  Nothing holds a connection across an LLM or model call:
each store call opens a session, runs its statements and gives it back.

The hot paths (a request's history, its turn, its job's checkpoints) run on
a Core connection (:meth:`Database.connection`) rather than an ORM session:
they use no ORM feature, and a session costs about a third more CPU per
transaction.  SQLite statements take one call on aiosqlite's thread each
(:mod:`core.store.sqlite_driver`).  PostgreSQL connections are pinged before use only when they
have sat idle in the pool for ``ping_after`` seconds (SQLAlchemy's
``pool_pre_ping`` pings on every checkout: a round trip in front of each of
a request's transactions); a stale one is replaced the same way.
"""

from __future__ import annotations

import ast
import asyncio
import functools
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sqlalchemy import event, text
from sqlalchemy.engine import URL, Connection, Dialect, make_url
from sqlalchemy.exc import (
    DataError,
    DBAPIError,
    IntegrityError,
    InvalidatePoolError,
    SQLAlchemyError,
    StatementError,
)
from sqlalchemy.ext.asyncio import (
    AsyncConnection,
    AsyncEngine,
    AsyncSession,
    async_sessionmaker,
    create_async_engine,
)
from sqlalchemy.pool import ConnectionPoolEntry, QueuePool

from core.clock import SYSTEM_CLOCK, Clock
from core.errors import StoreRejected, StoreUnavailable
from core.store import json_columns
from core.store.sqlite_driver import one_call_dbapi

if TYPE_CHECKING:
    from alembic.config import Config

log = logging.getLogger(__name__)

# What a store call can raise when the database is missing, down or broken.
# asyncpg lets some connect failures through unwrapped as OSError
# (ConnectionRefusedError, TimeoutError); SQLAlchemy wraps the rest.
DB_ERRORS: tuple[type[BaseException], ...] = (SQLAlchemyError, OSError)

# What a driver raises, unwrapped, for a value it cannot send: sqlite3 for an
# int beyond 64 bits (OverflowError), both drivers for a lone surrogate in a
# str (UnicodeEncodeError).  Together with DB_ERRORS: everything a store call
# can fail with because of the database or the data handed to it.
VALUE_ERRORS: tuple[type[BaseException], ...] = (OverflowError, UnicodeError)

# What a store call runs its statements on: an ORM session
# (:meth:`Database.transaction`) or a Core connection (:meth:`Database.connection`).
Tx = AsyncSession | AsyncConnection

DEFAULT_POOL_SIZE = 10
DEFAULT_POOL_TIMEOUT = 60.0
# A pooled PostgreSQL connection idle at least this long is pinged before use.
PING_AFTER = 1.0
_IDLE_SINCE = "hugginggpt_idle_since"  # key in a pool entry's info dict

# The PostgreSQL advisory lock key ``upgrade`` serialises migrations on
# (any fixed bigint; this one is "hgptmig0" in ASCII).
MIGRATION_LOCK = 0x6867_7074_6D69_6730

# SQLSTATE classes of a refused value: 22 data exception (NUL in text, a
# string over its varchar(n), an int out of range, bad JSON), 23 integrity
# constraint violation.  asyncpg errors reach SQLAlchemy 2.1 as a plain
# DBAPIError whose ``orig`` carries the code; asyncpg's own argument checks
# ("value out of int32 range") report 22000.
_REFUSED_SQLSTATE = ("22", "23")


def refused_value(exc: BaseException) -> bool:
    """True when the database or its driver refused a *value* (the data is at
    fault and the database is fine), False for anything else (unreachable,
    down, broken)."""
    if isinstance(exc, (*VALUE_ERRORS, DataError, IntegrityError)):
        return True
    if isinstance(exc, DBAPIError):
        code = getattr(exc.orig, "sqlstate", None) or getattr(exc.orig, "pgcode", None)
        return isinstance(code, str) and code[:2] in _REFUSED_SQLSTATE
    # A bind parameter's own processing failed (e.g. a naive datetime).
    return isinstance(exc, StatementError) and isinstance(
        exc.orig, ValueError | TypeError | OverflowError
    )


def unique_violation(exc: BaseException) -> bool:
    """True for a UNIQUE constraint clash (a concurrent writer took the key)."""
    if not isinstance(exc, DBAPIError):
        return False
    if getattr(exc.orig, "sqlstate", None) == "23505":
        return True
    return isinstance(exc, IntegrityError) and "UNIQUE constraint failed" in str(exc.orig)


def describe_db_error(exc: BaseException) -> str:
    """A one-line reason for a database failure, without the SQL statement and
    its parameters (which may hold user text) that SQLAlchemy appends."""
    if isinstance(exc, DBAPIError) and exc.orig is not None:
        exc = exc.orig
    return f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}".rstrip(": ")


def alembic_config(url: str | None = None) -> Config:
    """The alembic config shipped in the ``migrations`` package, found next to
    its ``env.py`` (not via the working directory)."""
    from alembic.config import Config  # alembic only when migrating (a second at start)

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


def _ping_when_idle(engine: AsyncEngine, after: float, clock: Clock) -> None:
    """Ping a pooled connection before it is handed out only when it has sat
    idle ``after`` seconds or more; a dead one invalidates the pool and the
    checkout is retried on a new connection, as ``pool_pre_ping`` does on
    every checkout.  A connection given back within ``after`` seconds is
    used as is: the database went away in that moment or it did not."""
    dialect: Dialect = engine.dialect

    def checkin(_dbapi: Any, entry: ConnectionPoolEntry) -> None:
        entry.info[_IDLE_SINCE] = clock.monotonic()

    def checkout(dbapi: Any, entry: ConnectionPoolEntry, _proxy: Any) -> None:
        since = entry.info.get(_IDLE_SINCE)
        if since is None or clock.monotonic() - since < after:
            return
        try:
            dialect.do_ping(dbapi)
        except dialect.loaded_dbapi.Error as exc:
            if dialect.is_disconnect(exc, dbapi, None):
                raise InvalidatePoolError(f"stale connection: {exc}") from exc
            raise

    event.listen(engine.sync_engine, "checkin", checkin)
    event.listen(engine.sync_engine, "checkout", checkout)


@functools.cache
def head_revisions() -> frozenset[str]:
    """The revision(s) ``alembic upgrade heads`` leads to, read from the shipped
    migration files' ``revision``/``down_revision`` literals without loading
    alembic (whose import alone costs more than a whole zero-latency request)."""
    revisions: set[str] = set()
    parents: set[str] = set()
    for path in (Path(str(resources.files("migrations"))) / "versions").glob("*.py"):
        for node in ast.parse(path.read_text(encoding="utf-8")).body:
            target = value = None
            if isinstance(node, ast.Assign) and len(node.targets) == 1:
                target, value = node.targets[0], node.value
            elif isinstance(node, ast.AnnAssign) and node.value is not None:
                target, value = node.target, node.value
            if not isinstance(target, ast.Name) or value is None:
                continue
            if target.id not in ("revision", "down_revision"):
                continue
            found = ast.literal_eval(value)
            names = [found] if isinstance(found, str) else list(found or ())
            (revisions if target.id == "revision" else parents).update(names)
    return frozenset(revisions - parents)


def dialect_insert(dialect: str) -> Any:
    """The dialect's own ``insert`` construct (``on_conflict_do_nothing``,
    ``on_conflict_do_update``) for ``dialect`` ("postgresql" or "sqlite").
    PostgreSQL's dialect is imported only for a PostgreSQL database: on
    SQLite its import was about 4 % of a cold ``ask`` (docs/speed.md)."""
    if dialect == "postgresql":
        from sqlalchemy.dialects import postgresql

        return postgresql.insert
    from sqlalchemy.dialects import sqlite

    return sqlite.insert


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
        pool_size: int = DEFAULT_POOL_SIZE,
        pool_timeout: float = DEFAULT_POOL_TIMEOUT,
        ping_after: float = PING_AFTER,
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        """``pool_size``: connections this process may hold (no overflow);
        ``pool_timeout``: seconds a store call waits, in arrival order, for
        one of them before it fails as unavailable (busy); ``ping_after``:
        seconds a pooled PostgreSQL connection may sit idle before it is
        pinged on its next use (0: on every use), on ``clock``."""
        if pool_size < 1:
            raise ValueError(f"pool_size must be at least 1, not {pool_size}")
        if pool_timeout <= 0:
            raise ValueError(f"pool_timeout must be positive, not {pool_timeout}")
        self.url = make_url(url)
        self.dialect = self.url.get_backend_name()
        connect_args: dict[str, Any] = {}
        engine_args: dict[str, Any] = {}
        if self.dialect == "sqlite":
            if schema is not None:
                raise ValueError("schema= is for PostgreSQL; SQLite has one schema per file")
            ensure_sqlite_dir(self.url)
            connect_args["timeout"] = connect_timeout
            if self.url.drivername == "sqlite+aiosqlite" and (dbapi := one_call_dbapi()):
                engine_args["module"] = dbapi  # one thread call per statement
        elif self.url.drivername == "postgresql+asyncpg":
            connect_args["timeout"] = connect_timeout
            if schema is not None:
                connect_args["server_settings"] = {"search_path": schema}
        elif schema is not None:
            raise ValueError(
                f"schema= is supported with postgresql+asyncpg, not {self.url.drivername}"
            )
        self.schema = schema
        self.pool_size = pool_size
        self.pool_timeout = pool_timeout
        pool_args: dict[str, Any] = {}
        dialect_cls: Any = self.url.get_dialect()
        if issubclass(dialect_cls.get_pool_class(self.url), QueuePool):
            # Not for an in-memory SQLite database (one shared connection).
            # The gate below keeps callers from waiting in this pool, so its
            # own timeout is only a backstop.
            pool_args = {"pool_size": pool_size, "max_overflow": 0, "pool_timeout": pool_timeout}
        self.engine: AsyncEngine = create_async_engine(
            self.url,
            echo=echo,
            connect_args=connect_args,
            json_serializer=json_columns.dumps,
            **pool_args,
            **engine_args,
        )
        if self.dialect != "sqlite":
            _ping_when_idle(self.engine, ping_after, clock)
        self._gate = asyncio.Semaphore(pool_size)  # FIFO since Python 3.11.1
        # SQLite has one writer at a time: this process's writers queue here.
        self._write_lock = asyncio.Lock() if self.dialect == "sqlite" else None
        if self.dialect == "sqlite":
            event.listen(self.engine.sync_engine, "connect", _sqlite_on_connect)
        self.sessions = async_sessionmaker(self.engine, expire_on_commit=False)

    @asynccontextmanager
    async def slot(self) -> AsyncIterator[None]:
        """Wait in line (FIFO) for one of the pool's connections; hold the
        slot while using a session.  StoreUnavailable after ``pool_timeout``."""
        if self._gate.locked():  # else acquire() returns at once: no timer to set
            try:
                async with asyncio.timeout(self.pool_timeout):
                    await self._gate.acquire()
            except TimeoutError:
                raise StoreUnavailable(
                    f"the database {self.safe_url} is busy: no connection of {self.pool_size} "
                    f"came free within {self.pool_timeout:g} s"
                ) from None
        else:
            await self._gate.acquire()
        try:
            yield
        finally:
            self._gate.release()

    @asynccontextmanager
    async def transaction(self, action: str, *, write: bool = False) -> AsyncIterator[AsyncSession]:
        """A session in one transaction (after waiting in line for a
        connection, and on SQLite for this process's turn to write), rolled
        back on any error.  A refused value comes out as StoreRejected, any
        other database failure as StoreUnavailable (``action`` says what was
        being done); both chain the driver's error."""
        async with self._guarded(action, write), self.sessions() as session, session.begin():
            yield session

    @asynccontextmanager
    async def connection(
        self, action: str, *, write: bool = False
    ) -> AsyncIterator[AsyncConnection]:
        """:meth:`transaction` on a Core connection: for statements on tables
        and columns (no ORM entities loaded, no unit of work), at less CPU.

        A read (``write`` False) on PostgreSQL runs outside a transaction
        (autocommit): under READ COMMITTED each statement sees its own
        snapshot inside a transaction too, so a BEGIN and a COMMIT (two
        round trips to the server) would buy a read nothing.  Writes, and
        every connection on SQLite (whose reads start no transaction), begin
        one as before."""
        if write or self.dialect != "postgresql":
            async with self._guarded(action, write), self.engine.begin() as conn:
                yield conn
            return
        async with self._guarded(action, write), self.engine.connect() as conn:
            yield await conn.execution_options(isolation_level="AUTOCOMMIT")

    @asynccontextmanager
    async def _guarded(self, action: str, write: bool) -> AsyncIterator[None]:
        """The line for a connection (and on SQLite the write lock) around a
        transaction, and its errors as the store's."""
        lock = self._write_lock if write else None
        try:
            if lock is not None:
                await lock.acquire()
            async with self.slot():
                yield
        except (*DB_ERRORS, *VALUE_ERRORS) as exc:
            if refused_value(exc):
                raise StoreRejected(
                    f"the database refused a value when asked to {action}: {describe_db_error(exc)}"
                ) from exc
            raise StoreUnavailable(
                f"the store could not {action} ({self.safe_url}): {describe_db_error(exc)}"
            ) from exc
        finally:
            if lock is not None:
                lock.release()

    async def upgrade(self, revision: str = "heads") -> None:
        """Bring the schema to ``revision`` (idempotent); StoreUnavailable if
        the database cannot be reached."""
        ensure_sqlite_dir(self.url)
        try:
            async with self.engine.begin() as conn:
                if self.dialect == "postgresql":
                    # Processes starting together on an empty database would all
                    # CREATE the same tables: one at a time (the lock ends with
                    # this transaction; the next finds the schema at head).
                    await conn.execute(
                        text("SELECT pg_advisory_xact_lock(:key)"), {"key": MIGRATION_LOCK}
                    )
                await conn.run_sync(self._upgrade, revision)
        except DB_ERRORS as exc:
            raise StoreUnavailable(
                f"could not migrate the database {self.safe_url}: {describe_db_error(exc)}"
            ) from exc

    def _upgrade(self, connection: Connection, revision: str) -> None:
        from alembic import command

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

    async def at_head(self) -> bool:
        """True when the database is at the shipped migrations' head(s): one
        query of ``alembic_version``, no alembic.  False when it is behind,
        elsewhere, or has no version table yet; StoreUnavailable when the
        database cannot be reached."""
        heads = head_revisions()
        try:
            async with self.engine.connect() as conn:
                try:
                    rows = await conn.execute(text("SELECT version_num FROM alembic_version"))
                    found = frozenset(str(r[0]) for r in rows)
                except DB_ERRORS:  # no version table: a new database
                    return False
        except DB_ERRORS as exc:
            raise StoreUnavailable(
                f"could not open the database {self.safe_url}: {describe_db_error(exc)}"
            ) from exc
        return bool(heads) and found == heads

    async def ensure_schema(self) -> None:
        """Migrate to head unless the database is there already (the check
        every start makes: one query; alembic is loaded only to upgrade)."""
        if not await self.at_head():
            await self.upgrade()

    async def ping(self) -> bool:
        """True when a trivial query succeeds."""
        try:
            async with self.slot(), self.engine.connect() as conn:
                await conn.execute(text("SELECT 1"))
        except StoreUnavailable as exc:
            log.warning("database %s busy: %s", self.safe_url, exc)
            return False
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
