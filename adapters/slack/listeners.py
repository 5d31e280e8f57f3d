"""Bolt listeners: record, ack, then work in a lazy listener.

Slack wants an answer within 3 s or it redelivers the event, so a listener's
ack function does one fast thing before ``ack()``: it records the event as a
durable job (:mod:`core.jobs`; one insert) with the event id as the job's
unique key.  The real work (downloads, LLM, experts, the answer) runs in
Bolt's lazy listener through the job queue, or, if this process dies, in
whichever process resumes the job.

A redelivery (``X-Slack-Retry-Num``, Socket Mode's ``retry_attempt``, or
the same event id at another replica) finds the job its event id already
has: a finished job is dropped, an unfinished one is resumed here when no
live process holds it (its process died, or stopped and handed it on) and
left alone when one does.

Assistant threads (the app's own chat) come through Bolt's
:class:`~slack_bolt.async_app.AsyncAssistant` middleware and the same
record-then-ack path (:mod:`adapters.slack.assistant_events`); the message
commands (``usage``, ``config``: :mod:`adapters.slack.commands`) are answered
at once, not recorded as jobs.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any

from slack_bolt.async_app import AsyncApp, AsyncBoltContext, AsyncBoltRequest
from slack_bolt.response import BoltResponse

from adapters.slack.assistant_events import FeedbackRecorder, register_assistant
from adapters.slack.config import SlackConfig
from adapters.slack.intake import Intake, incoming_from
from adapters.slack.jobs import KIND, SlackRunner
from core.types import AgentAPI

log = logging.getLogger(__name__)

# Message subtypes that are still a person talking to the bot.
_USER_SUBTYPES = {None, "file_share"}


def retry_number(request: AsyncBoltRequest) -> int:
    """The redelivery count: ``X-Slack-Retry-Num`` in HTTP mode, Socket Mode's
    ``retry_attempt`` (which Bolt mirrors into the same header, ``0`` on the
    first delivery)."""
    values = request.headers.get("x-slack-retry-num") or ["0"]
    try:
        return int(values[0])
    except ValueError:
        return 1  # unreadable, but present: treat it as a retry


async def log_retries(
    request: AsyncBoltRequest,
    ack: Callable[[], Awaitable[BoltResponse]],
    next: Callable[[], Awaitable[Any]],
) -> None:
    """Log a redelivery; it goes on to the listeners, whose job lookup
    decides (finished: dropped; unfinished and unheld: resumed)."""
    retry = retry_number(request)
    if retry > 0:
        reason = (request.headers.get("x-slack-retry-reason") or ["?"])[0]
        log.info(
            "slack: redelivery %s of event %s (%s)", retry, request.body.get("event_id"), reason
        )
    await next()


def is_user_dm(event: dict[str, Any]) -> bool:
    """A person's message in a DM with the bot (not a bot, not an edit)."""
    return (
        event.get("channel_type") == "im"
        and event.get("subtype") in _USER_SUBTYPES
        and not event.get("bot_id")
        and bool(event.get("user"))
    )


def register(
    app: AsyncApp,
    agent: AgentAPI,
    config: SlackConfig,
    *,
    feedback: FeedbackRecorder | None = None,
) -> SlackRunner:
    """Attach the middleware and listeners for mentions, DMs, assistant
    threads and feedback clicks, and the runner that answers (and resumes)
    Slack jobs (returned)."""
    runner = SlackRunner(agent, app.client, config)
    agent.register_runner(KIND, runner)
    intake = Intake(agent, config)

    async def accept_mention(
        body: dict[str, Any],
        event: dict[str, Any],
        context: AsyncBoltContext,
        ack: Callable[[], Awaitable[Any]],
    ) -> None:
        if str(event.get("channel", "")).startswith("D"):
            await ack()  # a DM: the message.im listener answers it
            return
        await intake.accept(incoming_from(body, event, context, threaded=True), ack, context)

    async def accept_direct_message(
        body: dict[str, Any],
        event: dict[str, Any],
        context: AsyncBoltContext,
        ack: Callable[[], Awaitable[Any]],
    ) -> None:
        await intake.accept(incoming_from(body, event, context, threaded=False), ack, context)

    async def answer(context: AsyncBoltContext) -> None:
        await intake.handle(context)

    async def answer_mention(context: AsyncBoltContext) -> None:
        if not str(context.channel_id or "").startswith("D"):  # a DM: answered as one
            await intake.handle(context)

    async def ignore_message(ack: Callable[[], Awaitable[Any]]) -> None:
        """Other message events (edits, bot posts, channel chatter): ack only,
        so Slack does not retry them."""
        await ack()

    async def is_dm(event: dict[str, Any]) -> bool:
        return is_user_dm(event)

    app.use(log_retries)
    register_assistant(app, agent, intake, feedback)  # before the DM listener sees them
    app.event("app_mention")(ack=accept_mention, lazy=[answer_mention])
    app.event("message", matchers=[is_dm])(ack=accept_direct_message, lazy=[answer])
    app.event("message")(ignore_message)
    return runner
