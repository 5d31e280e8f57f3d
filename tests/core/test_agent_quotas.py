"""Quotas kept in the store, through the real Agent: per user and per server,
requests per minute and per day, LLM tokens per day; they hold across a
restart and are shared by replicas; admins are exempt; /plan is counted."""

from __future__ import annotations

import asyncio
from pathlib import Path

from adapters.chat.messages import error_text, reply_text
from core.agent import Agent
from core.config import AgentConfig
from core.ratelimit import DAY, QuotaLimiter, Quotas
from core.store import Database, Repo
from core.types import ConversationKey, Request
from tests.fakes.agent_fixture import AgentEnv, open_agent_env
from tests.fakes.clock import FakeClock
from tests.fakes.db_fixtures import open_database
from tests.fakes.hf_fake import FakeHF
from tests.fakes.openai_fake import FakeLLM

DAY_START = 19_700 * DAY  # a UTC midnight
NOON = DAY_START + 12 * 3600 + 20  # 12:00:20 UTC: 40 s left in the minute
DISCORD = ConversationKey("discord", "guild-1", "chan-1", None)


def limit(agent: Agent, clock: FakeClock, quotas: Quotas | None = None) -> QuotaLimiter:
    """The agent's limiter on its own store, with ``clock`` (and ``quotas``
    instead of the configured ones)."""
    old = agent.limiter
    agent.limiter = QuotaLimiter(old.store, quotas or old.quotas, clock=clock)
    return agent.limiter


def ask(user: str, key: ConversationKey = DISCORD, *, admin: bool = False) -> Request:
    return Request(key, user, "hi", is_admin=admin)


async def test_user_minute_quota_survives_a_restart(
    tmp_path: Path, llm_fake: FakeLLM, hf_fake: FakeHF
) -> None:
    clock = FakeClock(NOON)
    async with open_agent_env(tmp_path, llm_fake, hf_fake, requests_per_user_per_minute=2) as env:
        limit(env.agent, clock)
        assert not (await env.agent.handle(ask("u1"))).error
        assert not (await env.agent.handle(ask("u1"))).error
    # a new process on the same SQLite database
    async with open_agent_env(tmp_path, llm_fake, hf_fake, requests_per_user_per_minute=2) as env:
        limit(env.agent, clock)
        third = await env.agent.handle(ask("u1"))
        assert third.error
        assert reply_text(third) == "You have used your 2 requests this minute; try again in 40 s."
        clock.advance(40)  # the next minute
        assert not (await env.agent.handle(ask("u1"))).error
    assert len(llm_fake.calls("plan")) == 3  # the refused request cost no LLM call


async def test_two_agents_on_one_database_share_the_quotas(
    db_url: str, agent_env: AgentEnv
) -> None:
    """Two replicas (each with its own engine) on one database, racing."""
    env = agent_env
    # Noon, standing still: the agents' own waits (selection delay, "still
    # waiting" notices) are real, so they do not move the quota windows on.
    clock = FakeClock(NOON, real_monotonic=True)
    config = AgentConfig(requests_per_user_per_minute=0, requests_per_server_per_minute=3)
    async for first in open_database(db_url):
        second = Database(db_url, schema=first.schema)
        try:
            replicas = [
                Agent(
                    llm=env.agent.llm,
                    catalog=env.agent.catalog,
                    router=env.agent.router,
                    repo=Repo(db, env.agent.media),
                    media=env.agent.media,
                    config=config,
                    clock=clock,  # their quota windows on it
                )
                for db in (first, second)
            ]
            channels = [ConversationKey("discord", "guild-1", f"chan-{i}") for i in range(6)]
            replies = await asyncio.gather(
                *(replicas[i % 2].handle(ask(f"user-{i}", channels[i])) for i in range(6))
            )
        finally:
            await second.aclose()
    refused = [reply_text(r) for r in replies if r.error]
    assert refused == ["This server has used its 3 requests this minute; try again in 40 s."] * 3
    assert len(env.llm.calls("plan")) == 3


