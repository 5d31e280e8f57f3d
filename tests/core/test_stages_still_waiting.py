"""core.stages.llm_stage: the "still waiting" notices, on a fake clock."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from core.config import AgentConfig
from core.llm import LLM
from core.stages import llm_stage
from core.types import Event, Stage, StillWaiting
from tests.fakes.clock import FakeClock


class BusyClock(FakeClock):
    """A loop too busy to wake anyone on time: the first wait ends ``late``
    seconds after it should have."""

    def __init__(self, late: float) -> None:
        super().__init__()
        self.late = late

    async def sleep(self, seconds: float) -> None:
        extra, self.late = self.late, 0.0
        await super().sleep(seconds + extra)


@dataclass
class _Deps:
    llm: LLM
    config: AgentConfig
    clock: FakeClock


async def notices(clock: FakeClock, every: float, lasting: float) -> list[float]:
    """The ``waited`` of each notice of a stage that lasts until its first
    notice at or after ``lasting`` seconds."""
    llm = LLM(api_key="k", base_url="http://127.0.0.1:9/v1", model="m", clock=clock)
    deps = _Deps(llm, AgentConfig(llm_wait_notice=every), clock)
    seen: list[Event] = []
    over = asyncio.Event()

    async def emit(event: Event) -> None:
        seen.append(event)
        if clock.monotonic() >= lasting:
            over.set()

    async with llm_stage(deps, Stage.PLANNING, emit):  # type: ignore[arg-type]
        await over.wait()
    assert all(isinstance(e, StillWaiting) and e.stage is Stage.PLANNING for e in seen)
    return [e.waited for e in seen if isinstance(e, StillWaiting)]


async def test_a_notice_every_interval_from_the_stages_start() -> None:
    assert await notices(FakeClock(), every=10, lasting=35) == [10, 20, 30, 40]


async def test_a_late_notice_is_not_followed_by_another_at_once() -> None:
    # the first notice comes at 25 s instead of 10: the next waits its whole interval
    waited = await notices(BusyClock(late=15), every=10, lasting=40)
    assert waited == [25, 35, 45]
