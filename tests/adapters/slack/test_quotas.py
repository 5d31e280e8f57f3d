"""Quotas and slow language models seen from Slack: the admin allow-list
exempts its users, a refusal ends the status message with the reason, and a
slow LLM shows "still waiting" in the status message."""

from __future__ import annotations

from dataclasses import replace

from core.ratelimit import QuotaLimiter, Quotas
from tests.adapters.slack.conftest import BotFactory
from tests.adapters.slack.test_events import finished
from tests.fakes.agent_fixture import AgentEnv
from tests.fakes.clock import FakeClock
from tests.fakes.slack_fake import event_body, mention_event

REFUSED = "You have used your 1 request this minute; try again in 40 s."


async def test_admin_allow_list_is_exempt_and_others_are_told_the_quota(
    make_slack_bot: BotFactory, agent_env: AgentEnv
) -> None:
    agent = agent_env.agent
    agent.limiter = QuotaLimiter(
        agent.limiter.store, Quotas(user_per_minute=1), clock=FakeClock(60_000_020.0)
    )
    bot = await make_slack_bot(agent, admin_users=frozenset({"UADMIN"}))
    finals = []
    for user in ("UADMIN", "UADMIN", "UPLAIN", "UPLAIN"):
        event = mention_event("hello", user=user)
        assert (await bot.deliver(event_body(event))).status == 200
        finals.append((await finished(bot.fake, "C0CHAN", event["ts"]))[1])
    assert [r.is_admin for r in bot.agent.requests] == [True, True, False, False]
    assert [f[0] for f in finals] == ["✅", "✅", "✅", "❌"]
    assert finals[-1] == f"❌ {REFUSED}"  # the status says which quota and until when
    assert len(agent_env.llm.calls("plan")) == 3


async def test_a_slow_llm_shows_still_waiting_in_the_status(
    make_slack_bot: BotFactory, agent_env: AgentEnv
) -> None:
    agent = agent_env.agent
    agent.config = replace(agent.config, llm_wait_notice=0.2)
    agent_env.llm.delay = 0.7
    bot = await make_slack_bot(agent)
    event = mention_event("hello")
    await bot.deliver(event_body(event))
    _, final = await finished(bot.fake, "C0CHAN", event["ts"])
    assert final.startswith("✅")
    edits = [str(c.args["text"]) for c in bot.fake.calls_to("chat.update")]
    assert any("Still waiting for the language model (" in e for e in edits), edits
