"""One status message, paced: at most one edit per interval on the clock, the
newest state winning, the final state always shown, a failed edit harmless.
The clock is fake and moved by the test: nothing here reads the wall clock."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import pytest

from adapters.chat import Limits
from adapters.chat.status import StatusMessage
from core.types import Resource


class Steps:
    """A clock the test moves; ``sleep`` returns once it has been moved far enough."""

    def __init__(self) -> None:
        self.t = 0.0
        self._moved = asyncio.Condition()

    def now(self) -> float:
        return self.t

    def monotonic(self) -> float:
        return self.t

    async def sleep(self, seconds: float) -> None:
        until = self.t + seconds
        async with self._moved:
            await self._moved.wait_for(lambda: self.t >= until)

    async def advance(self, seconds: float) -> None:
        async with self._moved:
            self.t += seconds
            self._moved.notify_all()
        for _ in range(5):  # let the flusher run
            await asyncio.sleep(0)


class Recorder:
    limits = Limits(2000, 1000)

    def __init__(self, clock: Steps, fail_first_edit: bool = False) -> None:
        self.clock = clock
        self.posts: list[str] = []
        self.edits: list[tuple[float, str]] = []
        self.fail_first_edit = fail_first_edit

    async def post_status(self, text: str) -> None:
        self.posts.append(text)

    async def edit_status(self, text: str) -> None:
        if self.fail_first_edit:
            self.fail_first_edit = False
            raise ConnectionError("the platform is down")
        self.edits.append((self.clock.now(), text))

    async def post_answer(self, text: str, files: Sequence[Resource]) -> None:
        raise AssertionError("not used")

    async def tell_privately(self, text: str) -> None:
        raise AssertionError("not used")


async def test_a_burst_is_shown_once_per_interval_newest_first_and_the_final_state_wins() -> None:
    clock = Steps()
    surface = Recorder(clock)
    status = StatusMessage(surface, interval=1.0, clock=clock)
    await status.open("starting")
    for i in range(50):
        await status.show(f"step {i}")  # never waits on the platform
    await clock.advance(0.5)
    assert surface.edits == []  # not before the interval since the post
    await clock.advance(0.5)
    assert surface.edits == [(1.0, "step 49")]  # the newest; the 49 before it skipped
    await status.show("late step")
    closing = asyncio.create_task(status.close("final"))
    await clock.advance(0.9)
    assert not closing.done()
    await clock.advance(0.1)
    await closing
    assert surface.posts == ["starting"]
    assert surface.edits == [(1.0, "step 49"), (2.0, "final")]


async def test_unchanged_text_is_not_edited_and_close_without_changes_is_free() -> None:
    clock = Steps()
    surface = Recorder(clock)
    status = StatusMessage(surface, interval=1.0, clock=clock)
    await status.open("same")
    await status.show("same")
    await status.close("same")
    assert surface.edits == []


async def test_a_failed_edit_does_not_fail_the_turn(caplog: pytest.LogCaptureFixture) -> None:
    clock = Steps()
    surface = Recorder(clock, fail_first_edit=True)
    status = StatusMessage(surface, interval=0.0, clock=clock, request_id="r1")
    await status.open("one")
    await status.show("two")  # the platform refuses: logged
    await status.close("three")
    assert [t for _, t in surface.edits] == ["three"]
    assert any(
        "r1" in r.getMessage() and "status edit failed" in r.getMessage() for r in caplog.records
    )


async def test_a_status_never_posted_is_posted_at_the_end() -> None:
    clock = Steps()
    surface = Recorder(clock)
    status = StatusMessage(surface, interval=1.0, clock=clock)
    await status.show("ignored: nothing is posted yet")
    await status.close("❌ failed")
    assert surface.posts == ["❌ failed"] and surface.edits == []


async def test_every_state_is_shown_in_order_without_an_interval() -> None:
    clock = Steps()
    surface = Recorder(clock)
    status = StatusMessage(surface, interval=0, clock=clock)
    await status.open("a")
    for text in ("b", "c", "d"):
        await status.show(text)
    await status.close("e")
    assert [t for _, t in surface.edits] == ["b", "c", "d", "e"]
