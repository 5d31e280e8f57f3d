"""``usage`` and ``config`` typed to the bot, through Bolt's dispatch against
the fake Slack and the real agent (its usage rows and per-workspace
settings in the store): who may see and change what, where the answer
goes, and that a message merely starting with the word is a request."""

from __future__ import annotations

import pytest

from adapters.slack.commands import Action, parse
from core.types import ConversationKey
from tests.adapters.slack.conftest import BotFactory, SlackBot
from tests.fakes.agent_fixture import AgentEnv
from tests.fakes.slack_fake import TEAM_ID, Call, dm_event, event_body, mention_event

ADMIN = "U0ADMIN"


@pytest.fixture
async def bot(make_slack_bot: BotFactory, agent_env: AgentEnv) -> SlackBot:
    return await make_slack_bot(agent_env.agent, admin_users=frozenset({ADMIN}))


async def ask(bot: SlackBot, text: str, user: str = "U0USER", **event: str) -> Call:
    """Send ``text`` in the DM; the bot's reply (the next message it posts)."""
    before = len(bot.fake.calls_to("chat.postMessage"))
    await bot.deliver(event_body(dm_event(text, user=user, **event)))
    calls = await bot.fake.wait_for("chat.postMessage", count=before + 1)
    return calls[before]


async def a_turn(bot: SlackBot) -> None:
    await bot.deliver(event_body(dm_event("translate hello", ts="1700000300.000001")))
    await bot.fake.wait_for("chat.update", where=lambda c: str(c.args["text"]).startswith("✅"))


@pytest.mark.parametrize(
    ("text", "action"),
    [
        ("usage", Action.USAGE),
        ("usage 7d", Action.USAGE),
        ("Usage server 2w", Action.USAGE),
        ("config", Action.SHOW),
        ("config show", Action.SHOW),
        ("config set language Brazilian Portuguese", Action.SET),
        ("config unset language", Action.UNSET),
        ("config set language", Action.HELP),
    ],
)
def test_what_is_a_command(text: str, action: Action) -> None:
    command = parse(text)
    assert command is not None and command.action is action


@pytest.mark.parametrize(
    "text", ["usage of transformers in NLP?", "usage rights for photos", "config files in Linux"]
)
def test_a_message_that_only_starts_with_the_word_is_a_request(text: str) -> None:
    assert parse(text) is None


async def test_usage_shows_the_callers_own_usage(bot: SlackBot, agent_env: AgentEnv) -> None:
    await a_turn(bot)

    reply = await ask(bot, "usage")

    text = str(reply.args["text"])
    assert reply.args["channel"] == "D0DM"
    assert text.startswith("🧮 *Your usage on this server*") and "1 request" in text
    assert "fake-model (language model)" in text
    # answered at once: no job, the agent's LLM not asked
    assert [r.text for r in bot.agent.requests] == ["translate hello"]


async def test_the_workspaces_usage_is_for_admins(bot: SlackBot, agent_env: AgentEnv) -> None:
    await a_turn(bot)

    refused = await ask(bot, "usage server")
    shown = await ask(bot, "usage server 7d", user=ADMIN)
    bad = await ask(bot, "usage 7x", user=ADMIN)

    assert str(refused.args["text"]).startswith("❌ Only the server's admins")
    assert str(shown.args["text"]).startswith("🧮 *This server's usage since ")
    assert "1 request" in str(shown.args["text"])
    assert str(bad.args["text"]).startswith("❌ ")


async def test_config_is_shown_to_all_and_changed_by_admins(
    bot: SlackBot, agent_env: AgentEnv
) -> None:
    refused = await ask(bot, "config set language French")
    changed = await ask(bot, "config set language French", user=ADMIN)
    shown = await ask(bot, "config")
    unknown = await ask(bot, "config set colour blue", user=ADMIN)

    assert str(refused.args["text"]) == "❌ Only the server's admins can change its settings."
    assert "Changed language" in str(changed.args["text"])
    assert "`language` = French" in str(shown.args["text"])
    assert str(unknown.args["text"]).startswith("❌ unknown setting 'colour'")
    key = ConversationKey("slack", TEAM_ID, "D0DM")
    assert await agent_env.agent.settings(key) == {"language": "French"}

    await ask(bot, "config unset language", user=ADMIN)
    assert await agent_env.agent.settings(key) == {}


async def test_in_a_channel_the_answer_is_private(bot: SlackBot) -> None:
    event = mention_event("usage", ts="1700000300.000500")
    await bot.deliver(event_body(event))

    (reply,) = await bot.fake.wait_for("chat.postEphemeral")
    assert (reply.args["user"], reply.args["channel"], reply.args["thread_ts"]) == (
        "U0USER",
        "C0CHAN",
        event["ts"],
    )
    assert "Your usage" in str(reply.args["text"])
    assert bot.fake.calls_to("chat.postMessage") == []


async def test_a_redelivered_command_is_answered_once(bot: SlackBot) -> None:
    body = event_body(dm_event("config"), event_id="Ev0CONFIG")
    await bot.deliver(body)
    await bot.fake.wait_for("chat.postMessage")
    await bot.deliver(body, retry_num=1)
    claims = await bot.agent.wait_claims(2)

    assert claims == [("Ev0CONFIG", True), ("Ev0CONFIG", False)]
    assert len(bot.fake.calls_to("chat.postMessage")) == 1


async def test_a_request_starting_with_the_word_goes_to_the_model(
    bot: SlackBot, agent_env: AgentEnv
) -> None:
    await bot.deliver(event_body(dm_event("usage of transformers in NLP?")))
    await bot.fake.wait_for("chat.update", where=lambda c: str(c.args["text"]).startswith("✅"))
    assert [r.text for r in bot.agent.requests] == ["usage of transformers in NLP?"]
    assert agent_env.llm.calls("plan")
