"""How a turn is run: one request, from "acknowledged" to "answer posted",
on any platform.

A platform hands :func:`run_turn` a :class:`~adapters.chat.surface.Surface`
(where the status and the answer go), a
:class:`~adapters.chat.render.Renderer` (its words and markup) and the
request (or how to build it: downloading the person's files happens here,
with the status already showing).  The turn:

1. posts the status message (a queue notice or a stopped process may have
   left one: the surface takes it over), while it
2. builds the request; a refused input (a file too large, not reachable)
   ends the turn in the status message;
3. runs it through ``AgentAPI.run`` (the status message may still be on its
   way: the turn does not wait for the platform; if it cannot be posted the
   turn stops) and, once it is posted, folds every event into it (one
   message, paced); the answer is shown as it is written, in
   the status message, or by the surface itself when it streams
   (:class:`~adapters.chat.surface.StreamingSurface`);
4. posts the answer with its files (:mod:`adapters.chat.files`), then the
   status message's final state.  All of it inside the run, so a graceful
   shutdown waits for the posting too.

The error policy, the same on every platform: a request that was refused or
failed ends its status message with ❌ and the reason, in the place where it
was asked, and nothing else is posted; a failure of our own (a bug, the
platform refusing the answer) says "something went wrong" with the request
id there, and the trace goes to the log with the same id.  Privately
(:meth:`~adapters.chat.surface.Surface.tell_privately`) is only for what is
refused before a turn exists (access lists, a declared file size): the
platforms' command code does that.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

from adapters.chat.board import Board, Opening
from adapters.chat.messages import reply_text, shown_text, with_notes
from adapters.chat.render import Renderer
from adapters.chat.status import StatusMessage
from adapters.chat.surface import MONOTONIC, BoardSurface, Clock, StreamingSurface, Surface
from core.errors import InputRejected, LeaseLost
from core.types import (
    AgentAPI,
    AnswerDelta,
    AnswerDiscarded,
    Event,
    Finished,
    Job,
    Reply,
    Request,
)

log = logging.getLogger(__name__)

RequestSource = Request | Callable[[], Awaitable[Request]]


async def run_turn(
    agent: AgentAPI,
    surface: Surface,
    renderer: Renderer,
    request: RequestSource,
    *,
    request_id: str | None = None,
    job: Job | None = None,
    downloading: bool = False,
    clock: Clock = MONOTONIC,
) -> Reply | None:
    """Run one request on ``surface`` (see the module docstring); the reply,
    or None when it never ran.  Never raises but for cancellation and
    :class:`~core.errors.LeaseLost` (another process has the job: post nothing)."""
    rid = request_id or (request.request_id if isinstance(request, Request) else "?")
    turn = _SurfaceTurn(agent, surface, renderer, rid, job, clock)
    return await turn.run(request, downloading)


class _SurfaceTurn:
    """One turn as a surface shows it: its status message, its board, the answer."""

    def __init__(
        self,
        agent: AgentAPI,
        surface: Surface,
        renderer: Renderer,
        request_id: str,
        job: Job | None,
        clock: Clock,
    ) -> None:
        self.agent = agent
        self.surface = surface
        self.renderer = renderer
        self.rid = request_id
        self.job = job
        self.clock = clock
        self.limit = surface.limits.message_chars
        self.native = surface if isinstance(surface, StreamingSurface) else None
        self.answer_in_status = surface.limits.answer_in_status and self.native is None
        self.status = StatusMessage(
            surface, interval=surface.limits.status_interval, clock=clock, request_id=request_id
        )
        self.board = Board()
        if isinstance(surface, BoardSurface):
            surface.follow(self.board)  # it shows the state natively as well
        self.streamed = ""
        self.started = clock.monotonic()
        self.opening: asyncio.Task[bool]  # posting the status message (started by run)

    async def run(self, request: RequestSource, downloading: bool) -> Reply | None:
        resumed = self.job is not None and self.job.resumed
        self.board.opening = (
            Opening.RESUMING
            if resumed
            else Opening.DOWNLOADING
            if downloading
            else Opening.STARTING
        )
        # The status message is posted while the request is built and the
        # turn starts (a platform round trip off the turn's path); what is
        # shown in it, or posted at all, waits until it is out.
        self.opening = asyncio.create_task(self._open(), name=f"status-open-{self.rid}")
        try:
            try:
                built = request if isinstance(request, Request) else await request()
            except InputRejected as exc:
                if not await self.opening:
                    await self.status.close(self.renderer.sorry(self.rid))
                    return None
                log.info("request %s: input refused: %s", self.rid, exc)
                await self.status.close(self.renderer.failed(exc, (), self.limit))
                return None
            reply = await self._run(built)
            if reply is None:  # the status message could not be posted: the turn stopped
                await self.status.close(self.renderer.sorry(self.rid))
            return reply
        except (asyncio.CancelledError, LeaseLost):
            self.status.cancel()  # stopping, or another process took it over: no more edits
            if not self.opening.done():
                self.opening.cancel()
                await asyncio.wait([self.opening])
            raise
        except Exception:
            await self._crashed()
            return None

    async def _open(self) -> bool:
        """Post the status message: False when the platform refused (then
        there is nowhere to show the turn, and it stops)."""
        try:
            await self.status.open(self._status_text())
        except Exception:
            log.exception("request %s: the status message could not be posted", self.rid)
            return False
        return True

    async def _run(self, request: Request) -> Reply | None:
        """The turn, its events folded into the status message once that is
        posted (None: it could not be; leaving the run stopped the turn)."""
        async with self.agent.run(request, job=self.job) as run:
            events = aiter(run)
            first = asyncio.ensure_future(anext(events, None))
            try:
                # A failed post stops the turn at once, not at its next event;
                # an event waits for the post (nothing is shown before it).
                await asyncio.wait([first, self.opening], return_when=asyncio.FIRST_COMPLETED)
                if first.done():
                    first.result()  # the run ended abnormally: raised at once
                opened = await self.opening
            except BaseException:
                first.cancel()
                raise
            if not opened:
                first.cancel()
                await asyncio.wait([first])
                if not first.cancelled():
                    first.exception()  # seen: the run stops anyway
                return None
            event = await first
            if event is not None:
                await self._apply(event)
            async for event in events:
                await self._apply(event)
            reply = run.reply
            await self._finish(reply)  # inside the run: a shutdown waits for the posting
        return reply

    async def _apply(self, event: Event) -> None:
        self.board.apply(event)
        if isinstance(event, Finished):
            return  # the last event: the reply is read after it
        if self.native is not None and isinstance(event, AnswerDelta):
            self.streamed += event.text
            await self.native.stream_text(event.text)
            return
        if self.native is not None and isinstance(event, AnswerDiscarded):
            self.streamed = ""
            await self.native.discard_stream()
            return
        await self.status.show(self._status_text())

    async def _finish(self, reply: Reply) -> None:
        if reply.error:
            log.info("request %s: %s: %s", self.rid, reply.status, reply.text)
            # the error itself, when the reply has it and no note follows it
            reason = reply.failure if not reply.notes else None
            shown = reason or reply_text(reply)
            await self.status.close(self.renderer.failed(shown, reply.tasks, self.limit))
            return
        text = shown_text(reply)  # a fallback's reason worded
        if self.native is not None and self.streamed:
            if text.startswith(self.streamed):  # shown already: only the rest is left
                text = text[len(self.streamed) :]
            else:
                await self.native.discard_stream()
        text = with_notes(text, reply)  # what the core noted (the turn was not saved)
        try:
            await self.surface.post_answer(self.renderer.answer(text), reply.files)
        except Exception:
            log.exception("request %s: posting the answer failed", self.rid)
            failed = self.renderer.failed(self.renderer.sorry(self.rid), reply.tasks, self.limit)
            await self.status.close(failed)
            return
        elapsed = self.clock.monotonic() - self.started
        await self.status.close(self.renderer.final(reply, elapsed, self.limit))
        log.info(
            "request %s answered (%s, %d files) in %.2f s",
            self.rid,
            reply.status,
            len(reply.files),
            elapsed,
        )

    async def _crashed(self) -> None:
        log.exception("request %s failed", self.rid)
        await asyncio.wait([self.opening])  # one status message: the one being posted
        sorry = self.renderer.failed(self.renderer.sorry(self.rid), self.board.tasks, self.limit)
        await self.status.close(sorry)

    def _status_text(self) -> str:
        return self.renderer.status(self.board, self.limit, with_answer=self.answer_in_status)
