"""Feedback on answers (``feedback``): one row per person and answer, kept
with the turn by its ``request_id``; a later click by the same person on
the same answer replaces the earlier one (an upsert, safe on SQLite and
PostgreSQL alike when two clicks race).

The Slack adapter stores its 👍/👎 clicks here (structurally its
``FeedbackStore``: :meth:`FeedbackStore.record_feedback`).
"""

from __future__ import annotations

from contextlib import AbstractAsyncContextManager

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncSession

from core.errors import ErrorCode, InputRejected
from core.store.db import Database, dialect_insert
from core.store.models import Feedback, utcnow
from core.store.repo import fit
from core.types import ConversationKey

RATINGS = frozenset({"good", "bad"})
F = Feedback


class FeedbackStore:
    def __init__(self, db: Database) -> None:
        self.db = db

    def _session(
        self, action: str, *, write: bool = False
    ) -> AbstractAsyncContextManager[AsyncSession]:
        return self.db.transaction(action, write=write)

    async def record_feedback(
        self, conversation: ConversationKey, request_id: str, user_id: str, rating: str
    ) -> None:
        """Keep ``user_id``'s ``rating`` ("good" or "bad") of the answer to
        ``request_id`` (replacing their earlier one)."""
        if rating not in RATINGS:
            raise InputRejected(ErrorCode.BAD_RATING, value=rating)
        insert = dialect_insert(self.db.dialect)
        now = utcnow()
        stmt = insert(Feedback).values(
            request_id=fit(request_id, F.request_id.type.length),
            conversation=fit(str(conversation), F.conversation.type.length),
            platform=fit(conversation.platform, F.platform.type.length),
            user_id=fit(user_id, F.user_id.type.length),
            rating=rating,
            created_at=now,
            updated_at=now,
        )
        stmt = stmt.on_conflict_do_update(
            index_elements=["request_id", "user_id"],
            set_={"rating": stmt.excluded.rating, "updated_at": stmt.excluded.updated_at},
        )
        async with self._session("record the feedback", write=True) as s:
            await s.execute(stmt)

    async def for_request(self, request_id: str) -> dict[str, str]:
        """Each person's rating of the answer to ``request_id``."""
        key = fit(request_id, F.request_id.type.length)
        async with self._session("read the feedback") as s:
            rows = await s.execute(sa.select(F.user_id, F.rating).where(F.request_id == key))
            return {str(user): str(rating) for user, rating in rows}
