"""Values PostgreSQL refuses (and SQLite takes) are normalised, the same way on
both backends; a value the database still refuses is a StoreRejected with a
clear log line, never "unavailable", and the turn is saved anyway."""

from __future__ import annotations

import dataclasses
import logging
import math
import socket

import pytest
import sqlalchemy as sa

from core.errors import StoreRejected, StoreUnavailable
from core.store import Database, MediaStore, Repo
from core.store.db import refused_value
from core.store.models import Conversation, Message, ProcessedEvent, TaskRun
from core.store.repo import fit, fit_handle
from core.types import ConversationKey
from tests.core.store.builders import CHANNEL, stored, task, turn

NUL = "\x00"


async def rows(db: Database, model: type) -> list:  # type: ignore[type-arg]
    async with db.sessions() as s:
        return list((await s.scalars(sa.select(model).order_by(model.id))).all())  # type: ignore[attr-defined]


async def refuse(db: Database, name: str, table: str, condition: str) -> None:
    """Make the database itself refuse rows of ``table`` where ``condition``
    holds (``{row}`` stands for the new row): a CHECK constraint on
    PostgreSQL, a trigger on SQLite — as an operator's constraint or a
    database encoding would."""
    async with db.engine.begin() as conn:
        if db.dialect == "sqlite":
            await conn.exec_driver_sql(
                f"CREATE TRIGGER {name} BEFORE INSERT ON {table} "
                f"WHEN {condition.format(row='NEW.')} "
                "BEGIN SELECT RAISE(ABORT, 'refused by the test'); END"
            )
        else:
            await conn.exec_driver_sql(
                f"ALTER TABLE {table} ADD CONSTRAINT {name} "
                f"CHECK (NOT ({condition.format(row='')})) NOT VALID"
            )


# --- normalisation ---------------------------------------------------------


async def test_nul_in_message_answer_task_and_file_name(
    repo: Repo, media_store: MediaStore
) -> None:
    photo = await stored(media_store, f"pho{NUL}to.png", b"png")
    gen = await stored(media_store, f"out{NUL}.png", b"gen", source="generated", task_id=0)
    record = dataclasses.replace(
        task(0, files=(gen.handle,)),
        args={"text": f"a{NUL} cat", f"k{NUL}ey": "v"},
        result={"label": f"c{NUL}at", "nested": [{f"x{NUL}": f"y{NUL}"}]},
        error=f"bad{NUL}ly",
        model=f"org/mo{NUL}del",
    )
    saved = await repo.save_turn(
        turn(
            CHANNEL,
            f"what{NUL}is this",
            f"a{NUL} cat",
            user=f"u{NUL}1",
            uploads=(photo,),
            files=(gen,),
            tasks=(record,),
        )
    )
    assert [r.handle for r in saved] == ["photo.png", "out.png"]

    history = await repo.load_history(CHANNEL)
    assert [(t.text, t.user_id) for t in history.turns] == [("whatis this", "u1"), ("a cat", None)]
    assert set(history.resources) == {"photo.png", "out.png"}
    assert await repo.read(history.resources["photo.png"]) == b"png"
    [run] = await rows(repo.db, TaskRun)
    assert run.args == {"text": "a cat", "key": "v"}
    assert run.result == {"label": "cat", "nested": [{"x": "y"}], "files": ["out.png"]}
    assert (run.error, run.model) == ("badly", "org/model")
    # The same user (NUL and all) can still forget their turn.
    assert await repo.forget(CHANNEL, user_id=f"u{NUL}1") == 2


async def test_task_id_beyond_32_and_64_bits(repo: Repo, media_store: MediaStore) -> None:
    big, huge = 2**40, 2**70
    gen = await stored(media_store, "image.png", b"gen", source="generated", task_id=big)
    tasks = (task(big, files=("image.png",)), task(huge, "text-to-speech"), task(3))
    await repo.save_turn(turn(CHANNEL, "draw", "done", files=(gen,), tasks=tasks))

    history = await repo.load_history(CHANNEL)
    assert history.resources["image.png"].task_id is None  # no INTEGER for it
    runs = await rows(repo.db, TaskRun)
    assert [(r.task_index, (r.result or {}).get("task_id")) for r in runs] == [
        (-1, big),
        (-1, huge),
        (3, None),
    ]
    assert runs[0].result["files"] == ["image.png"]  # the file's origin is still known


