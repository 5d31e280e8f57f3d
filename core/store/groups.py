"""Group commit: writes asked for while a transaction of their kind runs go
together in the next one (one commit; on SQLite one disk sync), each caller
told its own outcome through the future it waits on.  The job store groups
its accepts, checkpoints and finishes (:mod:`core.store.jobs`), the repo a
burst's turn saves (:mod:`core.store.repo`); this is the loop they share."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Protocol, TypeVar

from core.errors import LeaseLost, StoreUnavailable


class Waiting(Protocol):
    """A write in line: its caller waits on ``done``."""

    @property
    def done(self) -> asyncio.Future[Any]: ...


W = TypeVar("W", bound=Waiting)


def settle(w: Waiting, outcome: Any) -> None:
    if not w.done.done():  # its caller may have gone (cancelled): the write stands
        w.done.set_result(outcome)


def fail(w: Waiting, exc: BaseException) -> None:
    if not w.done.done():
        w.done.set_exception(exc)


async def write_groups(
    queue: list[W],
    *,
    limit: int,
    together: Callable[[list[W]], Awaitable[Sequence[Any]]],
    alone: Callable[[W], Awaitable[Any]],
    split: Callable[[list[W], BaseException], bool],
    kept: Callable[[W], bool] = lambda w: True,
    together_from: int = 1,
    closed: str,
) -> None:
    """Write what ``queue`` holds, ``limit`` at a time, until it is empty
    (callers may add to it meanwhile).  A group goes by ``together`` (one
    transaction; the outcomes in order), one smaller than ``together_from``
    each by ``alone``.  When ``together`` fails, ``split`` says whether the
    failure may be one write's (then each is written again by ``alone``, so
    only the one at fault fails) or every caller hears it.  Writes ``kept``
    turns down (a caller that went away first) are dropped.  Cancelled (the
    loop is closing): every caller left hears StoreUnavailable(``closed``)."""
    batch: list[W] = []
    try:
        while queue:
            batch = [w for w in queue[:limit] if kept(w)]
            del queue[:limit]
            if len(batch) >= max(together_from, 1):
                try:
                    outcomes = await together(batch)
                except (Exception, LeaseLost) as exc:  # LeaseLost: a BaseException
                    if not split(batch, exc):
                        for w in batch:
                            fail(w, exc)
                        batch = []
                        continue
                else:
                    for w, outcome in zip(batch, outcomes, strict=True):
                        settle(w, outcome)
                    batch = []
                    continue
            for w in batch:
                try:
                    settle(w, await alone(w))
                except (Exception, LeaseLost) as exc:
                    fail(w, exc)
            batch = []
    finally:  # cancelled: nobody is left to write these
        for w in [*batch, *queue]:
            fail(w, StoreUnavailable(closed))
        queue.clear()
