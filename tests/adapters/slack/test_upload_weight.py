"""A Slack request's job carries the sizes Slack declared for its files
(admission weighs it by them), recorded before the ack."""

from __future__ import annotations

import asyncio
import json

import sqlalchemy as sa

from core.store.jobs import DONE
from core.store.models import StoredJob
from tests.adapters.slack.conftest import SlackBot
from tests.fakes.agent_fixture import AgentEnv
from tests.fakes.samples import sample_png
from tests.fakes.slack_fake import event_body, mention_event


async def answered_weights(env: AgentEnv, count: int) -> list[int]:
    """The declared upload bytes of the jobs, once ``count`` are answered."""
    query = sa.select(StoredJob.state, StoredJob.upload_bytes).order_by(StoredJob.id)
    async with asyncio.timeout(20):
        while True:
            async with env.agent.repo.db.sessions() as s:
                rows = (await s.execute(query)).all()
            if len(rows) == count and all(r.state == DONE for r in rows):
                return [r.upload_bytes for r in rows]
            await asyncio.sleep(0.02)


async def test_a_mention_with_files_is_weighed_by_their_declared_sizes(
    slack_bot: SlackBot, agent_env: AgentEnv
) -> None:
    fake = slack_bot.fake
    plan = [{"task": "image-classification", "id": 0, "dep": [-1], "args": {"image": "a.png"}}]
    agent_env.llm.reply("plan", json.dumps(plan))
    files = [
        fake.add_file("a.png", sample_png()),
        fake.add_file("b.png", sample_png(), size=1_000),  # the size Slack declares counts
    ]
    await slack_bot.deliver(event_body(mention_event("what are these?", files=files)))
    await slack_bot.agent.wait_claims(1)
    await slack_bot.deliver(event_body(mention_event("hello", ts="1700000000.000777")))
    await slack_bot.agent.wait_claims(2)
    assert await answered_weights(agent_env, 2) == [len(sample_png()) + 1_000, 0]
