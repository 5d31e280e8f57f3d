"""Slash commands end to end: the real discord.py against the fake Discord
server, the real Agent against the LLM and HF fakes.  Assertions are on what
the fake Discord server received."""

from __future__ import annotations

import io
import logging
import re
from types import TracebackType

import pytest
from PIL import Image

from adapters.discord.access import AccessPolicy
from core.types import AgentAPI, Job, PlanPreview, Request
from tests.adapters.discord.conftest import Harness, config, running_bot
from tests.adapters.discord.helpers import fence_balanced, noisy_png, plan, step
from tests.fakes.agent_fixture import AgentEnv, model_a
from tests.fakes.clock import PacingClock
from tests.fakes.discord_fake import APP_ID, GUILD_ID, FakeDiscord
from tests.fakes.prose import long_prose
from tests.fakes.samples import sample_png

EPHEMERAL = 64


async def test_ask_defers_before_the_llm_then_edits_status_and_posts_files(
    harness: Harness,
) -> None:
    h, fake = harness, harness.fake
    h.env.llm.reply("plan", plan(step(0, "text-to-image", text="a red square")))
    h.env.llm.reply("answer", "Here is your red square: image.png")
    h.env.llm.delay = 0.1  # planning stays on screen long enough to be shown
    upload = fake.attachment("photo.png", sample_png(), "image/png")
    p = await h.interact(
        fake.interaction("ask", {"prompt": "draw a red square"}, attachments={"file1": upload})
    )

    [callback] = fake.callbacks(p["id"])
    assert callback.json == {"type": 5}  # deferred, "thinking…"
    assert callback.at < h.env.llm.events[0][0]  # before any LLM call
    assert all(c.at > callback.at for c in fake.edits(p["token"]) + fake.followups(p["token"]))
    assert fake.cdn_requests == [f"{upload['id']}/photo.png"]  # the user's file was fetched
    assert "photo.png" in str(h.env.llm.calls("plan")[0]["messages"])

    edits = [c.content or "" for c in fake.edits(p["token"])]
    assert any("🧠" in e for e in edits)
    assert edits[-1].startswith("✅ **Done in")
    assert f"✅ 0. text-to-image · `{model_a('text-to-image')}`" in edits[-1]

    [answer] = fake.followups(p["token"])
    assert answer.content == "Here is your red square: image.png"
    assert answer.json["allowed_mentions"] == {"parse": []}
    [part] = answer.files
    assert (part.field, part.filename) == ("files[0]", "image.png")
    assert part.data == sample_png()  # what the HF fake generated
    assert answer.json["attachments"] == [{"id": 0, "filename": "image.png"}]


async def test_status_edits_are_at_most_once_per_interval(
    discord_fake: FakeDiscord, agent_env: AgentEnv
) -> None:
    env = agent_env
    env.llm.reply("plan", plan(*(step(i, "text-to-image", text=f"pic {i}") for i in range(3))))
    env.hf.serve(model_a("text-to-image"), "text-to-image", delay=0.1)
    clock = PacingClock()
    async with running_bot(env.agent, config(status_interval=1.0, clock=clock)) as bot:
        h = Harness(discord_fake, bot, env)
        p = await h.interact(discord_fake.interaction("ask", {"prompt": "three pictures"}))
    edits = discord_fake.edits(p["token"])
    # every edit after the first waited out the interval on the clock (time
    # moves only when the pacing sleeps): no more edits than seconds passed
    assert 2 <= len(edits) <= clock.t / 1.0 + 2, (len(edits), clock.t)
    assert clock.sleeps and all(0 < s <= 1.0 for s in clock.sleeps)
    assert (edits[-1].content or "").startswith("✅ **Done")
    assert len(discord_fake.followups(p["token"])[-1].files) == 3


