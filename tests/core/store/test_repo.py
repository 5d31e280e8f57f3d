"""Repo: turns in and out, handles, threads, forgetting, event dedupe."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

import pytest
import sqlalchemy as sa

from core.errors import StoreConflict
from core.store import Database, MediaStore, Repo
from core.store.models import Conversation, Message, ProcessedEvent, ResourceRow, TaskRun
from core.store.repo import EVENT_TTL, PRUNE_EVERY
from core.types import ConversationKey, Resource
from tests.core.store.builders import CHANNEL, THREAD, stored, task, turn
from tests.fakes.clock import FakeClock


async def count(db: Database, model: type) -> int:
    async with db.sessions() as s:
        return (await s.scalar(sa.select(sa.func.count()).select_from(model))) or 0


async def test_empty_conversation(repo: Repo) -> None:
    history = await repo.load_history(CHANNEL)
    assert history.turns == [] and history.resources == {}
    assert await repo.taken_handles(CHANNEL) == set()


async def test_round_trip(repo: Repo, media_store: MediaStore) -> None:
    photo = await stored(media_store, "photo.png", b"png-bytes")
    gen = await stored(media_store, "image-1.png", b"gen-bytes", source="generated", task_id=0)
    speech = await stored(
        media_store,
        "speech-1.wav",
        b"wav",
        kind="audio",
        mime="audio/wav",
        source="generated",
        task_id=1,
    )
    first = turn(
        CHANNEL,
        "draw a cat like this",
        "here it is",
        uploads=(photo,),
        files=(gen, speech),
        tasks=(task(0, files=("image-1.png",)), task(1, "text-to-speech", ("speech-1.wav",))),
    )
    saved = await repo.save_turn(first)
    assert [r.handle for r in saved] == ["photo.png", "image-1.png", "speech-1.wav"]
    await repo.save_turn(turn(CHANNEL, "thanks", "you're welcome", user="u2"))

    history = await repo.load_history(CHANNEL)
    assert [(t.role, t.text, t.user_id) for t in history.turns] == [
        ("user", "draw a cat like this", "u1"),
        ("assistant", "here it is", None),
        ("user", "thanks", "u2"),
        ("assistant", "you're welcome", None),
    ]
    assert [t.handles for t in history.turns] == [
        ("photo.png",),
        ("image-1.png", "speech-1.wav"),
        (),
        (),
    ]
    created = [t.created_at for t in history.turns]
    assert created == sorted(created) and all(c.tzinfo is not None for c in created)
    assert all(abs(datetime.now(UTC) - c) < timedelta(minutes=1) for c in created)

    res = history.resources
    assert set(res) == {"photo.png", "image-1.png", "speech-1.wav"}
    assert res["photo.png"] == photo
    assert res["image-1.png"] == gen and res["image-1.png"].task_id == 0
    assert res["speech-1.wav"].kind == "audio" and res["speech-1.wav"].source == "generated"
    assert res["photo.png"].path.is_absolute()
    assert await repo.read(res["photo.png"]) == b"png-bytes"
    assert await repo.read(res["speech-1.wav"]) == b"wav"

    async with repo.db.sessions() as s:
        runs = (await s.scalars(sa.select(TaskRun).order_by(TaskRun.task_index))).all()
    assert [(r.task_index, r.task, r.status, r.model) for r in runs] == [
        (0, "text-to-image", "done", "org/model"),
        (1, "text-to-speech", "done", "org/model"),
    ]
    assert runs[0].args == {"text": "a cat"}
    assert runs[0].result == {"label": "cat", "score": 0.9, "files": ["image-1.png"]}
    assert runs[0].started is not None and runs[0].started.tzinfo is not None
    assert runs[0].request_id == first.request.request_id


async def test_history_keeps_the_last_turns(repo: Repo) -> None:
    for i in range(5):
        await repo.save_turn(turn(CHANNEL, f"q{i}", f"a{i}"))
    history = await repo.load_history(CHANNEL, turns=2)
    assert [t.text for t in history.turns] == ["q3", "a3", "q4", "a4"]


async def test_a_taken_handle_is_refused_not_renamed(repo: Repo, media_store: MediaStore) -> None:
    """A handle the conversation has already: the answer named the file by it,
    so a silent rename would point later turns at another file.  Turns of one
    conversation run one at a time (core.jobs), so this is a bug: refuse."""
    a = await stored(media_store, "photo.png", b"one")
    b = await stored(media_store, "photo.png", b"two")
    gen = await stored(media_store, "image.png", b"three", source="generated", task_id=0)
    await repo.save_turn(turn(CHANNEL, "first", "ok", uploads=(a,)))
    with pytest.raises(StoreConflict, match=r"photo\.png"):
        await repo.save_turn(
            turn(
                CHANNEL,
                "second",
                "see image.png",
                uploads=(b,),
                files=(gen,),
                tasks=(task(0, files=("image.png",)),),
            )
        )
    history = await repo.load_history(CHANNEL)
    assert [t.text for t in history.turns] == ["first", "ok"]  # nothing of the second
    assert set(history.resources) == {"photo.png"}
    assert await repo.read(history.resources["photo.png"]) == b"one"
    assert await count(repo.db, TaskRun) == 0


async def test_concurrent_savers_of_one_handle_one_wins_the_rest_are_refused(
    repo: Repo, media_store: MediaStore
) -> None:
    uploads = [await stored(media_store, "photo.png", bytes([i])) for i in range(4)]
    results = await asyncio.gather(
        *(repo.save_turn(turn(CHANNEL, f"q{i}", "a", uploads=(u,))) for i, u in enumerate(uploads)),
        return_exceptions=True,
    )
    saved = [r for r in results if not isinstance(r, BaseException)]
    refused = [r for r in results if isinstance(r, BaseException)]
    assert len(saved) == 1 and [r.handle for r in saved[0]] == ["photo.png"]
    assert len(refused) == 3 and all(isinstance(e, StoreConflict) for e in refused)
    assert await repo.taken_handles(CHANNEL) == {"photo.png"}


async def test_thread_sees_its_channels_files(repo: Repo, media_store: MediaStore) -> None:
    old = [await stored(media_store, f"old{i}.png", bytes([i])) for i in range(3)]
    for r in old:
        await repo.save_turn(turn(CHANNEL, "upload", "ok", uploads=(r,)))
    shared_parent = await stored(media_store, "cat.png", b"parent cat")
    await repo.save_turn(turn(CHANNEL, "a cat", "ok", uploads=(shared_parent,)))
    own_cat = await stored(media_store, "cat.png", b"thread cat")
    await repo.save_turn(turn(THREAD, "my cat", "ok", uploads=(own_cat,)))

    history = await repo.load_history(THREAD, parent_resources=2)
    assert [t.text for t in history.turns] == ["my cat", "ok"]  # the thread's own turns only
    assert set(history.resources) == {"old2.png", "cat.png"}  # 2 most recent of the parent
    assert await repo.read(history.resources["cat.png"]) == b"thread cat"  # own wins

    channel = await repo.load_history(CHANNEL)
    assert "old0.png" in channel.resources  # a channel does not see its threads
    assert await repo.read(channel.resources["cat.png"]) == b"parent cat"
    assert {"old0.png", "cat.png"} <= await repo.taken_handles(THREAD)


async def test_thread_sees_files_of_sibling_threads(repo: Repo, media_store: MediaStore) -> None:
    """Slack answers every mention in its own thread: a new thread in the
    channel must still reach the files made in the channel's other threads."""
    sibling = ConversationKey(THREAD.platform, THREAD.scope, THREAD.channel, "other-thread")
    made = await stored(media_store, "image.png", b"from sibling", source="generated", task_id=0)
    await repo.save_turn(turn(sibling, "draw", "done", files=(made,), tasks=(task(0),)))
    history = await repo.load_history(THREAD)
    assert await repo.read(history.resources["image.png"]) == b"from sibling"
    other_channel = ConversationKey(THREAD.platform, THREAD.scope, "elsewhere", "t")
    assert (await repo.load_history(other_channel)).resources == {}


