"""A Discord job whose process died while it was posting the answer is
resumed by the next process, which posts only what had not reached Discord
yet: no message or file of an answer is posted twice (as on Slack,
``tests/adapters/slack/test_resume_posting.py``).

Two real agents on one SQLite store, each with a real ``discord.py`` client
on the Discord fake; the first one "dies" (its jobs abandoned, as a killed
process's would be) while the fake holds one of its calls, after the first
of the answer's two messages was accepted; the second one's clock is past
the lease.  The answer is two messages (its text is longer than Discord's
2000 characters), the picture on the second."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Callable
from pathlib import Path

import pytest

from adapters.discord.buttons import b36
from core.store.jobs import DONE, JobRow
from tests.adapters.discord.conftest import running_bot, settle
from tests.adapters.discord.helpers import plan, step
from tests.fakes.agent_fixture import AgentEnv, model_a, open_agent_env
from tests.fakes.discord_fake import APP_ID, BOT_ID, CHANNEL_ID, DiscordCall, FakeDiscord
from tests.fakes.job_fixtures import FakeClock
from tests.fakes.samples import sample_png

FIRST = " ".join(["First part."] * 120)
SECOND = " ".join(["Second part."] * 120)
ANSWER = f"{FIRST}\n\n{SECOND}"  # 2 messages: FIRST, then SECOND with the picture
CHANNEL_POSTS = rf"^/channels/{CHANNEL_ID}/messages$"


def done_status(call: DiscordCall) -> bool:
    return (call.content or "").startswith("✅")


def with_files(call: DiscordCall) -> bool:
    return bool(call.files)


async def stored_job(env: AgentEnv) -> JobRow:
    """The test's one job (the first in its fresh store)."""
    return (await env.agent.jobs.store.get([1]))[1]


async def until_stored(env: AgentEnv, done: Callable[[JobRow], bool], within: float = 20.0) -> None:
    async with asyncio.timeout(within):
        while True:
            if done(await stored_job(env)):
                return
            await asyncio.sleep(0.02)  # another task's store writes: poll


@pytest.mark.parametrize(
    ("via", "held"),
    [
        # both messages are out; the status never got its ✅
        ("ask", "status"),
        # the first message is out, the second (with the picture) not yet
        ("ask", "second"),
        ("mention", "status"),
        ("mention", "second"),
    ],
)
async def test_a_job_killed_while_posting_is_not_answered_twice(
    discord_fake: FakeDiscord, agent_env: AgentEnv, tmp_path: Path, via: str, held: str
) -> None:
    fake, env = discord_fake, agent_env
    env.llm.reply("plan", plan(step(0, "text-to-image", text="a fox")))
    env.llm.reply("answer", ANSWER)
    if via == "ask":
        p = fake.interaction("ask", {"prompt": "draw a fox"})
        posts = rf"^/webhooks/{APP_ID}/{re.escape(p['token'])}$"
        edits = rf"^/webhooks/{APP_ID}/{re.escape(p['token'])}/messages/@original$"
    else:
        p = fake.message(f"<@{BOT_ID}> draw a fox")
        posts = CHANNEL_POSTS
        edits = rf"^/channels/{CHANNEL_ID}/messages/\d+$"

    def answers() -> list[DiscordCall]:
        return [c for c in fake.find("POST", posts) if c.content in (FIRST, SECOND)]

    if held == "status":
        released = fake.hold("PATCH", edits, done_status)
    else:
        released = fake.hold("POST", posts, with_files)
    async with running_bot(env.agent) as bot:
        if via == "ask":
            bot._connection.parse_interaction_create(p)  # type: ignore[arg-type]
        else:
            bot._connection.parse_message_create(p)  # type: ignore[arg-type]
        await fake.wait_until(lambda: bool(fake.held))  # the answer is (partly) out: stuck
        await env.agent.jobs.abandon()  # killed while a call is in the air
        await settle()
    released.set()  # the held call's caller is gone: it never got through

    clock = FakeClock()
    clock.advance(env.agent.config.job_lease_seconds + 1)  # the lease ran out
    async with open_agent_env(tmp_path, env.llm, env.hf) as restarted:
        restarted.agent.jobs.clock = clock
        async with running_bot(restarted.agent):
            await fake.wait_until(lambda: any(done_status(c) for c in fake.find("PATCH", edits)))
            await until_stored(restarted, lambda job: job.state == DONE)

    first, second = answers()  # each message once, in order
    assert (first.content, second.content) == (FIRST, SECOND)
    assert first.files == []
    [picture] = second.files  # the file once too
    assert (picture.filename, picture.data) == ("image.png", sample_png())
    assert len(env.hf.calls_for(model_a("text-to-image"))) == 1  # not drawn again
    # the buttons are on the last message, and Delete takes the first one with it
    [row] = fake.messages[str(second.message_id)]["components"]
    [delete] = [c["custom_id"] for c in row["components"] if "delete" in c["custom_id"]]
    assert b36(int(str(first.message_id))) in delete.rsplit(":", 1)[1].split(".")
    if via == "mention":  # the answer replies to the person's message, the rest follows
        assert isinstance(first.json, dict) and isinstance(second.json, dict)
        assert first.json["message_reference"]["message_id"] == int(p["id"])
        assert "message_reference" not in second.json