async def test_300_character_conversation_name(repo: Repo, media_store: MediaStore) -> None:
    name = "n" * 300
    key = ConversationKey("cli", "local", name)
    thread = ConversationKey("slack", "T" * 300, name, "1712.5" * 60)
    upload = await stored(media_store, "photo.png", b"png")
    for k in (key, thread):
        await repo.save_turn(turn(k, "hello", "hi", uploads=(upload,)))

    # The same long name finds its conversation again, every time.
    for k in (key, thread):
        history = await repo.load_history(ConversationKey(k.platform, k.scope, k.channel, k.thread))
        assert [t.text for t in history.turns] == ["hello", "hi"]
        assert await repo.taken_handles(k) >= {"photo.png"}
    # The thread sees its (long-named) channel's files.
    parent = thread.parent()
    assert parent is not None
    chart = await stored(media_store, "chart.png", b"chart")
    await repo.save_turn(turn(parent, "channel", "ok", uploads=(chart,)))
    assert {"photo.png", "chart.png"} <= set((await repo.load_history(thread)).resources)

    # Another long name with the same first 255 characters is another conversation.
    other = ConversationKey("cli", "local", name + "x")
    assert (await repo.load_history(other)).turns == []

    stored_keys = await rows(repo.db, Conversation)
    assert len(stored_keys) == 3
    for c in stored_keys:
        assert max(len(c.scope), len(c.channel), len(c.thread)) <= 255
    assert stored_keys[0].channel == fit(name, 255) and stored_keys[0].channel.startswith("n" * 200)

    assert await repo.forget(key) == 2
    assert (await repo.load_history(key)).turns == []


async def test_long_user_handle_model_and_event_id(repo: Repo, media_store: MediaStore) -> None:
    user = "U" * 300
    long_name = "p" * 300 + ".png"
    upload = await stored(media_store, long_name, b"png")
    record = dataclasses.replace(task(0), model="org/" + "m" * 300, task="t" * 100)
    [saved] = await repo.save_turn(
        turn(CHANNEL, "q", "a", user=user, uploads=(upload,), tasks=(record,))
    )
    assert saved.handle == fit_handle(long_name, 255)
    assert len(saved.handle) == 255 and saved.handle.endswith(".png")
    assert saved.handle in (await repo.load_history(CHANNEL)).resources
    [run] = await rows(repo.db, TaskRun)
    assert len(run.model) == 255 and len(run.task) == 64

    # The same long user id still names the same user.
    assert (await repo.load_history(CHANNEL)).turns[0].user_id == fit(user, 255)
    assert await repo.forget(CHANNEL, user_id=user) == 2

    event = "E" * 300
    assert await repo.claim_event("slack" * 10, event) is True
    assert await repo.claim_event("slack" * 10, event) is False
    assert len(await rows_events(repo.db)) == 1


async def rows_events(db: Database) -> list[ProcessedEvent]:
    async with db.sessions() as s:
        return list((await s.scalars(sa.select(ProcessedEvent))).all())


async def test_lone_surrogates_nan_and_naive_datetimes(repo: Repo) -> None:
    naive = dataclasses.replace(
        task(0),
        started=task(0).started.replace(tzinfo=None),  # type: ignore[union-attr]
        result={"score": math.nan, "up": math.inf, "bad": "\ud800", 1: "one", None: "n"},
        args={"text": "\ud83d\ude00 \udfff"},
    )
    await repo.save_turn(turn(CHANNEL, "a \ud800 b", "ok \udc80", tasks=(naive,)))
    history = await repo.load_history(CHANNEL)
    assert [t.text for t in history.turns] == ["a \ufffd b", "ok \ufffd"]
    [run] = await rows(repo.db, TaskRun)
    assert run.result == {"score": None, "up": None, "bad": "\ufffd", "1": "one", "null": "n"}
    assert run.args == {"text": "😀 \ufffd"}  # a pair written as two halves is joined
    assert run.started is not None and run.started.tzinfo is not None


# --- classification --------------------------------------------------------