async def test_long_answer_is_split_and_code_blocks_stay_whole(harness: Harness) -> None:
    h, fake = harness, harness.fake
    code = "```python\n" + "\n".join(f"x{i} = {i}" for i in range(120)) + "\n```"
    prose = "\n".join(f"Paragraph {i}: " + long_prose(240, seed=i) for i in range(12))
    h.env.llm.reply("plan", "[]")
    h.env.llm.reply("answer", f"{prose}\n{code}\nThat's all.")
    p = await h.interact(fake.interaction("ask", {"prompt": "write a lot"}))
    messages = [c.content or "" for c in fake.followups(p["token"])]
    assert len(messages) >= 3
    assert all(len(m) <= 2000 and fence_balanced(m) for m in messages)
    assert any(code in m for m in messages)
    assert messages[-1].endswith("That's all.")


def noisy_wav(seconds: float) -> bytes:
    """White noise: incompressible, so it stays large after re-encoding."""
    import wave

    import numpy as np

    rng = np.random.default_rng(0)
    pcm = (rng.uniform(-1, 1, int(16000 * seconds)) * 32767).astype("<i2").tobytes()
    buf = io.BytesIO()
    with wave.open(buf, "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(16000)
        w.writeframes(pcm)
    return buf.getvalue()


async def test_images_over_the_upload_limit_are_downscaled_others_are_named(
    harness: Harness,
) -> None:
    h, fake = harness, harness.fake
    big = noisy_png(200)  # ~120 KB
    h.env.hf.serve(model_a("text-to-image"), "text-to-image", big)
    h.env.hf.serve(model_a("text-to-speech"), "text-to-speech", noisy_wav(8.0))
    h.env.llm.reply(
        "plan",
        plan(step(0, "text-to-image", text="noise"), step(1, "text-to-speech", text="hello")),
    )
    h.env.llm.reply("answer", "Made image.png and speech.ogg.")
    limit = 12_000  # 8 s of noise stays far above this even as OGG/Opus
    p = await h.interact(fake.interaction("ask", {"prompt": "noise, say hello"}, size_limit=limit))

    [answer] = fake.followups(p["token"])
    [part] = answer.files
    assert part.filename == "image.jpg" and len(part.data) <= limit < len(big)
    assert Image.open(io.BytesIO(part.data)).format == "JPEG"
    assert "Made image.png and speech.ogg." in (answer.content or "")
    assert "`speech.ogg`" in (answer.content or "") and "too large" in (answer.content or "")


async def test_files_are_packed_within_the_limit_per_message(harness: Harness) -> None:
    h, fake = harness, harness.fake
    pictures = iter(noisy_png(40, seed) for seed in range(3))  # ~5 KB each
    h.env.hf.serve(model_a("text-to-image"), "text-to-image", lambda call: next(pictures))
    h.env.llm.reply("plan", plan(*(step(i, "text-to-image", text=f"p{i}") for i in range(3))))
    p = await h.interact(fake.interaction("ask", {"prompt": "three"}, size_limit=11_000))
    posts = fake.followups(p["token"])
    assert sum(len(c.files) for c in posts) == 3
    assert all(sum(len(f.data) for f in c.files) <= 11_000 for c in posts)
    assert len(posts) >= 2 and posts[0].content and posts[-1].content is None


async def test_thread_is_its_own_conversation_and_sees_the_parent_files(
    harness: Harness,
) -> None:
    h, fake = harness, harness.fake
    h.env.llm.reply("plan", plan(step(0, "text-to-image", text="a cat")))
    await h.interact(fake.interaction("ask", {"prompt": "draw a cat"}))  # in the channel

    thread = fake.thread(fake.next_id())
    h.env.llm.reply("plan", plan(step(0, "image-classification", image="image.png")))
    p = await h.interact(
        fake.interaction("ask", {"prompt": "what is in image.png?"}, channel=thread)
    )
    second_plan = str(h.env.llm.calls("plan")[1]["messages"])
    assert "image.png" in second_plan  # the parent's file is visible in the thread
    assert h.env.hf.calls_for(model_a("image-classification"))  # and it ran on it
    assert fake.followups(p["token"])

    # the thread's history is separate: forgetting the thread keeps the channel
    admin = await h.interact(fake.interaction("forget", channel=thread, permissions=1 << 13))
    assert "Forgot 2" in (fake.followups(admin["token"])[0].content or "")
    chan = await h.interact(fake.interaction("forget", permissions=1 << 13))
    assert "Forgot 2" in (fake.followups(chan["token"])[0].content or "")


async def test_forget_removes_own_messages_or_the_whole_channel_for_moderators(
    harness: Harness,
) -> None:
    h, fake = harness, harness.fake
    bob = fake.user(fake.next_id(), "bob")
    await h.interact(fake.interaction("ask", {"prompt": "hello"}))
    await h.interact(fake.interaction("ask", {"prompt": "hi"}, user=bob))

    mine = await h.interact(fake.interaction("forget"))
    [cb] = fake.callbacks(mine["id"])
    assert cb.json == {"type": 5, "data": {"flags": EPHEMERAL}}
    [msg] = fake.followups(mine["token"])
    assert msg.flags & EPHEMERAL and msg.content == "🧹 Forgot 2 of your messages here."

    moderator = await h.interact(fake.interaction("forget", user=bob, permissions=1 << 13))
    [msg] = fake.followups(moderator["token"])
    assert msg.content == "🧹 Forgot 2 of this conversation's messages here."


async def test_plan_shows_tasks_and_models_without_running_them(harness: Harness) -> None:
    h, fake = harness, harness.fake
    h.env.llm.reply(
        "plan",
        plan(
            step(0, "text-to-image", text="a fox"),
            step(1, "image-to-text", [0], image="<resource>-0"),
        ),
    )
    p = await h.interact(fake.interaction("plan", {"prompt": "draw a fox and describe it"}))
    assert fake.callbacks(p["id"])[0].json == {"type": 5}
    [shown] = fake.edits(p["token"])
    text = shown.content or ""
    assert "2 tasks" in text and "nothing was run" in text
    assert f"`0` **text-to-image** → `{model_a('text-to-image')}`" in text
    assert f"`1` **image-to-text** after 0 → `{model_a('image-to-text')}`" in text
    assert h.env.hf.calls == []  # planned only
    assert h.env.llm.calls("answer") == []


async def test_a_failed_request_ends_its_status_with_the_reason(
    harness: Harness, caplog: pytest.LogCaptureFixture
) -> None:
    h, fake = harness, harness.fake
    h.env.llm.fail(500, times=5)
    with caplog.at_level(logging.INFO):
        p = await h.interact(fake.interaction("ask", {"prompt": "anything"}))
    final = fake.edits(p["token"])[-1].content or ""
    assert final.startswith("❌ The language model at 127.0.0.1") and "HTTP 500" in final
    assert len(final) < 500 and fake.followups(p["token"]) == []  # nothing else is posted
    assert any("HTTP 500" in r.getMessage() for r in caplog.records if r.name.startswith("core."))


async def test_models_and_help_answer_ephemerally_at_once(harness: Harness) -> None:
    h, fake = harness, harness.fake
    p = await h.interact(fake.interaction("models", {"task": "Text-to-Image"}))
    [cb] = fake.callbacks(p["id"])
    assert cb.json["type"] == 4 and cb.json["data"]["flags"] == EPHEMERAL
    content = cb.json["data"]["content"]
    assert content.startswith("**text-to-image**") and model_a("text-to-image") in content

    p = await h.interact(fake.interaction("help"))
    assert "/ask" in fake.callbacks(p["id"])[0].json["data"]["content"]


async def test_too_large_attachment_is_refused_before_deferring(harness: Harness) -> None:
    h, fake = harness, harness.fake
    upload = fake.attachment("huge.bin", b"x", declared_size=100 * 1024 * 1024)
    p = await h.interact(fake.interaction("ask", {"prompt": "x"}, attachments={"file1": upload}))
    [cb] = fake.callbacks(p["id"])
    assert cb.json["type"] == 4 and cb.json["data"]["flags"] == EPHEMERAL
    assert "huge.bin" in cb.json["data"]["content"]
    assert fake.cdn_requests == [] and h.env.llm.calls() == []


async def test_denied_guild_gets_an_ephemeral_refusal(
    discord_fake: FakeDiscord, agent_env: AgentEnv
) -> None:
    policy = AccessPolicy(denied_guilds=frozenset({GUILD_ID}))
    async with running_bot(agent_env.agent, config(access=policy)) as bot:
        h = Harness(discord_fake, bot, agent_env)
        p = await h.interact(discord_fake.interaction("ask", {"prompt": "x"}))
    [cb] = discord_fake.callbacks(p["id"])
    assert cb.json["type"] == 4 and cb.json["data"]["flags"] == EPHEMERAL
    assert cb.json["data"]["content"] == "❌ I'm not enabled in this server."
    assert agent_env.llm.calls() == []


class _Exploding:
    async def __aenter__(self) -> None:
        raise RuntimeError("database exploded")

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        return None


class CrashingAgent:
    """The real agent, except that ``run`` breaks its promise and raises."""

    def __init__(self, agent: AgentAPI) -> None:
        self._agent = agent

    def __getattr__(self, name: str) -> object:
        return getattr(self._agent, name)

    def run(self, request: Request, *, job: Job | None = None) -> _Exploding:
        return _Exploding()


async def test_unexpected_crash_is_logged_with_trace_and_told_briefly(
    discord_fake: FakeDiscord, agent_env: AgentEnv, caplog: pytest.LogCaptureFixture
) -> None:
    async with running_bot(CrashingAgent(agent_env.agent)) as bot:  # type: ignore[arg-type]
        h = Harness(discord_fake, bot, agent_env)
        p = await h.interact(discord_fake.interaction("ask", {"prompt": "x"}))
    final = discord_fake.edits(p["token"])[-1].content or ""
    assert final.startswith("❌ Sorry, something went wrong on my side")
    assert discord_fake.followups(p["token"]) == []
    rid = re.search(r"request `(\w+)`", final)
    assert rid
    [record] = [r for r in caplog.records if r.exc_info and rid[1] in r.getMessage()]
    assert "database exploded" in str(record.exc_info[1])  # type: ignore[index]


async def test_attachment_that_fails_to_download_ends_the_status_with_the_reason(
    harness: Harness,
) -> None:
    h, fake = harness, harness.fake
    upload = fake.attachment("photo.png", sample_png(), "image/png")
    fake.cdn.clear()  # gone from the CDN
    p = await h.interact(fake.interaction("ask", {"prompt": "x"}, attachments={"file1": upload}))
    assert fake.callbacks(p["id"])[0].json == {"type": 5}
    edits = [c.content or "" for c in fake.edits(p["token"])]
    assert edits[0].startswith("⏳ **Downloading your files**")
    assert edits[-1] == "❌ photo.png could not be downloaded from Discord (HTTP 404)."
    assert fake.followups(p["token"]) == []
    assert h.env.llm.calls() == []


class CrashingPlanner(CrashingAgent):
    async def plan_only(self, request: Request) -> PlanPreview:
        raise RuntimeError("planner exploded")


async def test_command_errors_reach_the_tree_handler_and_stay_private(
    discord_fake: FakeDiscord, agent_env: AgentEnv, caplog: pytest.LogCaptureFixture
) -> None:
    async with running_bot(CrashingPlanner(agent_env.agent)) as bot:  # type: ignore[arg-type]
        h = Harness(discord_fake, bot, agent_env)
        p = await h.interact(discord_fake.interaction("plan", {"prompt": "x"}))
    assert discord_fake.find("DELETE", rf"/webhooks/{APP_ID}/{p['token']}/messages/@original$")
    [note] = discord_fake.followups(p["token"])
    assert note.flags & EPHEMERAL and "something went wrong" in (note.content or "")
    rid = re.search(r"request `(\w+)`", note.content or "")
    assert rid
    [record] = [r for r in caplog.records if r.exc_info and rid[1] in r.getMessage()]
    assert "/plan failed" in record.getMessage()
    assert "planner exploded" in str(record.exc_info[1])  # type: ignore[index]
