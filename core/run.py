"""One request as a typed event stream, and what a graceful shutdown waits on.

``Agent.run(request)`` returns an :class:`AgentRun`: entering it starts the
request in a task of its own; iterating it yields the request's events
(:data:`core.types.Event`) as they happen, ending with
:class:`~core.types.Finished`; ``run.reply`` is the reply after that.  The
agent never waits on whoever reads the events (they are queued), so a slow
platform cannot slow a request down.

While the ``async with`` lasts the request counts as in flight
(:class:`InFlight`), so a graceful shutdown also waits for the adapter to
post the answer.  Leaving the block early stops the request.  Whatever ends
the request's task abnormally (:class:`~core.errors.LeaseLost`, a
cancellation) is raised to the reader, so a job runner sees it as if it
had run the request itself.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from types import TracebackType

from core.types import Event, EventSink, Finished, Reply

log = logging.getLogger(__name__)

Serve = Callable[[EventSink], Awaitable[Reply]]


class InFlight:
    """How many runs are open; :meth:`wait_idle` returns when none is."""

    def __init__(self) -> None:
        self.count = 0
        self._idle = asyncio.Event()
        self._idle.set()

    def enter(self) -> None:
        self.count += 1
        self._idle.clear()

    def leave(self) -> None:
        self.count -= 1
        if self.count <= 0:
            self.count = 0
            self._idle.set()

    async def wait_idle(self) -> None:
        await self._idle.wait()


@dataclass(frozen=True, slots=True)
class _Stopped:
    """The request's task ended without a reply (raised to the reader)."""

    error: BaseException


class AgentRun:
    """See the module docstring.  Use once."""

    def __init__(self, request_id: str, serve: Serve, inflight: InFlight) -> None:
        self._request_id = request_id
        self._serve = serve
        self._inflight = inflight
        self._events: asyncio.Queue[Event | _Stopped] = asyncio.Queue()
        self._task: asyncio.Task[None] | None = None
        self._reply: Reply | None = None
        self._ended = False

    @property
    def request_id(self) -> str:
        return self._request_id

    @property
    def reply(self) -> Reply:
        if self._reply is None:
            raise RuntimeError(f"request {self._request_id} has not finished")
        return self._reply

    async def __aenter__(self) -> AgentRun:
        if self._task is not None:
            raise RuntimeError("a run is entered once")
        self._inflight.enter()
        self._task = asyncio.get_running_loop().create_task(
            self._drive(), name=f"request-{self._request_id}"
        )
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        try:
            task = self._task
            if task is not None and not task.done():
                task.cancel()  # left early: the request stops
                await asyncio.wait([task])
            if task is not None and not task.cancelled():
                task.exception()  # seen (the reader was given it)
        finally:
            self._inflight.leave()

    def __aiter__(self) -> AsyncIterator[Event]:
        return self._iterate()

    async def _iterate(self) -> AsyncIterator[Event]:
        if self._task is None:
            raise RuntimeError("iterate a run inside its `async with`")
        while not self._ended:
            item = await self._events.get()
            if isinstance(item, _Stopped):
                self._ended = True
                raise item.error
            if isinstance(item, Finished):
                self._ended = True
            yield item

    async def _emit(self, event: Event) -> None:
        self._events.put_nowait(event)

    async def _drive(self) -> None:
        try:
            reply = await self._serve(self._emit)
        except BaseException as exc:  # re-raised: the reader gets it too
            self._events.put_nowait(_Stopped(exc))
            raise
        self._reply = reply
        self._events.put_nowait(Finished(reply))


async def run_to_end(run: AgentRun, events: EventSink | None) -> Reply:
    """Read ``run`` to its end, handing each event to ``events`` (a failing
    handler is logged, never fails the request); the reply."""
    async with run:
        async for event in run:
            if events is None:
                continue
            try:
                await events(event)
            except Exception:
                log.exception("request %s: event handler failed", run.request_id)
    return run.reply
