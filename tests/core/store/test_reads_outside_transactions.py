"""A read on PostgreSQL runs outside a transaction (no BEGIN and COMMIT round
trips); a write is one transaction.  Seen from the server: ``now()`` is the
transaction's start, so it changes between two statements only when each
is a transaction of its own."""

from __future__ import annotations

import sqlalchemy as sa

from core.store import Repo

TWO_NOWS = (
    sa.text("SELECT now()"),
    sa.text("SELECT pg_sleep(0.01)"),
    sa.text("SELECT now()"),
)


async def _nows(repo: Repo, *, write: bool) -> list[object]:
    async with repo.db.connection("look at the clock", write=write) as conn:
        return [(await conn.execute(q)).scalar() for q in TWO_NOWS][::2]


async def test_a_read_on_postgresql_is_not_a_transaction(pg_repo: Repo) -> None:
    first, second = await _nows(pg_repo, write=False)
    assert first != second  # each statement its own transaction


async def test_a_write_on_postgresql_is_one_transaction(pg_repo: Repo) -> None:
    first, second = await _nows(pg_repo, write=True)
    assert first == second


async def test_a_read_after_a_read_gets_a_transaction_when_writing(pg_repo: Repo) -> None:
    """The pooled connection a read left in autocommit begins a transaction
    again for the next writer."""
    for _ in range(3):
        await _nows(pg_repo, write=False)
    first, second = await _nows(pg_repo, write=True)
    assert first == second
