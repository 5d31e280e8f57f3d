"""Several platform calls at once (a message's downloads, an answer's
uploads), their results in order: the first to fail cancels the rest and
is raised as itself, not as an exception group, so callers handle the
platform's own errors as when the calls went one by one."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Sequence
from typing import TypeVar

T = TypeVar("T")


async def at_once(
    calls: Sequence[Awaitable[T]], *, first: type[BaseException] = BaseException
) -> list[T]:
    """Every call at once, their results in order.  On failure the first
    failure that is a ``first`` is raised as itself (any, by default); if
    none is, the exception group as it came."""
    try:
        async with asyncio.TaskGroup() as group:
            tasks = [group.create_task(_awaited(c)) for c in calls]
    except BaseExceptionGroup as failed:
        chosen = failed.subgroup(first)
        if chosen is None:  # none of the kind asked for: the group as it came
            raise
        raise chosen.exceptions[0] from None
    return [t.result() for t in tasks]


async def _awaited(call: Awaitable[T]) -> T:
    return await call
