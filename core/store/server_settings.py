"""The ``server_settings`` table: one JSON object per server or workspace.

The store knows rows and JSON, not what the keys mean: validation and
defaults are :mod:`core.server_settings`'s.  :meth:`ServerSettingsStore.update`
reads and writes a server's row in one transaction (the row locked on
PostgreSQL, the writer queued on SQLite), so two admins changing different
keys at once both keep their change.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from datetime import datetime
from typing import Any, cast

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncSession

from core.store.db import Database, dialect_insert
from core.store.models import ServerSettingsRow, utcnow
from core.store.repo import clean_json, fit

R = ServerSettingsRow
_T = cast(sa.Table, ServerSettingsRow.__table__)
# A turn reads its server's settings first: a Core statement on the table,
# not an ORM query, so that no process (a CLI ask) configures every mapper
# on its first request's path.
_LOAD = sa.select(_T).where(
    _T.c.platform == sa.bindparam("platform"), _T.c.server == sa.bindparam("server")
)


@dataclass(frozen=True, slots=True)
class StoredSettings:
    platform: str
    server: str
    settings: dict[str, Any]
    updated_at: datetime
    updated_by: str | None


def _key(platform: str, server: str) -> tuple[str, str]:
    return fit(platform, R.platform.type.length), fit(server, R.server.type.length)


class ServerSettingsStore:
    def __init__(self, db: Database) -> None:
        self.db = db

    def _session(
        self, action: str, *, write: bool = False
    ) -> AbstractAsyncContextManager[AsyncSession]:
        return self.db.transaction(action, write=write)

    async def load(self, platform: str, server: str) -> StoredSettings | None:
        platform, server = _key(platform, server)
        async with self.db.connection("load the server's settings") as conn:
            row = (await conn.execute(_LOAD, {"platform": platform, "server": server})).first()
        return _stored(row) if row is not None else None

    async def list(self) -> list[StoredSettings]:
        async with self._session("list the servers' settings") as s:
            rows = await s.scalars(sa.select(R).order_by(R.platform, R.server))
            return [_stored(r) for r in rows.all()]

    async def update(
        self,
        platform: str,
        server: str,
        change: Callable[[dict[str, Any]], dict[str, Any]],
        *,
        by: str | None = None,
    ) -> dict[str, Any]:
        """Apply ``change`` to the server's settings (``{}`` when it has none)
        and store the result in the same transaction; returns it.  An empty
        result deletes the row.  ``change`` may raise to store nothing."""
        platform, server = _key(platform, server)
        insert = dialect_insert(self.db.dialect)
        async with self._session("save the server's settings", write=True) as s:
            # Insert-or-nothing first: it takes the write lock (SQLite) or waits
            # for a concurrent first insert (PostgreSQL); then lock the row.
            await s.execute(
                insert(R)
                .values(platform=platform, server=server, settings={}, updated_at=utcnow())
                .on_conflict_do_nothing(index_elements=["platform", "server"])
            )
            row = (
                await s.scalars(
                    sa.select(R)
                    .where(R.platform == platform, R.server == server)
                    .with_for_update()
                    .execution_options(populate_existing=True)
                )
            ).one()
            new = clean_json(change(dict(row.settings or {})))
            if not new:
                await s.delete(row)
                return {}
            row.settings = new
            row.updated_at = utcnow()
            row.updated_by = None if by is None else fit(by, R.updated_by.type.length)
            return dict(new)


def _stored(row: ServerSettingsRow | sa.Row[Any]) -> StoredSettings:
    return StoredSettings(
        row.platform, row.server, dict(row.settings or {}), row.updated_at, row.updated_by
    )
