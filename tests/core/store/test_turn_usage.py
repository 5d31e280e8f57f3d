"""A saved turn's usage rows go in the turn's own transaction, on SQLite
and PostgreSQL: one commit writes both, a turn that is not saved leaves no
usage behind, and usage the database refuses is left out (logged) without
losing the turn."""

from __future__ import annotations

import dataclasses
import logging
from datetime import UTC, datetime
from typing import Any

import pytest
import sqlalchemy as sa

from core.errors import StoreRejected
from core.store import Database, Repo
from core.store.models import Message, UsageModelCall, UsageTurn
from core.store.usage import UsageStore
from core.usage import GroupBy, ModelCall, TurnUsage
from tests.core.store.builders import CHANNEL, task, turn
from tests.core.store.test_refused import refuse
from tests.fakes.db_transactions import transactions, writes


def usage_of(rid: str) -> TurnUsage:
    return TurnUsage(
        request_id=rid,
        at=datetime.now(UTC),
        platform=CHANNEL.platform,
        server=CHANNEL.scope,
        conversation=str(CHANNEL),
        user_id="u1",
        llm_model="fake-model",
        llm_calls=2,
        prompt_tokens=100,
        completion_tokens=10,
        model_calls=(ModelCall("text-to-image", "org/model", "done", 1.0),),
    )


async def count(db: Database, model: Any) -> int:
    async with db.sessions() as s:
        return int(await s.scalar(sa.select(sa.func.count()).select_from(model)) or 0)


async def test_the_usage_is_written_in_the_turns_transaction(repo: Repo) -> None:
    record = turn(CHANNEL, "draw a cat", "here", tasks=(task(0),))
    record = dataclasses.replace(record, usage=usage_of(record.request.request_id))
    with transactions(repo.db) as done:
        await repo.save_turn(record)
    (saved,) = writes(done)  # one commit: messages, task runs and usage together
    assert any(s.startswith("INSERT INTO messages") for s in saved)
    assert any(s.startswith("INSERT INTO usage_turns") for s in saved)
    assert any(s.startswith("INSERT INTO usage_model_calls") for s in saved)
    (mine,) = await UsageStore(repo.db).totals(GroupBy.USER)
    assert (mine.requests, mine.llm_calls, mine.model_calls) == (1, 2, 1)


async def test_a_turn_without_usage_writes_none(repo: Repo) -> None:
    await repo.save_turn(turn(CHANNEL, "hi", "hello"))
    assert await count(repo.db, Message) == 2
    assert await count(repo.db, UsageTurn) == 0


async def test_usage_recorded_before_is_not_counted_again(repo: Repo) -> None:
    record = turn(CHANNEL, "hi", "hello")
    rid = record.request.request_id
    assert await UsageStore(repo.db).record(usage_of(rid))
    await repo.save_turn(dataclasses.replace(record, usage=usage_of(rid)))
    assert await count(repo.db, Message) == 2
    assert await count(repo.db, UsageTurn) == 1
    assert await count(repo.db, UsageModelCall) == 1


async def test_a_turn_that_is_not_saved_leaves_no_usage(repo: Repo) -> None:
    await refuse(repo.db, "no_messages", "messages", "1 = 1")
    record = turn(CHANNEL, "hi", "hello")
    with pytest.raises(StoreRejected):
        await repo.save_turn(dataclasses.replace(record, usage=usage_of(record.request.request_id)))
    assert await count(repo.db, UsageTurn) == 0  # rolled back with the turn


async def test_usage_the_database_refuses_is_left_out_not_the_turn(
    repo: Repo, caplog: pytest.LogCaptureFixture
) -> None:
    await refuse(repo.db, "no_usage", "usage_turns", "1 = 1")
    record = turn(CHANNEL, "hi", "hello")
    with caplog.at_level(logging.ERROR, logger="core.store.repo"):
        await repo.save_turn(dataclasses.replace(record, usage=usage_of(record.request.request_id)))
    assert [t.text for t in (await repo.load_history(CHANNEL)).turns] == ["hi", "hello"]
    assert await count(repo.db, UsageTurn) == 0
    assert "usage not recorded" in caplog.text
