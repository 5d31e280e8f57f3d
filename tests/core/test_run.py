"""``Agent.run``: one request as a typed event stream, with the real agent on
the fakes.  The run counts as in flight until its block ends (drain waits for
the posting too); leaving early stops the request; what ends a request
abnormally (another process took its job) reaches the reader."""

from __future__ import annotations

import asyncio
import json
from datetime import datetime
from typing import Any

import pytest

from core.errors import LeaseLost
from core.types import (
    ConversationKey,
    Finished,
    ReplyStatus,
    Request,
    TasksChanged,
    TaskStatus,
)
from tests.fakes.agent_fixture import AgentEnv, model_a
from tests.fakes.hf_fake import HFCall

KEY = ConversationKey("cli", "local", "run", None)


def draw() -> str:
    return json.dumps([{"task": "text-to-image", "id": 0, "dep": [-1], "args": {"text": "x"}}])


async def test_the_run_is_in_flight_until_its_block_ends(agent_env: AgentEnv) -> None:
    agent = agent_env.agent
    async with agent.run(Request(KEY, "u1", "hello")) as run:
        with pytest.raises(RuntimeError, match="has not finished"):
            _ = run.reply
        events = [e async for e in run]
        assert isinstance(events[-1], Finished) and run.reply.status is ReplyStatus.ANSWERED
        # answered, but the adapter is still posting: a shutdown waits for it
        assert not await agent.drain(0.01)
    assert await agent.drain(0.01)


async def test_leaving_early_stops_the_request(agent_env: AgentEnv) -> None:
    env = agent_env
    started = asyncio.Event()

    async def hang(call: HFCall) -> Any:
        started.set()
        await asyncio.Event().wait()

    env.hf.serve(model_a("text-to-image"), "text-to-image", hang)
    env.llm.reply("plan", draw())
    async with env.agent.run(Request(KEY, "u1", "draw")) as run:
        async for event in run:
            running = isinstance(event, TasksChanged) and any(
                t.status is TaskStatus.RUNNING for t in event.tasks
            )
            if running:
                await started.wait()
                break  # the person went away
    assert await env.agent.drain(5)  # nothing is left running
    assert env.llm.calls("answer") == []


class LostJob:
    """A job another process took over: saving its checkpoint says so."""

    status_ref: dict[str, Any] | None = None
    checkpoint: dict[str, Any] | None = None
    id, kind, request_id, payload, owner = 1, "test", "r1", {}, "me"
    resumed = inputs_stored = False

    def now(self) -> datetime:
        return datetime.now()

    async def set_status_ref(self, ref: dict[str, Any]) -> None:
        return None

    async def save_checkpoint(self, data: dict[str, Any]) -> None:
        raise LeaseLost


async def test_a_lost_job_reaches_the_reader_and_nothing_is_answered(
    agent_env: AgentEnv,
) -> None:
    seen = []
    with pytest.raises(LeaseLost):
        async with agent_env.agent.run(Request(KEY, "u1", "hello"), job=LostJob()) as run:
            async for event in run:
                seen.append(event)
    assert not any(isinstance(e, Finished) for e in seen)
    assert agent_env.llm.calls("answer") == []
    assert await agent_env.agent.drain(0.01)