async def test_thread_without_history_still_sees_parent(
    repo: Repo, media_store: MediaStore
) -> None:
    r = await stored(media_store, "dog.png", b"dog")
    await repo.save_turn(turn(CHANNEL, "dog", "ok", uploads=(r,)))
    history = await repo.load_history(ConversationKey("discord", "guild1", "chan1", "new"))
    assert history.turns == [] and set(history.resources) == {"dog.png"}


async def test_forget_everything(repo: Repo, media_store: MediaStore) -> None:
    r = await stored(media_store, "a.png", b"a")
    g = await stored(media_store, "b.png", b"b", source="generated", task_id=0)
    await repo.save_turn(turn(CHANNEL, "q", "a", uploads=(r,), files=(g,), tasks=(task(0),)))
    await repo.save_turn(turn(CHANNEL, "q2", "a2", user="u2"))
    await repo.save_turn(turn(THREAD, "in thread", "ok"))
    assert await repo.forget(CHANNEL) == 4
    assert (await repo.load_history(CHANNEL)).turns == []
    assert await count(repo.db, ResourceRow) == 0  # cascaded
    assert await count(repo.db, TaskRun) == 0
    assert len((await repo.load_history(THREAD)).turns) == 2  # threads are separate
    assert await repo.forget(CHANNEL) == 0
    assert await repo.forget(ConversationKey("slack", "T1", "C1")) == 0


async def test_forget_one_users_turns(repo: Repo, media_store: MediaStore) -> None:
    mine = await stored(media_store, "mine.png", b"mine")
    made = await stored(media_store, "made.png", b"made", source="generated", task_id=0)
    await repo.save_turn(
        turn(CHANNEL, "mine 1", "reply 1", uploads=(mine,), files=(made,), tasks=(task(0),))
    )
    theirs = await stored(media_store, "theirs.png", b"theirs")
    await repo.save_turn(turn(CHANNEL, "theirs", "reply 2", user="u2", uploads=(theirs,)))
    await repo.save_turn(turn(CHANNEL, "mine 2", "reply 3"))

    assert await repo.forget(CHANNEL, user_id="u1") == 4
    history = await repo.load_history(CHANNEL)
    assert [t.text for t in history.turns] == ["theirs", "reply 2"]
    assert set(history.resources) == {"theirs.png"}
    assert await count(repo.db, TaskRun) == 0
    assert await repo.forget(CHANNEL, user_id="nobody") == 0


