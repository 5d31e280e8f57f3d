"""Quotas seen from Discord: a server admin (Manage Server) is exempt, /plan
is counted, and a refusal says which quota and until when."""

from __future__ import annotations

from core.ratelimit import QuotaLimiter, Quotas
from core.store.quotas import QuotaStore
from tests.adapters.discord.conftest import Harness

MANAGE_GUILD = 1 << 5
MINUTE_START = 60_000_000.0


def one_request_a_minute(h: Harness) -> None:
    agent = h.env.agent
    store: QuotaStore = agent.limiter.store
    agent.limiter = QuotaLimiter(store, Quotas(user_per_minute=1), clock=lambda: MINUTE_START + 20)


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
