"""Uploaded audio and video are decoded (and their length capped) before they
are stored, as images are: through the real Agent on the fakes and SQLite."""

from __future__ import annotations

import asyncio
import io
from typing import Any

import numpy as np
import pytest
import soundfile as sf

from adapters.chat.messages import reply_text
from core.errors import ErrorCode, StoreUnavailable
from core.types import Attachment, ConversationKey, Request
from tests.fakes.agent_fixture import AgentEnv
from tests.fakes.samples import sample_mp4, sample_png, sample_wav

KEY = ConversationKey("cli", "local", "uploads", None)


def long_flac(seconds: float) -> bytes:
    buf = io.BytesIO()
    sf.write(buf, np.zeros(int(8000 * seconds), np.float32), 8000, format="FLAC")
    return buf.getvalue()


def stored_files(env: AgentEnv) -> list[str]:
    return sorted(p.name for p in env.settings.store.media_dir.rglob("*") if p.is_file())


@pytest.mark.parametrize(
    ("upload", "message"),
    [
        (
            Attachment("voice.wav", "audio/wav", sample_wav()[:12] + bytes(400)),
            "voice.wav could not be read as WAV: the file is damaged or truncated",
        ),
        (
            Attachment("clip.mp4", "video/mp4", sample_mp4()[: len(sample_mp4()) // 2]),
            "clip.mp4 could not be read as MP4: the file is damaged or truncated",
        ),
        (
            Attachment("lecture.flac", "audio/flac", long_flac(601)),
            "lecture.flac is longer than 10 min; audio of up to 10 min is accepted, "
            "send a shorter clip",
        ),
    ],
    ids=["corrupt-wav", "corrupt-mp4", "over-long-audio"],
)
async def test_bad_audio_and_video_uploads_are_refused_and_nothing_is_stored(
    agent_env: AgentEnv, upload: Attachment, message: str
) -> None:
    env = agent_env
    good = Attachment("photo.png", "image/png", sample_png())  # checked first, still not kept
    reply = await env.agent.handle(Request(KEY, "u1", "transcribe this", (good, upload)))
    assert reply.error
    assert reply_text(reply) == message
    assert reply.files == ()
    assert env.llm.requests == []  # refused before any LLM call
    assert env.hf.calls == []
    assert stored_files(env) == []
    history = await env.agent.repo.load_history(KEY)
    assert history.resources == {}


async def test_good_audio_and_video_uploads_are_stored(agent_env: AgentEnv) -> None:
    env = agent_env
    env.llm.reply("plan", "[]")
    env.llm.reply("answer", "Got them.")
    files = (
        Attachment("voice.wav", "audio/wav", sample_wav()),
        Attachment("clip.mp4", "video/mp4", sample_mp4()),
    )
    reply = await env.agent.handle(Request(KEY, "u1", "keep these", files))
    assert not reply.error, reply_text(reply)
    history = await env.agent.repo.load_history(KEY)
    assert {h: r.kind for h, r in history.resources.items()} == {
        "voice.wav": "audio",
        "clip.mp4": "video",
    }
    assert len(stored_files(env)) == 2


async def test_uploads_are_checked_and_stored_while_the_history_loads(
    agent_env: AgentEnv, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The files are decoded and written beside the history's query, not after it:
    the history load here returns only once a file is being written."""
    env = agent_env
    env.llm.reply("plan", "[]")
    env.llm.reply("answer", "Got it.")
    writing = asyncio.Event()
    put, load_history = env.agent.media.put, env.agent.repo.load_history

    async def put_seen(data: bytes, ext: str) -> tuple[str, str]:
        writing.set()
        return await put(data, ext)

    async def history_after_put(*args: Any, **kwargs: Any) -> Any:
        await asyncio.wait_for(writing.wait(), 30)  # sequential: never set, TimeoutError
        return await load_history(*args, **kwargs)

    monkeypatch.setattr(env.agent.media, "put", put_seen)
    monkeypatch.setattr(env.agent.repo, "load_history", history_after_put)
    photo = Attachment("photo.png", "image/png", sample_png())
    reply = await env.agent.handle(Request(KEY, "u1", "keep this", (photo,)))
    assert not reply.error, reply_text(reply)
    assert [r.handle for r in (await load_history(KEY)).resources.values()] == ["photo.png"]


async def test_a_history_that_cannot_load_fails_the_turn_once_its_files_are_settled(
    agent_env: AgentEnv, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The store going away during the history load is the turn's error, even
    with a bad file being checked beside it; no LLM call is made."""
    env = agent_env

    async def down(*_args: Any, **_kwargs: Any) -> Any:
        raise StoreUnavailable("the database went away")

    monkeypatch.setattr(env.agent.repo, "load_history", down)
    bad = Attachment("voice.wav", "audio/wav", sample_wav()[:12] + bytes(400))
    reply = await env.agent.handle(Request(KEY, "u1", "transcribe this", (bad,)))
    assert reply.error
    assert reply.error_code == ErrorCode.STORE_DOWN  # not the file's refusal
    assert env.llm.requests == []
