"""Durable Discord requests: the process dies mid-request, the next one (a
new agent and client on the same store) resumes the job and answers it where
it was asked: through the interaction's webhook while its token lives, with
a channel message to the person once it has expired, in reply to the
person's message for a mention.  Leases expire on a fake clock."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tests.adapters.discord.conftest import running_bot, settle
from tests.adapters.discord.helpers import plan, step
from tests.fakes.agent_fixture import AgentEnv, model_a, open_agent_env
from tests.fakes.discord_fake import APP_ID, BOT_ID, CHANNEL_ID, USER_ID, FakeDiscord
from tests.fakes.hf_fake import HFCall
from tests.fakes.job_fixtures import FakeClock, task_checkpointed

FOX = plan(
    step(0, "text-to-image", text="a fox"),
    step(1, "image-classification", [0], image="<resource>-0"),
)


async def hang(call: HFCall) -> Any:
    await asyncio.Event().wait()


async def until(predicate: Callable[[], Any], within: float = 20.0) -> None:
    async with asyncio.timeout(within):
        while True:
            if predicate():
                return
            await asyncio.sleep(0.02)


async def die_mid_request(env: AgentEnv, fake: FakeDiscord, deliver: Callable[[Any], None]) -> None:
    """Start a request on ``env``'s agent, kill it while task 1 runs."""
    env.llm.reply("plan", FOX)
    env.llm.reply("answer", "A fox, classified.")
    env.hf.serve(model_a("image-classification"), "image-classification", hang)
    async with running_bot(env.agent) as bot:
        deliver(bot)
        await until(lambda: env.hf.calls_for(model_a("image-classification")))
        await task_checkpointed(env.agent, 0)  # the drawing is saved with the job
        await env.agent.jobs.abandon()  # killed: no lease released, nothing posted
        await settle()


async def test_an_ask_is_resumed_through_its_token_with_the_status_saying_so(
    discord_fake: FakeDiscord, agent_env: AgentEnv, tmp_path: Path
) -> None:
    fake, env = discord_fake, agent_env
    p = fake.interaction("ask", {"prompt": "draw a fox and say what it is"})
    await die_mid_request(env, fake, lambda bot: bot._connection.parse_interaction_create(p))
    assert fake.followups(p["token"]) == []

    clock = FakeClock()
    clock.advance(env.agent.config.job_lease_seconds + 1)  # the lease ran out; the token lives
    async with open_agent_env(tmp_path, env.llm, env.hf) as restarted:
        restarted.agent.jobs.clock = clock
        async with running_bot(restarted.agent):
            await fake.wait_for("POST", rf"^/webhooks/{APP_ID}/{p['token']}$", within=20)
            await until(lambda: (fake.edits(p["token"])[-1].content or "").startswith("✅"))
    edits = [c.content or "" for c in fake.edits(p["token"])]
    assert any("Resuming" in e for e in edits)
    [answer] = fake.followups(p["token"])
    assert answer.content == "A fox, classified."
    assert [f.filename for f in answer.files] == ["image.png"]
    assert len(env.hf.calls_for(model_a("text-to-image"))) == 1  # not run again
    assert len(env.hf.calls_for(model_a("image-classification"))) == 2


async def test_an_ask_whose_token_expired_is_answered_in_the_channel_to_the_person(
    discord_fake: FakeDiscord, agent_env: AgentEnv, tmp_path: Path
) -> None:
    fake, env = discord_fake, agent_env
    p = fake.interaction("ask", {"prompt": "draw a fox and say what it is"})
    await die_mid_request(env, fake, lambda bot: bot._connection.parse_interaction_create(p))
    status = fake.original(p["token"])  # the interaction's "thinking…", now its status

    clock = FakeClock()
    clock.advance(16 * 60)  # back after the interaction's 15 minutes
    async with open_agent_env(tmp_path, env.llm, env.hf) as restarted:
        restarted.agent.jobs.clock = clock
        async with running_bot(restarted.agent):
            [answer] = await fake.wait_for("POST", rf"^/channels/{CHANNEL_ID}/messages$")
            await until(
                lambda: (fake.messages[status]["content"] or "").startswith("✅"),
            )
    # the status message is the interaction's own, edited through the channel
    edits = [c.content or "" for c in fake.find("PATCH", rf"^/channels/{CHANNEL_ID}/messages/")]
    assert all(c.path.endswith(f"/{status}") for c in fake.find("PATCH", "^/channels/"))
    assert any(e.startswith("🔄 **Resuming") for e in edits)
    # the answer replies to it and mentions the person (only them)
    assert answer.content == f"<@{USER_ID}> A fox, classified."
    assert answer.json["message_reference"]["message_id"] == int(status)
    assert answer.json["allowed_mentions"]["users"] == [USER_ID]
    assert [f.filename for f in answer.files] == ["image.png"]
    assert fake.followups(p["token"]) == []  # nothing sent on the dead token
    assert len(env.hf.calls_for(model_a("text-to-image"))) == 1


async def test_a_mention_is_resumed_in_reply_to_the_persons_message(
    discord_fake: FakeDiscord, agent_env: AgentEnv, tmp_path: Path
) -> None:
    fake, env = discord_fake, agent_env
    m = fake.message(f"<@{BOT_ID}> draw a fox and say what it is")
    await die_mid_request(env, fake, lambda bot: bot._connection.parse_message_create(m))
    before = len(fake.find("POST", rf"^/channels/{CHANNEL_ID}/messages$"))  # the status

    clock = FakeClock()
    clock.advance(env.agent.config.job_lease_seconds + 1)
    async with open_agent_env(tmp_path, env.llm, env.hf) as restarted:
        restarted.agent.jobs.clock = clock
        async with running_bot(restarted.agent):
            posts = await fake.wait_for(
                "POST", rf"^/channels/{CHANNEL_ID}/messages$", count=before + 1
            )
            await until(
                lambda: any(
                    (c.content or "").startswith("✅")
                    for c in fake.find("PATCH", rf"^/channels/{CHANNEL_ID}/messages/\d+$")
                )
            )
    answer = posts[before]
    assert answer.content == "A fox, classified."
    assert answer.json["message_reference"]["message_id"] == int(m["id"])
    # the status message the dead process posted is the one edited on resume
    status_id = fake.find("PATCH", rf"^/channels/{CHANNEL_ID}/messages/\d+$")[-1].path
    edits = [c.content or "" for c in fake.find("PATCH", rf"^/channels/{CHANNEL_ID}/messages/\d+$")]
    assert any("Resuming" in e for e in edits)
    assert all(
        c.path == status_id for c in fake.find("PATCH", rf"^/channels/{CHANNEL_ID}/messages/\d+$")
    )
    assert len(env.hf.calls_for(model_a("text-to-image"))) == 1
