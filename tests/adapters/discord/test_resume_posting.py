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
import logging
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from adapters.discord.buttons import b36
from adapters.discord.posted import part_nonce
from core.store.jobs import DONE, JobRow
from tests.adapters.discord.conftest import running_bot, settle
from tests.adapters.discord.helpers import plan, step
from tests.fakes.agent_fixture import AgentEnv, model_a, open_agent_env
from tests.fakes.discord_fake import APP_ID, BOT_ID, CHANNEL_ID, DiscordCall, FakeDiscord
from tests.fakes.job_fixtures import FakeClock
from tests.fakes.prose import long_prose
from tests.fakes.samples import sample_png

FIRST = "First part. " + long_prose(1300, seed=1)
SECOND = "Second part. " + long_prose(1400, seed=2)
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


# -- Discord made the message, the process died before recording it ----------
#
# The fake makes the message and only holds its answer: the first process is
# killed without learning the message exists.  The second one does not make
# it again: a channel message is sent with the same nonce (Discord returns the
# one it made), an /ask follow-up is found in the channel by its
# interaction_metadata.


def bot_messages(fake: FakeDiscord, content: str) -> list[dict[str, Any]]:
    """The messages the channel has from the bot with ``content``."""
    return [
        m
        for m in fake.messages.values()
        if m["channel_id"] == str(CHANNEL_ID)
        and m["author"]["id"] == str(BOT_ID)
        and m["content"] == content
    ]


async def kill_after_discord_made(
    fake: FakeDiscord, env: AgentEnv, via: str, made: str
) -> tuple[dict[str, Any], str]:
    """Run a request (``via`` /ask or a mention) until Discord made its answer's
    ``made`` message (``first`` or ``second``), then kill the process before
    Discord's answer arrives; the request's payload and its posts' path."""
    env.llm.reply("plan", plan(step(0, "text-to-image", text="a fox")))
    env.llm.reply("answer", ANSWER)
    if via == "ask":
        p = fake.interaction("ask", {"prompt": "draw a fox"})
        posts = rf"^/webhooks/{APP_ID}/{re.escape(p['token'])}$"
    else:
        p = fake.message(f"<@{BOT_ID}> draw a fox")
        posts = CHANNEL_POSTS
    content = FIRST if made == "first" else SECOND
    released = fake.hold("POST", posts, lambda c: c.content == content, after=True)
    async with running_bot(env.agent) as bot:
        if via == "ask":
            bot._connection.parse_interaction_create(p)  # type: ignore[arg-type]
        else:
            bot._connection.parse_message_create(p)  # type: ignore[arg-type]
        await fake.wait_until(lambda: bool(fake.held))  # Discord has it; its answer waits
        await env.agent.jobs.abandon()  # killed before it learned of it
        await settle()
    released.set()
    return p, posts


async def resume_discord(fake: FakeDiscord, env: AgentEnv, tmp_path: Path, via: str) -> None:
    if via == "ask":
        edits = r"^/webhooks/\d+/[^/]+/messages/@original$"
    else:
        edits = rf"^/channels/{CHANNEL_ID}/messages/\d+$"
    clock = FakeClock()
    clock.advance(env.agent.config.job_lease_seconds + 1)  # the lease ran out
    async with open_agent_env(tmp_path, env.llm, env.hf) as restarted:
        restarted.agent.jobs.clock = clock
        async with running_bot(restarted.agent):
            await fake.wait_until(lambda: any(done_status(c) for c in fake.find("PATCH", edits)))
            await until_stored(restarted, lambda job: job.state == DONE)


@pytest.mark.parametrize("made", ["first", "second"])
@pytest.mark.parametrize("via", ["ask", "mention"])
async def test_a_message_discord_made_before_the_kill_is_not_made_again(
    discord_fake: FakeDiscord, agent_env: AgentEnv, tmp_path: Path, via: str, made: str
) -> None:
    fake = discord_fake
    p, posts = await kill_after_discord_made(fake, agent_env, via, made)

    await resume_discord(fake, agent_env, tmp_path, via)

    [first] = bot_messages(fake, FIRST)  # each message once in the channel
    [second] = bot_messages(fake, SECOND)
    assert first["attachments"] == []
    [picture] = second["attachments"]
    assert picture["filename"] == "image.png"
    assert int(first["id"]) < int(second["id"])
    # the buttons are on the last message, and Delete takes the first one with it
    [row] = second["components"]
    [delete] = [c["custom_id"] for c in row["components"] if "delete" in c["custom_id"]]
    assert b36(int(first["id"])) in delete.rsplit(":", 1)[1].split(".")
    held = FIRST if made == "first" else SECOND
    tries = [c for c in fake.find("POST", posts) if c.content == held]
    if via == "mention":  # sent again with the same nonce: Discord answered the first
        assert len(tries) == 2
        nonces = {c.json["nonce"] for c in tries if isinstance(c.json, dict)}
        assert len(nonces) == 1 and all(c.json["enforce_nonce"] for c in tries)  # type: ignore[index]
        assert tries[0].message_id == tries[1].message_id
        assert first["message_reference"]["message_id"] == int(p["id"])
    else:  # not sent again: the follow-up was found in the channel
        assert len(tries) == 1
        [lookup] = fake.find("GET", rf"^/channels/{CHANNEL_ID}/messages$")
        assert lookup.query["after"] == (p["id"] if made == "first" else first["id"])


async def test_without_the_channel_history_a_resumed_ask_posts_as_before(
    discord_fake: FakeDiscord,
    agent_env: AgentEnv,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    fake = discord_fake
    fake.fail("GET", rf"^/channels/{CHANNEL_ID}/messages$", 403, 50001)  # Missing Access
    await kill_after_discord_made(fake, agent_env, "ask", "first")
    with caplog.at_level(logging.WARNING, logger="adapters.discord.posted"):
        await resume_discord(fake, agent_env, tmp_path, "ask")

    assert len(bot_messages(fake, FIRST)) == 2  # not found: posted again, as before
    assert len(bot_messages(fake, SECOND)) == 1
    [warning] = [r for r in caplog.records if r.name == "adapters.discord.posted"]
    assert "Read Message History" in warning.getMessage()


def test_a_nonce_fits_discord_and_names_the_part() -> None:
    assert part_nonce("0123456789ab", 1) == "0123456789ab.1"
    long = part_nonce("r" * 40, 3)
    assert len(long) <= 25 and long != part_nonce("r" * 40, 4)
