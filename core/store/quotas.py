"""Quota counters in the store: one atomic check-and-count per request.

Each counter is a row of ``quota_counters`` (a key's requests and LLM tokens
in one window).  :meth:`QuotaStore.admit` counts a request in every window
it is given with ``INSERT … ON CONFLICT DO UPDATE … WHERE <not full>
RETURNING``, which SQLite (3.35+) and PostgreSQL both run atomically: two
processes racing for the last request of a window cannot both get it.  When
one window is full the transaction is rolled back, so a refused request
counts nowhere.  The policy (which windows, what limits, the messages) is
:mod:`core.ratelimit`'s.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncSession

from core.errors import StoreUnavailable
from core.store.db import DB_ERRORS, Database, describe_db_error, dialect_insert
from core.store.models import QuotaCounter

_PK = ["key", "period", "window_start"]


@dataclass(frozen=True, slots=True)
class Window:
    """One counter a request must fit in: ``key``'s ``period`` window that
    starts at ``start`` (Unix seconds).  A limit of 0 counts without limiting."""

    key: str
    period: str  # minute | day
    start: int
    max_requests: int = 0
    max_tokens: int = 0  # the window is full once its tokens reach this


@dataclass(frozen=True, slots=True)
class Used:
    """What a window holds (the one that refused a request)."""

    window: Window
    requests: int
    tokens: int


class _Full(Exception):
    def __init__(self, used: Used) -> None:
        super().__init__(used.window.key)
        self.used = used


class QuotaStore:
    def __init__(self, db: Database) -> None:
        self.db = db
        # SQLite has one writer at a time: queue this process's writers here.
        self._write_lock = asyncio.Lock() if db.dialect == "sqlite" else None

    @asynccontextmanager
    async def _transaction(self, action: str) -> AsyncIterator[AsyncSession]:
        lock = self._write_lock
        try:
            if lock is not None:
                await lock.acquire()
            async with self.db.slot(), self.db.sessions() as session, session.begin():
                yield session
        except DB_ERRORS as exc:
            raise StoreUnavailable(
                f"the store could not {action} ({self.db.safe_url}): {describe_db_error(exc)}"
            ) from exc
        finally:
            if lock is not None:
                lock.release()

    def _insert(self) -> Any:
        return dialect_insert(self.db.dialect)(QuotaCounter)

    async def admit(
        self, windows: Sequence[Window], *, prune_before: int | None = None
    ) -> Used | None:
        """Count one request in every window, or in none: None when it was
        counted, else the first full window's use.  ``prune_before`` also
        deletes the rows of windows that started before it."""
        try:
            async with self._transaction("count the request") as s:
                for w in windows:
                    await self._count(s, w)
                if prune_before is not None:
                    await s.execute(
                        sa.delete(QuotaCounter).where(QuotaCounter.window_start < prune_before)
                    )
        except _Full as full:
            return full.used
        return None

    async def _count(self, s: AsyncSession, w: Window) -> None:
        room: list[sa.ColumnElement[bool]] = []
        if w.max_requests > 0:
            room.append(QuotaCounter.requests < w.max_requests)
        if w.max_tokens > 0:
            room.append(QuotaCounter.tokens < w.max_tokens)
        stmt = (
            self._insert()
            .values(key=w.key, period=w.period, window_start=w.start, requests=1, tokens=0)
            .on_conflict_do_update(
                index_elements=_PK,
                set_={"requests": QuotaCounter.requests + 1},
                where=sa.and_(*room) if room else None,
            )
            .returning(QuotaCounter.requests)
        )
        if (await s.execute(stmt)).first() is not None:
            return
        row = (
            await s.execute(
                sa.select(QuotaCounter.requests, QuotaCounter.tokens).where(
                    QuotaCounter.key == w.key,
                    QuotaCounter.period == w.period,
                    QuotaCounter.window_start == w.start,
                )
            )
        ).one()
        raise _Full(Used(w, int(row.requests), int(row.tokens)))

    async def add_tokens(self, windows: Sequence[Window], tokens: int) -> None:
        """Add ``tokens`` to every window (creating it with 0 requests)."""
        if tokens <= 0 or not windows:
            return
        async with self._transaction("count the LLM tokens") as s:
            for w in windows:
                await s.execute(
                    self._insert()
                    .values(
                        key=w.key, period=w.period, window_start=w.start, requests=0, tokens=tokens
                    )
                    .on_conflict_do_update(
                        index_elements=_PK, set_={"tokens": QuotaCounter.tokens + tokens}
                    )
                )

    async def used(self, key: str, period: str, start: int) -> tuple[int, int]:
        """(requests, tokens) of one window, (0, 0) when it has no row."""
        async with self._transaction("read a quota") as s:
            row = (
                await s.execute(
                    sa.select(QuotaCounter.requests, QuotaCounter.tokens).where(
                        QuotaCounter.key == key,
                        QuotaCounter.period == period,
                        QuotaCounter.window_start == start,
                    )
                )
            ).first()
        return (int(row.requests), int(row.tokens)) if row is not None else (0, 0)