async def test_refused_values_are_told_apart_from_an_outage(database: Database) -> None:
    """The real drivers' errors for a refused value count as refused; a
    database that is not there does not."""
    scratch = sa.Table(
        "scratch",
        sa.MetaData(),
        sa.Column("text", sa.Text),
        sa.Column("short", sa.String(5)),
        sa.Column("small", sa.Integer),
        sa.Column("big", sa.BigInteger),
        sa.Column("doc", sa.JSON),
    )
    async with database.engine.begin() as conn:
        await conn.run_sync(scratch.metadata.create_all)
    bad_values = [
        {"text": f"a{NUL}b"},  # PostgreSQL: invalid byte sequence 0x00
        {"short": "x" * 6},  # PostgreSQL: too long for varchar(5)
        {"small": 2**40},  # PostgreSQL (asyncpg): out of int32 range
        # (NaN in a JSON column is written as null: tests/core/store/test_json_columns.py)
        {"text": "\ud800"},  # no UTF-8 for it (both drivers)
        {"big": 2**70},  # beyond 64 bits (both drivers)
    ]
    refused = 0
    for values in bad_values:
        try:
            async with database.engine.begin() as conn:
                await conn.execute(sa.insert(scratch).values(**values))
        except Exception as exc:  # what the driver raised, unchanged
            assert refused_value(exc), exc
            refused += 1
    assert refused == (5 if database.dialect == "postgresql" else 2)

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    dead = Database(f"postgresql+asyncpg://postgres@127.0.0.1:{port}/test", connect_timeout=2)
    try:
        with pytest.raises(Exception) as info:
            async with dead.engine.connect() as conn:
                await conn.execute(sa.text("SELECT 1"))
        assert not refused_value(info.value)
    finally:
        await dead.aclose()


async def test_a_refused_text_is_saved_in_ascii(
    repo: Repo, media_store: MediaStore, caplog: pytest.LogCaptureFixture
) -> None:
    """As a database without the character (LATIN1, SQL_ASCII) would."""
    await refuse(repo.db, "no_cafe", "messages", "{row}text LIKE '%é%'")
    caplog.set_level(logging.INFO, logger="core.store.repo")
    await repo.save_turn(turn(CHANNEL, "un café ☕", "voilà", tasks=(task(0),)))
    history = await repo.load_history(CHANNEL)
    # Only the refused part is changed.
    assert [t.text for t in history.turns] == ["un caf\\xe9 \\u2615", "voilà"]
    assert len(await rows(repo.db, TaskRun)) == 1
    logged = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert logged and "refused the user of the turn" in logged[0].getMessage()
    assert all("unavailable" not in r.getMessage() for r in caplog.records)


async def test_a_refused_value_never_loses_the_turn(
    repo: Repo, media_store: MediaStore, caplog: pytest.LogCaptureFixture
) -> None:
    await refuse(repo.db, "no_secret", "messages", "{row}text LIKE '%forbidden%'")
    await refuse(repo.db, "no_runs", "task_runs", "{row}args IS NOT NULL")
    caplog.set_level(logging.INFO, logger="core.store.repo")
    photo = await stored(media_store, "photo.png", b"png")
    gen = await stored(media_store, "out.png", b"gen", source="generated", task_id=0)
    saved = await repo.save_turn(
        turn(
            CHANNEL,
            "the forbidden word",
            "here it is",
            uploads=(photo,),
            files=(gen,),
            tasks=(task(0, files=("out.png",)),),
        )
    )
    assert [r.handle for r in saved] == ["photo.png", "out.png"]

    history = await repo.load_history(CHANNEL)
    assert [t.text for t in history.turns] == [
        "[not stored: the database refused this text (18 characters)]",
        "here it is",
    ]
    assert set(history.resources) == {"photo.png", "out.png"}
    assert await rows(repo.db, TaskRun) == []  # the one part that could not be kept
    errors = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
    assert any("refused the user of the turn" in m for m in errors)
    assert any("refused the tasks of the turn" in m and "left out" in m for m in errors)
    assert all("forbidden" not in m for m in errors)  # no user text in the log


async def test_a_turn_refused_whole_is_rejected_not_unavailable(
    repo: Repo, caplog: pytest.LogCaptureFixture
) -> None:
    await refuse(repo.db, "no_messages", "messages", "{row}role = 'user'")
    await refuse(repo.db, "no_events", "processed_events", "{row}source = 'slack'")
    with pytest.raises(StoreRejected) as info:
        await repo.save_turn(turn(CHANNEL, "q", "a"))
    assert not isinstance(info.value, StoreUnavailable)
    assert "refused" in str(info.value) and "unavailable" not in str(info.value)
    assert await rows(repo.db, Message) == []
    assert any("not saved" in r.getMessage() for r in caplog.records)
    with pytest.raises(StoreRejected, match="record the event"):
        await repo.claim_event("slack", "E1")
    assert await repo.claim_event("discord", "E1") is True


def test_fit_is_deterministic_and_bounded() -> None:
    long = "é" * 300
    assert fit(long, 255) == fit(long, 255) and len(fit(long, 255)) == 255
    assert fit(long, 255) != fit(long + "x", 255)
    assert fit("short", 255) == "short" and fit(f"a{NUL}b", 5) == "ab"
    assert len(fit("x" * 40, 16)) == 16
    assert fit_handle("a" * 300 + ".wav", 64).endswith(".wav")
    assert len(fit_handle("a" * 300 + ".wav", 64)) == 64
