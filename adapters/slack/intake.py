"""Taking a Slack message in: read the event, record it as a job before
the ack, then process it in Bolt's lazy listener (or answer a command).

Slack wants an answer within 3 s or it redelivers the event, so the ack
function does one fast thing before ``ack()``: it records the event as a
durable job (one insert) with the event id as the job's unique key; the work
runs in the lazy listener through the job queue (:func:`adapters.chat.intake.process`),
or, if this process dies, in whichever process resumes the job.  The same
for channel mentions, DMs and assistant threads.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from slack_bolt.async_app import AsyncBoltContext
from slack_sdk.web.async_client import AsyncWebClient

from adapters.chat.intake import process
from adapters.chat.render import CANNOT_TAKE, ERROR_ICON
from adapters.chat.text import strip_mention
from adapters.slack import commands
from adapters.slack.config import SlackConfig
from adapters.slack.jobs import KIND, Incoming, dedup_key, payload
from core.types import Accepted, AgentAPI, new_request_id

log = logging.getLogger(__name__)

RECORD_WAIT = 30.0  # seconds a lazy listener waits for its ack path's record
HINT = (
    "Ask me something — for example _“draw a lighthouse at dusk and describe it”_. "
    "`usage` shows what you used; `config` this workspace's settings."
)


def declared_bytes(incoming: Incoming, cap: int) -> int:
    """What the event's files weigh in admission: the sizes Slack declared
    (one without a size counts as the largest file taken)."""
    return sum(
        min(f["size"], cap) if isinstance(f.get("size"), int) else cap for f in incoming.files
    )


def incoming_from(
    body: dict[str, Any],
    event: dict[str, Any],
    context: AsyncBoltContext,
    *,
    threaded: bool,
    assistant: bool = False,
) -> Incoming:
    """Read an event. ``threaded``: answer in the message's thread (a new one
    rooted at the message itself when it is not in a thread yet);
    ``assistant``: the message is in an assistant thread."""
    ts = str(event.get("ts") or event.get("event_ts") or "")
    thread = event.get("thread_ts") or (ts if threaded else None)
    team = (
        context.team_id
        or body.get("team_id")
        or event.get("team")
        or context.enterprise_id
        or "unknown"
    )
    return Incoming(
        team=str(team),
        channel=str(event.get("channel") or context.channel_id or ""),
        user=str(event.get("user") or context.user_id or ""),
        text=strip_mention(str(event.get("text") or ""), context.bot_user_id),
        ts=ts,
        thread_ts=str(thread) if thread else None,
        files=tuple(event.get("files") or ()),
        event_id=body.get("event_id"),
        assistant=assistant,
    )


async def _say_failure(client: AsyncWebClient, incoming: Incoming) -> None:
    try:
        await client.chat_postMessage(
            channel=incoming.channel,
            thread_ts=incoming.thread_ts,
            text=f"{ERROR_ICON} {CANNOT_TAKE}",
        )
    except Exception:
        log.exception("slack: event %s: could not report the failure", incoming.event_id)


class Intake:
    """Record an event as a job before the ack, then process it in the lazy
    listener: the same for mentions, DMs and assistant threads."""

    def __init__(self, agent: AgentAPI, config: SlackConfig) -> None:
        self.agent = agent
        self.config = config
        # What each delivery's ack path recorded, for its lazy listener (same
        # process; Bolt starts the lazy listener alongside the ack function, so
        # it waits here for the record, one per delivery, in order).
        self._recorded: dict[str, asyncio.Queue[Accepted | None]] = {}

    @staticmethod
    def _key(incoming: Incoming) -> str:
        return incoming.event_id or f"{incoming.channel}:{incoming.ts}"

    def _records(self, key: str) -> asyncio.Queue[Accepted | None]:
        return self._recorded.setdefault(key, asyncio.Queue())

    async def _record_of(self, incoming: Incoming) -> Accepted | None:
        key = self._key(incoming)
        queue = self._records(key)
        try:
            return await asyncio.wait_for(queue.get(), RECORD_WAIT)
        except TimeoutError:
            log.error("slack: event %s: its ack path recorded nothing", incoming.event_id)
            return None
        finally:
            if queue.empty() and self._recorded.get(key) is queue:
                del self._recorded[key]

    async def accept(self, incoming: Incoming, ack: Callable[[], Awaitable[Any]]) -> None:
        """Record the request (one insert), then ack: a crash after the ack
        can no longer lose it.  A hint or a command needs no record."""
        if (not incoming.text and not incoming.files) or commands.parse(incoming.text):
            await ack()  # the lazy listener answers it
            return
        got: Accepted | None = None
        try:
            got = await self.agent.accept(
                KIND,
                incoming.key,
                payload(incoming),
                request_id=new_request_id(),
                dedup=dedup_key(incoming.event_id),
                upload_bytes=declared_bytes(incoming, self.config.max_file_bytes),
            )
        except Exception:
            log.exception("slack: event %s could not be recorded", incoming.event_id)
        finally:
            self._records(self._key(incoming)).put_nowait(got)
            await ack()

    async def handle(self, incoming: Incoming, client: AsyncWebClient) -> None:
        # Bolt's lazy runner would swallow an exception with a one-line log:
        # log the trace here and tell the user.
        try:
            if not incoming.text and not incoming.files:
                await client.chat_postMessage(
                    channel=incoming.channel, thread_ts=incoming.thread_ts, text=HINT
                )
                return
            command = commands.parse(incoming.text)
            if command is not None:
                await commands.run(self.agent, client, self.config, incoming, command)
                return
            got = await self._record_of(incoming)
            if got is None:  # the store could not take it
                await _say_failure(client, incoming)
                return
            await process(self.agent, got, f"slack event {incoming.event_id}")
        except Exception:
            log.exception("slack: event %s could not be started", incoming.event_id)
            await _say_failure(client, incoming)
