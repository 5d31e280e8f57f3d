"""Usage per user and server, and per-server settings, through the real
Agent on the loopback fakes: the numbers ``/usage`` shows equal what the
fakes counted; an admin's settings change what the agent does."""

from __future__ import annotations

import json
from typing import Any

from adapters.chat.messages import reply_text
from core.errors import InputRejected
from core.types import ConversationKey, Request, TaskStatus
from tests.fakes.agent_fixture import AgentEnv, model_a, model_b
from tests.fakes.openai_fake import stage_of
from tests.said import raises_saying

GUILD = ConversationKey("discord", "guild-1", "chan-1", None)
OTHER_CHANNEL = ConversationKey("discord", "guild-1", "chan-2", None)
OTHER_GUILD = ConversationKey("discord", "guild-2", "chan-1", None)


def plan(*tasks: dict[str, Any]) -> str:
    return json.dumps(list(tasks))


def step(id: int, task: str, **args: str) -> dict[str, Any]:
    return {"task": task, "id": id, "dep": [-1], "args": args}


async def test_usage_equals_what_the_fakes_counted(agent_env: AgentEnv) -> None:
    env = agent_env
    env.llm.reply("plan", plan(step(0, "text-classification", text="I love foxes")))
    first = await env.agent.handle(Request(GUILD, "u1", "rate my sentence"))
    env.llm.reply("plan", "[]")
    second = await env.agent.handle(Request(OTHER_CHANNEL, "u1", "hello"))
    env.llm.reply("plan", "[]")
    theirs = await env.agent.handle(Request(GUILD, "u2", "hi"))
    env.llm.reply("plan", "[]")
    await env.agent.handle(Request(OTHER_GUILD, "u1", "elsewhere"))
    assert not first.error and not second.error and not theirs.error
    assert first.tasks[0].status is TaskStatus.DONE

    mine = await env.agent.usage(GUILD, "u1")
    assert mine.scope == "you"
    assert mine.turns == 2  # both of u1's turns on guild-1, not guild-2's
    assert mine.total.llm_calls == first.usage.llm_calls + second.usage.llm_calls
    assert mine.total.prompt_tokens == first.usage.prompt_tokens + second.usage.prompt_tokens
    assert mine.total.model_calls == len(env.hf.calls_for(model_a("text-classification"))) == 1
    assert mine.total.cost_usd is None  # no provider prices its calls
    labels = {line.label for line in mine.lines}
    assert any(model_a("text-classification") in label for label in labels)

    server = await env.agent.usage(GUILD, "admin", server_wide=True, is_admin=True)
    assert server.scope == "server"
    assert server.turns == 3
    guild_calls = first.usage.llm_calls + second.usage.llm_calls + theirs.usage.llm_calls
    assert server.total.llm_calls == guild_calls
    # every LLM request the fake saw is counted somewhere (4 turns, 2 servers)
    everything = guild_calls + (await env.agent.usage(OTHER_GUILD, "u1")).total.llm_calls
    assert everything == len(env.llm.calls())


async def test_server_usage_is_for_admins_and_periods_are_checked(agent_env: AgentEnv) -> None:
    with raises_saying(InputRejected, "admins"):
        await agent_env.agent.usage(GUILD, "u1", server_wide=True)
    with raises_saying(InputRejected, "not a period"):
        await agent_env.agent.usage(GUILD, "u1", since="last tuesday")
    empty = await agent_env.agent.usage(GUILD, "u1", since="7d")
    assert empty.turns == 0 and empty.total.llm_calls == 0


async def test_only_admins_configure_and_bad_values_are_refused(agent_env: AgentEnv) -> None:
    agent = agent_env.agent
    with raises_saying(InputRejected, "admins"):
        await agent.configure(GUILD, "language", "French", user_id="u1", is_admin=False)
    with raises_saying(InputRejected, "nonsense"):
        await agent.configure(GUILD, "allowed_tasks", "nonsense", user_id="a", is_admin=True)
    dm = ConversationKey("discord", "dm", "chan-9", None)
    with raises_saying(InputRejected, "per server"):
        await agent.configure(dm, "language", "French", user_id="a", is_admin=True)
    assert await agent.settings(GUILD) == {}


