"""Quotas seen from Discord: a server admin (Manage Server, or a member of a
``DISCORD_ADMIN_ROLES`` role) is exempt on /ask and in mentions alike, /plan
is counted, and a refusal says which quota and until when."""

from __future__ import annotations

from core.ratelimit import QuotaLimiter, Quotas
from core.store.quotas import QuotaStore
from tests.adapters.discord.conftest import Harness, config, running_bot
from tests.fakes.agent_fixture import AgentEnv
from tests.fakes.clock import FakeClock
from tests.fakes.discord_fake import BOT_ID, CHANNEL_ID, FakeDiscord

MANAGE_GUILD = 1 << 5
MINUTE_START = 60_000_000.0
ADMIN_ROLE = 730000000000000001
REFUSED = "❌ You have used your 1 request this minute; try again in 40 s."


def one_request_a_minute(h: Harness) -> None:
    agent = h.env.agent
    store: QuotaStore = agent.limiter.store
    clock = FakeClock(MINUTE_START + 20)
    agent.limiter = QuotaLimiter(store, Quotas(user_per_minute=1), clock=clock)


async def test_plan_is_counted_and_the_refusal_is_shown(harness: Harness) -> None:
    h, fake = harness, harness.fake
    one_request_a_minute(h)
    first = await h.interact(fake.interaction("plan", {"prompt": "hi"}))
    assert "❌" not in (fake.edits(first["token"])[-1].content or "")
    second = await h.interact(fake.interaction("ask", {"prompt": "hi"}))
    assert fake.followups(second["token"]) == []  # the status says it
    assert fake.edits(second["token"])[-1].content == (
        "❌ You have used your 1 request this minute; try again in 40 s."
    )
    third = await h.interact(fake.interaction("plan", {"prompt": "hi"}))
    assert fake.edits(third["token"])[-1].content == (
        "❌ You have used your 1 request this minute; try again in 40 s."
    )
    assert len(h.env.llm.calls("plan")) == 1


async def test_server_admins_are_exempt(harness: Harness) -> None:
    h, fake = harness, harness.fake
    one_request_a_minute(h)
    for _ in range(3):
        p = await h.interact(fake.interaction("plan", {"prompt": "hi"}, permissions=MANAGE_GUILD))
        assert "❌" not in (fake.edits(p["token"])[-1].content or "")
    assert len(h.env.llm.calls("plan")) == 3


async def test_members_of_an_admin_role_are_exempt_in_mentions_too(
    discord_fake: FakeDiscord, agent_env: AgentEnv
) -> None:
    fake = discord_fake
    async with running_bot(agent_env.agent, config(admin_roles=frozenset({ADMIN_ROLE}))) as bot:
        h = Harness(fake, bot, agent_env)
        one_request_a_minute(h)

        def shown() -> list[str]:
            said = fake.find("POST", rf"^/channels/{CHANNEL_ID}/messages$")
            edited = fake.find("PATCH", rf"^/channels/{CHANNEL_ID}/messages/\d+$")
            return [c.content or "" for c in said + edited]

        for _ in range(3):
            await h.post(fake.message(f"<@{BOT_ID}> hi", roles=[ADMIN_ROLE]))
        assert len(h.env.llm.calls("plan")) == 3
        assert not any("❌" in text for text in shown())

        bob = fake.user(fake.next_id(), "bob")  # no admin role: held to the quota
        for _ in range(2):
            await h.post(fake.message(f"<@{BOT_ID}> hi", author=bob, roles=[fake.next_id()]))
        assert len(h.env.llm.calls("plan")) == 4
        assert REFUSED in shown()
