"""The job table takes every conversation name the conversation tables take
(SQLite and PostgreSQL): ``ask --conversation`` with a name of 900
characters is accepted, runs and is stored, on PostgreSQL too, whose
``varchar(800)`` refused it before.  A long name is shortened as the
conversation tables shorten it (each part by :func:`core.store.repo.fit`),
so the same name always finds the same jobs and two long names sharing a
head stay two conversations."""

from __future__ import annotations

import asyncio

import sqlalchemy as sa

from core.errors import RunFailed
from core.jobs import JobQueue, conversation_name
from core.store import Repo
from core.store.jobs import JobStore
from core.store.models import Conversation, StoredJob, utcnow
from core.store.repo import fit_key
from core.types import ConversationKey, Job, Notice, new_request_id
from tests.core.store.builders import turn

KIND = "long"
HEAD = "a conversation with a very long name " * 25  # 925 characters


class Recorder:
    def __init__(self) -> None:
        self.ran: list[int] = []

    async def run(self, job: Job) -> None:
        self.ran.append(job.id)

    async def notify(self, job: Job, notice: Notice) -> None:
        pass

    async def give_up(self, job: Job, failure: RunFailed) -> None:
        raise AssertionError(str(failure))


def key(tail: str) -> ConversationKey:
    return ConversationKey("cli", "local", HEAD + tail, None)


async def test_a_conversation_name_over_800_characters_is_accepted_and_runs(repo: Repo) -> None:
    queue = JobQueue(JobStore(repo), poll=0.05)
    runner = Recorder()
    queue.register(KIND, runner)
    try:
        first = await queue.accept(KIND, key("one"), {}, request_id=new_request_id())
        again = await queue.accept(KIND, key("one"), {}, request_id=new_request_id())
        other = await queue.accept(KIND, key("two"), {}, request_id=new_request_id())
        assert first.fresh and again.fresh and other.fresh
        outcomes = await asyncio.wait_for(
            asyncio.gather(*(queue.process(a.job.id) for a in (first, again, other))), 20
        )
    finally:
        await queue.aclose()
    assert outcomes == ["done", "done", "done"]
    assert runner.ran.index(first.job.id) < runner.ran.index(again.job.id)
    # stored as the conversation tables store the key: each part fitted
    assert first.job.conversation == conversation_name(fit_key(key("one")))
    assert first.job.conversation == again.job.conversation != other.job.conversation
    assert len(first.job.conversation) <= 800

    # ...and the conversation tables take the same key
    await repo.save_turn(turn(key("one"), "hi", "hello"))
    async with repo.db.sessions() as s:
        channels = list((await s.scalars(sa.select(Conversation.channel))).all())
    assert channels == [fit_key(key("one")).channel]


async def test_a_plan_preview_of_a_long_conversation_is_kept(repo: Repo) -> None:
    """``remember`` (a ``/plan`` preview) takes the key's text, however long."""
    store = JobStore(repo)
    name = str(key("x" * 2000))
    await store.remember(
        kind="preview", conversation=name, payload={}, request_id="r1", now=utcnow()
    )
    row = await store.by_request("r1")
    assert row is not None and len(row.conversation) <= 800
    async with repo.db.sessions() as s:
        assert await s.scalar(sa.select(sa.func.count()).select_from(StoredJob)) == 1
