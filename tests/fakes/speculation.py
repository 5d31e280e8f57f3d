"""Forcing the order of speculative selection with events, never timing:
a model on the HF fake that notes its calls and answers when released
(:class:`Seen`), a selection answer the fake LLM sends only after an event
(:func:`choice_after`), and the event of the agent having its models in
force (:func:`choice_known`)."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from core.execution import Assignment
from tests.fakes.agent_fixture import AgentEnv
from tests.fakes.hf_fake import HFCall, default_response


class Seen:
    """A model on the HF fake that notes each call (an event a test can wait
    on) and, given ``hold``, answers only once it is set."""

    def __init__(self, task: str, answer: Any = None, hold: asyncio.Event | None = None) -> None:
        self.task = task
        self.answer = answer
        self.hold = hold
        self.calls: list[HFCall] = []
        self.arrived = asyncio.Event()

    async def __call__(self, call: HFCall) -> Any:
        self.calls.append(call)
        self.arrived.set()
        if self.hold is not None:
            async with asyncio.timeout(10):  # a bound for a broken run, not a timing
                await self.hold.wait()
        return self.answer if self.answer is not None else default_response(self.task, call)


def choice_after(event: asyncio.Event, picks: dict[str, str], seen: list[bool]) -> Any:
    """A selection answer the fake LLM sends only once ``event`` is set
    (``seen`` records whether it was, rather than hanging a broken run)."""

    async def answer(body: dict[str, Any]) -> str:
        try:
            async with asyncio.timeout(10):
                await event.wait()
            seen.append(True)
        except TimeoutError:
            seen.append(False)
        return json.dumps({k: {"id": v, "reason": f"{v} fits best"} for k, v in picks.items()})

    return answer


def choice_known(env: AgentEnv, monkeypatch: pytest.MonkeyPatch) -> asyncio.Event:
    """Set once the executor has the models in force (the choice arrived, or
    was cancelled), right after the agent recorded them."""
    known = asyncio.Event()
    executor = env.agent.executor
    run = executor.run

    async def spied(*args: Any, **kw: Any) -> Any:
        on_chosen = kw.get("on_chosen")

        async def spy(final: Assignment) -> None:
            if on_chosen is not None:
                await on_chosen(final)
            known.set()

        return await run(*args, **{**kw, "on_chosen": spy})

    monkeypatch.setattr(executor, "run", spied)
    return known
