"""The status message: at most one edit per interval, the final state always shown."""

from __future__ import annotations

import asyncio
import time

import discord

from adapters.discord.status import StatusMessage


class Recorder:
    def __init__(self, fail_first: bool = False) -> None:
        self.edits: list[tuple[float, str]] = []
        self.fail_first = fail_first
        self.attempted = asyncio.Event()

    async def __call__(self, text: str) -> None:
        self.attempted.set()
        if self.fail_first:
            self.fail_first = False
            raise discord.DiscordServerError(_Response(), "down")  # type: ignore[arg-type]
        self.edits.append((time.monotonic(), text))


class _Response:
    status = 503
    reason = "Service Unavailable"


async def test_edits_are_throttled_and_the_final_state_is_always_rendered() -> None:
    rec = Recorder()
    status = StatusMessage(rec, interval=0.2)
    for i in range(50):  # a burst of progress
        status.show(f"step {i}")
        await asyncio.sleep(0)
    await asyncio.sleep(0.25)
    status.show("late step")
    await status.close("final")
    texts = [t for _, t in rec.edits]
    assert texts[0] == "step 0" and texts[-1] == "final"
    assert len(texts) <= 4  # not 52
    gaps = [b - a for (a, _), (b, _) in zip(rec.edits, rec.edits[1:], strict=False)]
    assert all(g >= 0.19 for g in gaps), gaps


async def test_close_without_progress_still_edits_once() -> None:
    rec = Recorder()
    await StatusMessage(rec, interval=1.0).close("done")
    assert [t for _, t in rec.edits] == ["done"]


async def test_a_failed_edit_does_not_break_the_request() -> None:
    rec = Recorder(fail_first=True)
    status = StatusMessage(rec, interval=0.0)
    status.show("one")
    await rec.attempted.wait()  # the edit of "one" was tried (and failed)
    await status.close("two")
    assert [t for _, t in rec.edits] == ["two"]
