"""Requests that take long: one that outlives the interaction's 15-minute
token (on a fake clock: the drawing "takes" 16 minutes) finishes as a channel
message replying to the person, and requests that wait show their place in
the queue in their status message."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from tests.adapters.discord.conftest import Harness, running_bot, settle
from tests.adapters.discord.helpers import plan, step
from tests.adapters.discord.test_resume import until
from tests.fakes.agent_fixture import model_a, open_agent_env
from tests.fakes.discord_fake import APP_ID, CHANNEL_ID, USER_ID, FakeDiscord
from tests.fakes.hf_fake import FakeHF, HFCall
from tests.fakes.job_fixtures import FakeClock
from tests.fakes.openai_fake import FakeLLM
from tests.fakes.samples import sample_png


async def test_a_run_that_outlives_the_token_ends_in_the_channel_replying_to_the_person(
    harness: Harness,
) -> None:
    h, fake, env = harness, harness.fake, harness.env
    clock = FakeClock()
    env.agent.jobs.clock = clock

    def sixteen_minutes(call: HFCall) -> bytes:
        clock.advance(16 * 60)  # the token is past its 15 minutes when the answer is ready
        return sample_png()

    env.hf.serve(model_a("text-to-image"), "text-to-image", sixteen_minutes)
    env.llm.reply("plan", plan(step(0, "text-to-image", text="a fox")))
    env.llm.reply("answer", "Here is your fox.")
    p = await h.interact(fake.interaction("ask", {"prompt": "draw a fox"}))
    status = fake.original(p["token"])

    assert fake.edits(p["token"])  # while the token was young: through the webhook
    assert fake.followups(p["token"]) == []  # nothing sent on the old token
    [answer] = fake.find("POST", rf"^/channels/{CHANNEL_ID}/messages$")
    assert all(c.at < answer.at for c in fake.edits(p["token"]))
    assert answer.content == f"<@{USER_ID}> Here is your fox."
    assert answer.json["message_reference"]["message_id"] == int(status)  # replies to it
    assert answer.json["allowed_mentions"]["users"] == [USER_ID]  # and pings only the person
    assert [f.filename for f in answer.files] == ["image.png"]
    assert len(fake.buttons(answer.message_id or "")) == 3  # the buttons still come

    # the status message (the interaction's own) is finished through the channel
    finals = fake.find("PATCH", rf"^/channels/{CHANNEL_ID}/messages/{status}$")
    assert finals and (finals[-1].content or "").startswith("✅ **Done")
    assert fake.find("PATCH", rf"^/webhooks/{APP_ID}/.*") == fake.edits(p["token"])


async def test_waiting_requests_show_their_place_in_the_queue(
    discord_fake: FakeDiscord, llm_fake: FakeLLM, hf_fake: FakeHF, tmp_path: Path
) -> None:
    fake = discord_fake
    release = asyncio.Event()

    async def held(call: HFCall) -> bytes:
        await release.wait()
        return sample_png()

    async with open_agent_env(tmp_path, llm_fake, hf_fake, max_inflight_requests=1) as env:
        env.hf.serve(model_a("text-to-image"), "text-to-image", held)
        env.llm.reply("plan", plan(step(0, "text-to-image", text="a fox")))
        async with running_bot(env.agent) as bot:
            first = fake.interaction("ask", {"prompt": "draw a fox"})
            same = fake.interaction("ask", {"prompt": "and another"})  # the same channel
            other = fake.interaction(
                "ask", {"prompt": "hello"}, channel=fake.text_channel(fake.next_id())
            )
            bot._connection.parse_interaction_create(first)  # type: ignore[arg-type]
            await until(lambda: env.hf.calls_for(model_a("text-to-image")))
            for p in (same, other):
                bot._connection.parse_interaction_create(p)  # type: ignore[arg-type]
            await until(lambda: shown(fake, same, "🕒") and shown(fake, other, "🕒"))
            release.set()
            await settle()
    assert "🕒 **Waiting for the previous request in this conversation to finish**" in shown(
        fake, same, "🕒"
    )
    assert "🕒 **Queued: " in shown(fake, other, "🕒")
    for p in (first, same, other):
        assert (fake.edits(p["token"])[-1].content or "").startswith("✅ **Done")


def shown(fake: FakeDiscord, payload: dict[str, Any], mark: str) -> str:
    """The first status of ``payload``'s request that contains ``mark`` ("" if none)."""
    return next(
        (c.content or "" for c in fake.edits(payload["token"]) if mark in (c.content or "")), ""
    )
