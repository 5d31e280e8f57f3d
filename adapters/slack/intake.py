"""Taking a Slack message in: read the event, record it as a job before
the ack, then process it in Bolt's lazy listener (or answer a command).

Slack wants an answer within 3 s or it redelivers the event, so the ack
function does one fast thing before ``ack()``: it records the event as a
durable job (one insert) with the event id as the job's unique key; the work
runs in the lazy listener through the job queue (:func:`adapters.chat.intake.process`),
or, if this process dies, in whichever process resumes the job.  The lazy
listener gets what the ack function read and recorded through Bolt's context
(:class:`Taken`), not by parsing the event again.  The same for channel
mentions, DMs and assistant threads.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
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


@dataclass(frozen=True, slots=True)
class Taken:
    """What an ack function read and recorded, for its lazy listener: Bolt
    (``process_before_response=True``) runs the ack function to its end, then
    starts the lazy listeners with a copy of the request's context, so what
    the ack function left there is what the lazy listener sees.  ``accepted``
    is None when the event needs no job (a hint, a command) or the store
    could not take it."""

    incoming: Incoming
    accepted: Accepted | None = None


TAKEN = "hugginggpt_taken"  # the Bolt context key a Taken is left under


class Intake:
    """Record an event as a job before the ack, then process it in the lazy
    listener: the same for mentions, DMs and assistant threads."""

    def __init__(self, agent: AgentAPI, config: SlackConfig) -> None:
        self.agent = agent
        self.config = config

    async def accept(
        self, incoming: Incoming, ack: Callable[[], Awaitable[Any]], context: AsyncBoltContext
    ) -> None:
        """Record the request (one insert), then ack: a crash after the ack
        can no longer lose it.  A hint or a command needs no record."""
        if (not incoming.text and not incoming.files) or commands.parse(incoming.text):
            context[TAKEN] = Taken(incoming)
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
            context[TAKEN] = Taken(incoming, got)
            await ack()

    async def handle(self, context: AsyncBoltContext) -> None:
        """In the lazy listener: answer what the ack function took."""
        taken = context.get(TAKEN)
        if not isinstance(taken, Taken):  # Bolt drops a context value it cannot deep-copy
            log.error("slack: event in %s: its ack function left no record", context.channel_id)
            return
        incoming, client = taken.incoming, context.client
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
            if taken.accepted is None:  # the store could not take it
                await _say_failure(client, incoming)
                return
            await process(self.agent, taken.accepted, f"slack event {incoming.event_id}")
        except Exception:
            log.exception("slack: event %s could not be started", incoming.event_id)
            await _say_failure(client, incoming)