async def test_allowed_tasks_change_what_the_planner_is_offered(agent_env: AgentEnv) -> None:
    env = agent_env
    shown = await env.agent.configure(
        GUILD, "allowed_tasks", "text-to-image, summarization", user_id="a", is_admin=True
    )
    assert shown == {"allowed_tasks": "summarization, text-to-image"}  # stored sorted
    assert await env.agent.settings(GUILD) == shown

    env.llm.reply("plan", "[]")
    await env.agent.handle(Request(GUILD, "u1", "draw a fox"))
    system = next(
        m["content"] for m in env.llm.calls("plan")[-1]["messages"] if m["role"] == "system"
    )
    assert "text-to-image" in system and "summarization" in system
    assert "image-classification" not in system

    # another server keeps every task
    env.llm.reply("plan", "[]")
    await env.agent.handle(Request(OTHER_GUILD, "u1", "draw a fox"))
    other = next(
        m["content"] for m in env.llm.calls("plan")[-1]["messages"] if m["role"] == "system"
    )
    assert "image-classification" in other

    # a plan using a task the server does not allow is refused (and asked again)
    env.llm.reply(
        "plan",
        plan(step(0, "text-classification", text="I love foxes")),
        plan(step(0, "text-to-image", text="a fox")),
    )
    reply = await env.agent.handle(Request(GUILD, "u1", "draw a fox"))
    assert [t.task for t in reply.tasks] == ["text-to-image"]
    assert [stage_of(b) for b in env.llm.calls()].count("plan") >= 4

    after = await env.agent.configure(GUILD, "allowed_tasks", None, user_id="a", is_admin=True)
    assert after == {}


async def test_server_quota_overrides_the_deployment(agent_env: AgentEnv) -> None:
    env = agent_env
    await env.agent.configure(GUILD, "requests_per_user_per_day", "1", user_id="a", is_admin=True)
    env.llm.reply("plan", "[]", "[]")
    assert not (await env.agent.handle(Request(GUILD, "u1", "hi"))).error
    refused = await env.agent.handle(Request(GUILD, "u1", "hi again"))
    assert refused.error and "1 request" in reply_text(refused)
    # the deployment's limit (none) still applies elsewhere
    assert not (await env.agent.handle(Request(OTHER_GUILD, "u1", "hi"))).error


async def test_pinned_model_selection_mode_llm_model_and_language(agent_env: AgentEnv) -> None:
    env = agent_env
    env.llm.models.append("server-model")
    for key, value in (
        ("pinned_model.text-classification", model_b("text-classification")),
        ("model_selection", "downloads"),
        ("llm_model", "server-model"),
        ("language", "French"),
    ):
        await env.agent.configure(GUILD, key, value, user_id="a", is_admin=True)

    env.llm.reply(
        "plan",
        plan(
            step(0, "text-classification", text="I love foxes"), step(1, "summarization", text="x")
        ),
    )
    before = len(env.llm.calls())
    reply = await env.agent.handle(Request(GUILD, "u1", "rate and sum up my sentence"))
    assert not reply.error, reply_text(reply)
    used = {t.task: t.model for t in reply.tasks}
    # the pinned model, although -a is more downloaded; the rest by downloads
    assert used == {
        "text-classification": model_b("text-classification"),
        "summarization": model_a("summarization"),
    }
    sent = env.llm.calls()[before:]
    assert [stage_of(b) for b in sent] == ["plan", "answer"]  # downloads: no selection call
    assert {b["model"] for b in sent} == {"server-model"}
    answer_system = next(m["content"] for m in sent[-1]["messages"] if m["role"] == "system")
    assert "French" in answer_system

    # another server: the deployment's model, LLM selection, no language line
    env.llm.reply("plan", plan(step(0, "text-classification", text="I love foxes")))
    before = len(env.llm.calls())
    other = await env.agent.handle(Request(OTHER_GUILD, "u1", "rate my sentence"))
    sent = env.llm.calls()[before:]
    assert {b["model"] for b in sent} == {"fake-model"}
    assert "French" not in next(m["content"] for m in sent[-1]["messages"] if m["role"] == "system")
    assert other.tasks[0].model in (
        model_a("text-classification"),
        model_b("text-classification"),
    )
