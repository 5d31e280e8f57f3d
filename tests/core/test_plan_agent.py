"""The agent plans through core.planner: a repair that changes the plan's
meaning reaches the reply (and the person), and nothing a model names is
opened."""

from __future__ import annotations

import json

from core.types import Attachment, ConversationKey, PlanChange, PlanNote, Request
from tests.fakes.agent_fixture import AgentEnv, model_a
from tests.fakes.samples import sample_png

KEY = ConversationKey("cli", "local", "plan-agent")


async def test_a_file_the_conversation_lacks_is_replaced_and_said(agent_env: AgentEnv) -> None:
    env = agent_env
    answer = [{"task": "image-classification", "id": 0, "dep": [-1],
               "args": {"image": "/etc/passwd"}}]  # fmt: skip
    env.llm.reply("plan", json.dumps(answer))
    photo = Attachment("photo.png", "image/png", sample_png())
    reply = await env.agent.handle(Request(KEY, "u1", "what is in my photo?", (photo,)))
    assert not reply.error, reply.text
    assert len(env.llm.calls("plan")) == 1  # repaired, not asked again
    assert reply.plan_notes == (PlanNote(PlanChange.FILE, 0, "/etc/passwd", "photo.png", "image"),)
    assert reply.tasks[0].args == {"image": "photo.png"}
    assert env.hf.calls_for(model_a("image-classification"))[0].body == sample_png()


async def test_a_plan_needing_no_repair_says_nothing(agent_env: AgentEnv) -> None:
    env = agent_env
    answer = [{"task": "translation", "id": 0, "dep": [-1], "args": {"text": "hi"}}]
    env.llm.reply("plan", json.dumps(answer))
    reply = await env.agent.handle(Request(KEY, "u1", "translate hi to French"))
    assert not reply.error, reply.text
    assert reply.plan_notes == ()