async def test_daily_llm_token_budgets_per_user_and_server(agent_env: AgentEnv) -> None:
    env = agent_env
    clock = FakeClock(NOON)
    limiter = limit(
        env.agent, clock, Quotas(user_tokens_per_day=100, server_tokens_per_day=1_000_000)
    )
    first = await env.agent.handle(ask("u1"))
    assert not first.error
    spent = first.usage.prompt_tokens + first.usage.completion_tokens
    assert spent > 100  # started under the budget, ended over it
    assert await limiter.store.used("user:discord:u1", "day", DAY_START) == (1, spent)
    assert await limiter.store.used("server:discord:guild-1", "day", DAY_START) == (1, spent)

    second = await env.agent.handle(ask("u1"))
    assert second.error
    assert reply_text(second) == (
        "You have used your daily budget of 100 LLM tokens; it resets at 00:00 UTC (in 12 h 0 min)."
    )
    assert not (await env.agent.handle(ask("u2"))).error  # another user of the server

    limit(env.agent, clock, Quotas(user_tokens_per_day=100, server_tokens_per_day=spent))
    third = await env.agent.handle(ask("u3"))
    assert third.error
    assert reply_text(third) == (
        f"This server has used its daily budget of {spent:,} LLM tokens; it resets at "
        "00:00 UTC (in 12 h 0 min)."
    )
    clock.advance(DAY)  # the next UTC day
    assert not (await env.agent.handle(ask("u1"))).error
    assert len(env.llm.calls("plan")) == 3


async def test_requests_per_day_and_the_workspace_wording(agent_env: AgentEnv) -> None:
    env = agent_env
    clock = FakeClock(NOON)
    limit(env.agent, clock, Quotas(user_per_day=2, server_per_minute=3))
    assert not (await env.agent.handle(ask("u1"))).error
    assert not (await env.agent.handle(ask("u1"))).error
    refused = await env.agent.handle(ask("u1"))
    assert reply_text(refused) == (
        "You have used your 2 requests for today; they reset at 00:00 UTC (in 12 h 0 min)."
    )
    slack = ConversationKey("slack", "T1", "C1", None)
    for user in ("U1", "U2", "U3"):
        assert not (await env.agent.handle(ask(user, slack))).error
    over = await env.agent.handle(ask("U4", slack))
    assert (
        reply_text(over) == "This workspace has used its 3 requests this minute; try again in 40 s."
    )


async def test_admins_are_exempt_and_not_counted(agent_env: AgentEnv) -> None:
    env = agent_env
    limit(env.agent, FakeClock(NOON), Quotas(user_per_minute=1, server_per_minute=1))
    for _ in range(3):
        assert not (await env.agent.handle(ask("admin", admin=True))).error
    assert not (await env.agent.handle(ask("u1"))).error  # the admin used none of it
    refused = await env.agent.handle(ask("u2"))
    assert (
        reply_text(refused) == "This server has used its 1 request this minute; try again in 40 s."
    )


async def test_discord_dms_have_no_server_quota(agent_env: AgentEnv) -> None:
    env = agent_env
    limit(env.agent, FakeClock(NOON), Quotas(server_per_minute=1))
    for user in ("u1", "u2"):
        dm = ConversationKey("discord", "dm", f"dm-{user}", None)
        assert not (await env.agent.handle(ask(user, dm))).error


async def test_plan_previews_are_counted(agent_env: AgentEnv) -> None:
    env = agent_env
    limiter = limit(
        env.agent, FakeClock(NOON), Quotas(user_per_minute=2, user_tokens_per_day=10**9)
    )
    preview = await env.agent.plan_only(ask("u1"))
    assert not preview.error, error_text(preview.failure)
    spent = preview.usage.prompt_tokens + preview.usage.completion_tokens
    assert spent > 0
    assert await limiter.store.used("user:discord:u1", "day", DAY_START) == (1, spent)
    assert not (await env.agent.handle(ask("u1"))).error
    refused = await env.agent.plan_only(ask("u1"))
    assert refused.error and refused.steps == ()
    assert (
        error_text(refused.failure)
        == "You have used your 2 requests this minute; try again in 40 s."
    )
    assert (await env.agent.handle(ask("u1"))).error
    assert len(env.llm.calls("plan")) == 2
