"""Uploaded audio and video are decoded (and their length capped) before they
are stored, as images are: through the real Agent on the fakes and SQLite."""

from __future__ import annotations

import io

import numpy as np
import pytest
import soundfile as sf

from adapters.chat.messages import reply_text
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
