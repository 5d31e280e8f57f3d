"""A request's parallelism is the width of its graph, through the real
hosted client (huggingface_hub on the HF fake): a wide plan's six calls are
all in flight at once, even with one process-wide slot (that limit is for
local inference).  Each call is held until all six have arrived, so the
count is read, never timed."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

from core.types import ConversationKey, Request, TaskStatus
from tests.fakes.agent_fixture import model_a, open_agent_env
from tests.fakes.hf_fake import FakeHF, HFCall, default_response
from tests.fakes.openai_fake import FakeLLM

WIDE = (
    ("text-classification", "I loved this film"),
    ("token-classification", "Sarah moved to London"),
    ("summarization", "The council met on Tuesday and agreed to extend the cycling lanes."),
    ("translation", "good morning"),
    ("text-to-image", "a red bicycle"),
    ("text-to-speech", "welcome home"),
)


class Barrier:
    """Every call waits until ``n`` are in flight (or a bound passes, so a
    broken run fails on the count instead of hanging)."""

    def __init__(self, n: int) -> None:
        self.n = n
        self.in_flight = 0
        self.peak = 0
        self.all_in = asyncio.Event()

    def serve(self, task: str) -> Any:
        async def answer(call: HFCall) -> Any:
            self.in_flight += 1
            self.peak = max(self.peak, self.in_flight)
            if self.in_flight >= self.n:
                self.all_in.set()
            try:
                async with asyncio.timeout(5):
                    await self.all_in.wait()
            except TimeoutError:
                pass
            finally:
                self.in_flight -= 1
            return default_response(task, call)

        return answer


async def test_a_wide_plan_runs_its_six_hosted_calls_at_once(
    tmp_path: Path, llm_fake: FakeLLM, hf_fake: FakeHF
) -> None:
    async with open_agent_env(tmp_path, llm_fake, hf_fake, max_concurrent_tasks=1) as env:
        barrier = Barrier(len(WIDE))
        for task, _ in WIDE:
            hf_fake.serve(model_a(task), task, barrier.serve(task))
        steps = [
            {"task": task, "id": i, "dep": [-1], "args": {"text": text}}
            for i, (task, text) in enumerate(WIDE)
        ]
        llm_fake.reply("plan", json.dumps(steps))
        key = ConversationKey("cli", "local", "wide", None)
        reply = await env.agent.handle(Request(key, "u1", "six things at once"))
    assert not reply.error, reply.text
    assert [t.status for t in reply.tasks] == [TaskStatus.DONE] * len(WIDE)
    assert barrier.all_in.is_set() and barrier.peak == len(WIDE)
