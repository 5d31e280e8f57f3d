"""Bolt listeners: ack first, then work in a lazy listener.

Slack wants an answer within 3 s or it redelivers the event, so every
listener's ack function only calls ``ack()``; the real work (store, LLM,
experts) runs in Bolt's lazy listener.  Redeliveries are dropped twice over:
requests carrying ``X-Slack-Retry-Num`` (Bolt mirrors Socket Mode's
``retry_attempt`` into the same header) are acked and ignored by a global
middleware, and every event id is claimed in the agent's store before any
work, which also holds across restarts and replicas.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Awaitable, Callable
from typing import Any

from slack_bolt.async_app import AsyncApp, AsyncBoltContext, AsyncBoltRequest
from slack_bolt.response import BoltResponse
from slack_sdk.web.async_client import AsyncWebClient

from adapters.slack.config import SlackConfig
from adapters.slack.turn import Incoming, run_turn
from core.types import AgentAPI

log = logging.getLogger(__name__)

# Message subtypes that are still a person talking to the bot.
_USER_SUBTYPES = {None, "file_share"}

HINT = "Ask me something — for example _“draw a lighthouse at dusk and describe it”_."


def retry_number(request: AsyncBoltRequest) -> int:
    """The redelivery count: ``X-Slack-Retry-Num`` in HTTP mode, Socket Mode's
    ``retry_attempt`` (which Bolt mirrors into the same header, ``0`` on the
    first delivery)."""
    values = request.headers.get("x-slack-retry-num") or ["0"]
    try:
        return int(values[0])
    except ValueError:
        return 1  # unreadable, but present: treat it as a retry


async def ignore_retries(
    request: AsyncBoltRequest,
    ack: Callable[[], Awaitable[BoltResponse]],
    next: Callable[[], Awaitable[Any]],
) -> BoltResponse | None:
    """Ack a redelivery and stop: the first delivery is already being handled."""
    retry = retry_number(request)
    if retry > 0:
        reason = (request.headers.get("x-slack-retry-reason") or ["?"])[0]
        log.info(
            "slack: ignoring redelivery %s of event %s (%s)",
            retry,
            request.body.get("event_id"),
            reason,
        )
        return await ack()
    await next()
    return None


async def ack_now(ack: Callable[[], Awaitable[Any]]) -> None:
    await ack()


def is_user_dm(event: dict[str, Any]) -> bool:
    """A person's message in a DM with the bot (not a bot, not an edit)."""
    return (
        event.get("channel_type") == "im"
        and event.get("subtype") in _USER_SUBTYPES
        and not event.get("bot_id")
        and bool(event.get("user"))
    )


def strip_mention(text: str, bot_user_id: str | None) -> str:
    """The text without the bot's own ``<@U…>`` mention(s)."""
    if bot_user_id:
        text = re.sub(rf"<@{re.escape(bot_user_id)}(?:\|[^>]*)?>", " ", text)
    return re.sub(r"[ \t]{2,}", " ", text).strip()


def incoming_from(
    body: dict[str, Any], event: dict[str, Any], context: AsyncBoltContext, *, threaded: bool
) -> Incoming:
    """Read an event. ``threaded``: answer in the message's thread (a new one
    rooted at the message itself when it is not in a thread yet)."""
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
    )


async def _say_failure(client: AsyncWebClient, incoming: Incoming) -> None:
    try:
        await client.chat_postMessage(
            channel=incoming.channel,
            thread_ts=incoming.thread_ts,
            text="❌ Sorry, I can't answer right now; please try again in a minute.",
        )
    except Exception:
        log.exception("slack: event %s: could not report the failure", incoming.event_id)


def register(app: AsyncApp, agent: AgentAPI, config: SlackConfig) -> None:
    """Attach the middleware and listeners for mentions and DMs."""

    async def handle(incoming: Incoming, client: AsyncWebClient) -> None:
        # Bolt's lazy runner would swallow an exception with a one-line log:
        # log the trace here and tell the user.
        try:
            if incoming.event_id and not await agent.claim_event("slack", incoming.event_id):
                log.info("slack: event %s was handled before; ignoring", incoming.event_id)
                return
            if not incoming.text and not incoming.files:
                await client.chat_postMessage(
                    channel=incoming.channel, thread_ts=incoming.thread_ts, text=HINT
                )
                return
        except Exception:
            log.exception("slack: event %s could not be started", incoming.event_id)
            await _say_failure(client, incoming)
            return
        await run_turn(agent, client, config, incoming)

    async def on_mention(
        body: dict[str, Any], event: dict[str, Any], context: AsyncBoltContext
    ) -> None:
        if str(event.get("channel", "")).startswith("D"):
            return  # a DM: the message.im listener answers it
        incoming = incoming_from(body, event, context, threaded=True)
        await handle(incoming, context.client)

    async def on_direct_message(
        body: dict[str, Any], event: dict[str, Any], context: AsyncBoltContext
    ) -> None:
        incoming = incoming_from(body, event, context, threaded=False)
        await handle(incoming, context.client)

    async def ignore_message(ack: Callable[[], Awaitable[Any]]) -> None:
        """Other message events (edits, bot posts, channel chatter): ack only,
        so Slack does not retry them."""
        await ack()

    async def is_dm(event: dict[str, Any]) -> bool:
        return is_user_dm(event)

    app.use(ignore_retries)
    app.event("app_mention")(ack=ack_now, lazy=[on_mention])
    app.event("message", matchers=[is_dm])(ack=ack_now, lazy=[on_direct_message])
    app.event("message")(ignore_message)
