"""Turns asked to be saved while another is being saved (a burst) share one
transaction; a group the database refuses any part of is saved again turn by
turn, so each caller still learns its own outcome (SQLite and PostgreSQL)."""

from __future__ import annotations

import asyncio
from dataclasses import replace

import pytest

from core.errors import LeaseLost, StoreUnavailable
from core.store import MediaStore, Repo, TurnRecord
from core.store.jobs import JobFence, JobStore
from core.store.models import utcnow
from core.types import ConversationKey
from tests.core.store.builders import running, stored, task, turn
from tests.core.store.test_refused import refuse
from tests.fakes.db_transactions import Commits


def key(i: int) -> ConversationKey:
    return ConversationKey("slack", "T1", f"C{i}")


async def test_turns_asked_while_one_is_saved_share_one_commit(
    repo: Repo, media_store: MediaStore
) -> None:
    files = [
        await stored(media_store, f"image{i}.png", f"png{i}".encode(), source="generated")
        for i in range(5)
    ]
    commits = Commits(repo.db)
    first = asyncio.ensure_future(repo.save_turn(turn(key(0), "q0", "a0", files=(files[0],))))
    await asyncio.sleep(0)  # under way: the next four wait for it, then go together
    rest = [
        repo.save_turn(turn(key(i), f"q{i}", f"a{i}", files=(files[i],), tasks=(task(0),)))
        for i in range(1, 5)
    ]
    saved = await asyncio.gather(first, *rest)
    assert commits.n == 2
    assert [[r.handle for r in final] for final in saved] == [[f"image{i}.png"] for i in range(5)]
    for i in range(5):
        history = await repo.load_history(key(i))
        assert [t.text for t in history.turns] == [f"q{i}", f"a{i}"]
        assert [r.handle for r in history.resources.values()] == [f"image{i}.png"]


async def test_a_turn_the_database_refuses_fails_alone_the_others_are_saved(
    repo: Repo,
) -> None:
    """One turn's text is refused: the group is saved again turn by turn;
    that one is saved in a plainer shape (as alone), the others as asked."""
    await refuse(repo.db, "no_cafe", "messages", "{row}text LIKE '%é%'")
    first = asyncio.ensure_future(repo.save_turn(turn(key(0), "q0", "a0")))
    await asyncio.sleep(0)
    texts = ["plain", "un café", "also plain"]
    await asyncio.gather(
        first, *(repo.save_turn(turn(key(i + 1), t, "ok")) for i, t in enumerate(texts))
    )
    saved = [(await repo.load_history(key(i + 1))).turns[0].text for i in range(3)]
    assert saved == ["plain", "un caf\\xe9", "also plain"]


async def test_a_turn_whose_job_was_taken_is_not_saved_the_others_are(repo: Repo) -> None:
    jobs = JobStore(repo)
    ids = await running(jobs, 3)
    assert await jobs.release([ids[1]], owner="p1", now=utcnow()) == 1  # another's now

    def fenced(i: int) -> TurnRecord:
        reply = {"text": f"a{i}", "files": [], "tasks": []}
        record = turn(key(i + 1), f"q{i}", f"a{i}")
        return replace(record, job=JobFence(ids[i], "p1", lambda _final: {"v": 2, "reply": reply}))

    first = asyncio.ensure_future(repo.save_turn(turn(key(0), "warm", "up")))
    await asyncio.sleep(0)
    outcomes = await asyncio.gather(
        first,
        *(repo.save_turn(fenced(i)) for i in range(3)),
        return_exceptions=True,
    )
    assert isinstance(outcomes[2], LeaseLost)
    assert [o == () for o in (outcomes[1], outcomes[3])] == [True, True]
    texts = [[t.text for t in (await repo.load_history(key(i + 1))).turns] for i in range(3)]
    assert texts == [["q0", "a0"], [], ["q2", "a2"]]
    rows = await jobs.get(ids)
    assert rows[ids[0]].checkpoint == {"v": 2, "reply": {"text": "a0", "files": [], "tasks": []}}
    assert rows[ids[1]].checkpoint is None


async def test_on_a_database_that_is_not_there_every_caller_hears_it(dead_repo: Repo) -> None:
    """A group that cannot reach the database fails at once, each caller with
    the outage (not tried again turn by turn)."""
    first = asyncio.ensure_future(dead_repo.save_turn(turn(key(0), "q0", "a0")))
    await asyncio.sleep(0)
    outcomes = await asyncio.gather(
        first,
        *(dead_repo.save_turn(turn(key(i), f"q{i}", f"a{i}")) for i in range(1, 4)),
        return_exceptions=True,
    )
    assert all(isinstance(o, StoreUnavailable) for o in outcomes), outcomes
    # nothing is left waiting: the next save is tried (and fails) on its own
    with pytest.raises(StoreUnavailable):
        await dead_repo.save_turn(turn(key(9), "again", "later"))
