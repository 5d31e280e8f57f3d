"""SQLite through aiosqlite at one worker-thread call per statement.

aiosqlite runs each sqlite3 call in its own thread and hands the result back
to the event loop; SQLAlchemy's adapter asks it for a cursor, then executes,
fetches and closes it: three or four round trips between the loop and that
thread per statement, each a queue put, a wake-up of the thread, a
thread-safe callback and a wake-up of the loop.  That was half of what a
statement cost (about 120 µs of CPU here), and a request through the job
queue runs 16 of them.

:func:`one_call_dbapi` is SQLAlchemy's own aiosqlite adapter with one
change: its cursor runs ``execute``, ``fetchall`` and ``close`` of a sqlite3
cursor in one call on aiosqlite's thread, keeping the description, the row
count and the last row id it read there.  Same SQL, same thread, same
transactions (BEGIN and COMMIT are sqlite3's as before); a commit or a
rollback with no transaction open (a read's commit, the rollback the pool
does on every connection given back) is not sent to the thread; results are
buffered as SQLAlchemy's adapter buffers them.  Server-side cursors
(``stream_results``) keep the stock cursor.  It leans on two internals
(SQLAlchemy's cursor adapter, aiosqlite's ``_execute``); when either is
missing, :func:`one_call_dbapi` returns None and the stock adapter is used.
"""

from __future__ import annotations

import collections
import functools
import sqlite3
from typing import Any

_Result = tuple[Any, list[Any], int, int | None]


def _run(conn: sqlite3.Connection, operation: str, parameters: Any, many: bool) -> _Result:
    """On aiosqlite's thread: the statement, its rows, row count and last row id."""
    cursor = conn.cursor()
    try:
        if many:
            cursor.executemany(operation, parameters)
        elif parameters is None:
            cursor.execute(operation)
        else:
            cursor.execute(operation, parameters)
        description = cursor.description
        rows = cursor.fetchall() if description else []
        return description, rows, cursor.rowcount, cursor.lastrowid
    finally:
        cursor.close()


@functools.cache
def one_call_dbapi() -> Any | None:
    """The aiosqlite DBAPI adapter for ``create_async_engine(module=…)``, or
    None when this SQLAlchemy or aiosqlite lacks what it builds on."""
    try:
        import aiosqlite
        from sqlalchemy.dialects.sqlite.aiosqlite import (
            AsyncAdapt_aiosqlite_connection,
            AsyncAdapt_aiosqlite_cursor,
            AsyncAdapt_aiosqlite_dbapi,
        )
    except ImportError:
        return None
    if not hasattr(aiosqlite.Connection, "_execute"):
        return None

    class Cursor(AsyncAdapt_aiosqlite_cursor):
        """Results buffered in one call; nothing left open on the thread."""

        __slots__ = ("_arraysize", "_description", "_lastrowid", "_rowcount")

        def __init__(self, adapt_connection: Any) -> None:
            self._adapt_connection = adapt_connection
            self._connection = adapt_connection._connection
            self._cursor = None  # type: ignore[assignment]  # none is kept open
            self._rows = collections.deque()
            self._soft_closed_memoized = {}  # type: ignore[assignment]
            self._description: Any = None
            self._rowcount = -1
            self._lastrowid: int | None = None
            self._arraysize = 1

        @property
        def description(self) -> Any:
            return self._description

        @property
        def rowcount(self) -> int:
            return self._rowcount

        @property
        def lastrowid(self) -> int:
            return self._lastrowid  # type: ignore[return-value]  # None before an insert, as sqlite3's

        @property
        def arraysize(self) -> int:
            return self._arraysize

        @arraysize.setter
        def arraysize(self, value: int) -> None:
            self._arraysize = value

        async def _async_soft_close(self) -> None:
            return None  # closed on the thread already; the rows stay buffered

        def close(self) -> None:
            self._rows.clear()

        async def _call(self, operation: str, parameters: Any, many: bool) -> None:
            conn = self._connection
            async with self._adapt_connection._execute_mutex:
                result: _Result = await conn._execute(_run, conn._conn, operation, parameters, many)
            self._description, rows, self._rowcount, self._lastrowid = result
            self._rows = collections.deque(rows)

        async def _execute_async(self, operation: str, parameters: Any) -> None:
            await self._call(operation, parameters, False)

        async def _executemany_async(self, operation: str, seq_of_parameters: Any) -> None:
            await self._call(operation, seq_of_parameters, True)

    class Connection(AsyncAdapt_aiosqlite_connection):
        """Commit and roll back only when a transaction is open: the pool
        rolls back every connection it is given back, committed or not,
        and a read commits nothing; each would be a call on the thread."""

        __slots__ = ()
        _cursor_cls = Cursor

        def _open(self) -> bool:
            raw = self._connection._connection  # the sqlite3 connection (None: closed)
            return raw is None or bool(raw.in_transaction)

        def rollback(self) -> None:
            if self._open():
                super().rollback()

        def commit(self) -> None:
            if self._open():
                super().commit()

    class DBAPI(AsyncAdapt_aiosqlite_dbapi):
        def connect(self, *arg: Any, **kw: Any) -> Any:
            stock = super().connect(*arg, **kw)
            return Connection(self, stock._connection)

    return DBAPI(aiosqlite, sqlite3)
