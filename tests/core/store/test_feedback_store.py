"""The feedback table on SQLite and PostgreSQL: one rating per person and
answer, the last click kept, two clicks at once leaving one row."""

from __future__ import annotations

import asyncio

import pytest
import sqlalchemy as sa

from core.errors import InputRejected
from core.store import Database
from core.store.feedback import FeedbackStore
from core.store.models import Feedback
from core.types import ConversationKey

KEY = ConversationKey("slack", "T1", "D1", "1700000000.000100")


async def test_the_last_click_of_each_person_is_kept(database: Database) -> None:
    store = FeedbackStore(database)
    await store.record_feedback(KEY, "r1", "u1", "good")
    await store.record_feedback(KEY, "r1", "u1", "bad")
    await store.record_feedback(KEY, "r1", "u2", "good")
    await store.record_feedback(KEY, "r2", "u1", "good")

    assert await store.for_request("r1") == {"u1": "bad", "u2": "good"}
    assert await store.for_request("r2") == {"u1": "good"}
    assert await store.for_request("r3") == {}
    async with database.sessions() as s:
        row = (await s.execute(sa.select(Feedback).where(Feedback.user_id == "u2"))).scalar_one()
    assert (row.conversation, row.platform) == (str(KEY), "slack")


async def test_clicks_at_once_leave_one_row(database: Database) -> None:
    store = FeedbackStore(database)
    await asyncio.gather(*(store.record_feedback(KEY, "r1", "u1", r) for r in ["good", "bad"] * 5))
    assert set((await store.for_request("r1")).values()) <= {"good", "bad"}
    async with database.sessions() as s:
        assert (await s.execute(sa.select(sa.func.count(Feedback.id)))).scalar_one() == 1


async def test_only_good_or_bad(database: Database) -> None:
    with pytest.raises(InputRejected):
        await FeedbackStore(database).record_feedback(KEY, "r1", "u1", "meh")