async def test_claim_event_once(repo: Repo) -> None:
    assert await repo.claim_event("slack", "Ev1")
    assert not await repo.claim_event("slack", "Ev1")
    assert await repo.claim_event("discord", "Ev1")  # per source
    results = await asyncio.gather(*(repo.claim_event("slack", "Ev2") for _ in range(5)))
    assert sorted(results) == [False, False, False, False, True]


async def test_claim_event_prunes_old_rows(repo: Repo) -> None:
    async with repo.db.sessions() as s, s.begin():
        s.add(
            ProcessedEvent(
                source="slack", event_id="old", created_at=datetime.now(UTC) - timedelta(days=2)
            )
        )
    assert await repo.claim_event("slack", "new")
    async with repo.db.sessions() as s:
        ids = set((await s.scalars(sa.select(ProcessedEvent.event_id))).all())
    assert ids == {"new"}


async def test_claim_event_prunes_on_the_repos_clock(
    database: Database, media_store: MediaStore
) -> None:
    """Events older than EVENT_TTL on the repo's clock go, at most once per
    PRUNE_EVERY of its monotonic time."""
    clock = FakeClock(wall=1_800_000_000.0)
    repo = Repo(database, media_store, clock=clock)
    assert await repo.claim_event("slack", "first")  # prunes (nothing yet)
    clock.advance(EVENT_TTL.total_seconds() + 60)
    assert await repo.claim_event("slack", "second")  # a day later: "first" goes
    clock.advance(PRUNE_EVERY - 1)
    assert await repo.claim_event("slack", "third")  # "second" is old too, but too soon
    async with repo.db.sessions() as s:
        rows = (
            await s.execute(sa.select(ProcessedEvent.event_id, ProcessedEvent.created_at))
        ).all()
    assert {r.event_id for r in rows} == {"second", "third"}
    assert {r.event_id: r.created_at.replace(tzinfo=UTC) for r in rows}[
        "second"
    ] == datetime.fromtimestamp(1_800_000_000.0 + EVENT_TTL.total_seconds() + 60, UTC)


async def test_read_refuses_a_path_outside_media(repo: Repo, tmp_path) -> None:  # type: ignore[no-untyped-def]
    secret = tmp_path / "secret.txt"
    secret.write_text("secret")
    fake = Resource("x.txt", "text", "text/plain", secret, "0" * 64, 6, "upload")
    with pytest.raises(ValueError):
        await repo.read(fake)


async def test_save_with_a_file_outside_media_is_refused(repo: Repo, tmp_path) -> None:  # type: ignore[no-untyped-def]
    fake = Resource("x.txt", "text", "text/plain", tmp_path / "x.txt", "0" * 64, 1, "upload")
    with pytest.raises(ValueError):
        await repo.save_turn(turn(CHANNEL, "q", "a", uploads=(fake,)))
    assert await count(repo.db, Message) == 0


async def test_failing_save_leaves_nothing(repo: Repo, media_store: MediaStore) -> None:
    """A DB error on the last insert (task runs) rolls back the whole turn."""
    from core.errors import StoreUnavailable

    await repo.save_turn(turn(CHANNEL, "before", "ok"))
    before = {m: await count(repo.db, m) for m in (Conversation, Message, ResourceRow, TaskRun)}

    def explode(conn, cursor, statement, parameters, context, executemany):  # type: ignore[no-untyped-def]
        if statement.lstrip().upper().startswith("INSERT INTO TASK_RUNS"):
            raise sa.exc.OperationalError(statement, parameters, Exception("disk I/O error"))

    r = await stored(media_store, "a.png", b"a")
    g = await stored(media_store, "b.png", b"b", source="generated", task_id=0)
    new_key = ConversationKey("slack", "T1", "C1", "1712.5")
    sa.event.listen(repo.db.engine.sync_engine, "before_cursor_execute", explode)
    try:
        for key in (CHANNEL, new_key):
            with pytest.raises(StoreUnavailable, match="save the turn") as info:
                await repo.save_turn(
                    turn(key, "private words", "a", uploads=(r,), files=(g,), tasks=(task(0),))
                )
            assert "disk I/O error" in str(info.value)
            assert "private words" not in str(info.value)  # no SQL parameters in messages
    finally:
        sa.event.remove(repo.db.engine.sync_engine, "before_cursor_execute", explode)
    after = {m: await count(repo.db, m) for m in (Conversation, Message, ResourceRow, TaskRun)}
    assert after == before
    assert [t.text for t in (await repo.load_history(CHANNEL)).turns] == ["before", "ok"]
