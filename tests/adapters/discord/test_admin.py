"""``/usage`` and ``/config`` end to end: what the fakes counted is what the
person is shown, only admins (Manage Server, or a role in
``DISCORD_ADMIN_ROLES``) see the server's usage and change its settings, and
a setting changes what the bot does."""

from __future__ import annotations

import re

from adapters.discord.admin import NOT_ADMIN
from tests.adapters.discord.conftest import Harness, config, running_bot
from tests.adapters.discord.helpers import plan, step
from tests.fakes.agent_fixture import AgentEnv, model_a
from tests.fakes.discord_fake import FakeDiscord

EPHEMERAL = 64
MANAGE_GUILD = 1 << 5
ADMIN_ROLE = 730000000000000001


async def ask(h: Harness, user: dict[str, object] | None = None) -> None:
    h.env.llm.reply("plan", plan(step(0, "text-to-image", text="a fox")))
    await h.interact(h.fake.interaction("ask", {"prompt": "draw a fox"}, user=user))


async def private(h: Harness, payload: dict[str, object]) -> str:
    """The one private answer to ``payload`` (deferred or at once)."""
    fake = h.fake
    await h.interact(payload)
    [cb] = fake.callbacks(str(payload["id"]))
    if cb.json["type"] == 4:
        assert cb.json["data"]["flags"] == EPHEMERAL
        return str(cb.json["data"]["content"])
    assert cb.json == {"type": 5, "data": {"flags": EPHEMERAL}}
    shown = fake.followups(str(payload["token"]))
    assert shown and all(m.flags & EPHEMERAL for m in shown)
    return "\n".join(m.content or "" for m in shown)


async def test_usage_shows_what_the_fakes_counted_for_the_caller(harness: Harness) -> None:
    h, fake = harness, harness.fake
    await ask(h)
    llm_calls, model_calls = len(h.env.llm.calls()), len(h.env.hf.calls)
    await ask(h, user=fake.user(fake.next_id(), "bob"))  # not alice's

    text = await private(h, fake.interaction("usage"))
    assert text.startswith("🧮 **Your usage on this server** — 1 request")
    assert f"• {model_a('text-to-image')}" in text
    total = re.search(r"\*\*Total\*\*: (\d+) language-model calls? .* (\d+) model calls? ", text)
    assert total and (int(total[1]), int(total[2])) == (llm_calls, model_calls)
    assert "💲 cost: not published by the provider for any call." in text

    since = await private(h, fake.interaction("usage", {"since": "7d"}))
    assert re.match(r"🧮 \*\*Your usage on this server since \d{4}-\d\d-\d\d", since)
    bad = await private(h, fake.interaction("usage", {"since": "last tuesday"}))
    assert bad.startswith("❌ ")


async def test_only_admins_see_the_whole_servers_usage(
    discord_fake: FakeDiscord, agent_env: AgentEnv
) -> None:
    fake = discord_fake
    async with running_bot(agent_env.agent, config(admin_roles=frozenset({ADMIN_ROLE}))) as bot:
        h = Harness(fake, bot, agent_env)
        await ask(h)
        await ask(h, user=fake.user(fake.next_id(), "bob"))

        member = await private(h, fake.interaction("usage", {"server": True}))
        assert member == "❌ Only the server's admins can see the whole server's usage."
        for who in ({"permissions": MANAGE_GUILD}, {"roles": [ADMIN_ROLE]}):
            carol = fake.user(fake.next_id(), "carol")
            text = await private(h, fake.interaction("usage", {"server": True}, user=carol, **who))
            assert text.startswith("🧮 **This server's usage** — 2 requests")


async def test_config_is_shown_to_anyone_and_changed_by_admins_only(harness: Harness) -> None:
    h, fake = harness, harness.fake

    def cmd(sub: str, **options: object) -> dict[str, object]:
        return fake.interaction("config", options, subcommand=sub, **who)

    who: dict[str, object] = {}
    assert await private(h, cmd("set", key="language", value="French")) == f"❌ {NOT_ADMIN}"
    assert "Nothing is set here" in await private(h, cmd("show"))

    who = {"permissions": MANAGE_GUILD}
    changed = await private(h, cmd("set", key="language", value="French"))
    assert changed.startswith("⚙️ **Changed language**") and "`language` = French" in changed
    refused = await private(h, cmd("set", key="model_selection", value="by coin toss"))
    assert refused.startswith("❌ ") and "model_selection" in refused

    who = {}
    assert "`language` = French" in await private(h, cmd("show"))
    assert await private(h, cmd("unset", key="language")) == f"❌ {NOT_ADMIN}"
    who = {"permissions": MANAGE_GUILD}
    unset = await private(h, cmd("unset", key="language"))
    assert "Nothing is set here" in unset


async def test_a_setting_changed_with_config_changes_what_the_bot_does(harness: Harness) -> None:
    h, fake = harness, harness.fake
    only = {"key": "allowed_tasks", "value": "image-classification"}
    admin = fake.interaction("config", only, subcommand="set", permissions=MANAGE_GUILD)
    assert "`allowed_tasks` = image-classification" in await private(h, admin)
    h.env.llm.reply("plan", plan(step(0, "text-to-image", text="a fox")))  # twice: re-asked
    h.env.llm.reply("plan", plan(step(0, "text-to-image", text="a fox")))
    p = await h.interact(fake.interaction("ask", {"prompt": "draw a fox"}))
    assert (fake.edits(p["token"])[-1].content or "").startswith("❌ ")  # not offered here
    assert h.env.hf.calls == []
