"""What a store did, from SQLAlchemy's own events on the real engine:
:func:`transactions` lists the statements of every transaction committed
while it is open, so a test can count the writes a piece of work makes."""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import sqlalchemy as sa

from core.store import Database


class Commits:
    """Counts the transactions committed on ``db``'s engine from now on."""

    def __init__(self, db: Database) -> None:
        self.n = 0
        sa.event.listen(db.engine.sync_engine, "commit", self._commit)

    def _commit(self, _conn: Any) -> None:
        self.n += 1


@contextmanager
def transactions(db: Database) -> Iterator[list[list[str]]]:
    """The statements (whitespace collapsed) of each transaction committed
    meanwhile, in commit order."""
    engine = db.engine.sync_engine
    running: dict[int, list[str]] = {}
    done: list[list[str]] = []

    def executed(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        running.setdefault(id(conn), []).append(" ".join(statement.split()))

    def committed(conn: Any) -> None:
        done.append(running.pop(id(conn), []))

    def rolled_back(conn: Any) -> None:
        running.pop(id(conn), None)

    sa.event.listen(engine, "before_cursor_execute", executed)
    sa.event.listen(engine, "commit", committed)
    sa.event.listen(engine, "rollback", rolled_back)
    try:
        yield done
    finally:
        sa.event.remove(engine, "before_cursor_execute", executed)
        sa.event.remove(engine, "commit", committed)
        sa.event.remove(engine, "rollback", rolled_back)


def writes(done: list[list[str]]) -> list[list[str]]:
    """The transactions that changed something."""
    return [t for t in done if any(_WRITE.search(s) for s in t)]


_WRITE = re.compile(r"\b(INSERT INTO|UPDATE \S+ SET|DELETE FROM)\b", re.IGNORECASE)
