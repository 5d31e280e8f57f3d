"""Bolt listeners for Slack's AI-app surface (the app's own chat).

Through Bolt's :class:`~slack_bolt.async_app.AsyncAssistant` middleware:

* ``assistant_thread_started`` (a person opened a new chat with the app) →
  a few suggested prompts (``set_suggested_prompts``);
* ``assistant_thread_context_changed`` → acknowledged (the bot does not use
  the channel the person is looking at, so nothing is stored or fetched);
* a person's message in an assistant thread → recorded as a job before the
  ack, like any Slack request, and answered on the AI-app surface
  (:mod:`adapters.slack.assistant`);

and, on any message, a click on the 👍/👎 feedback buttons under an
answer → stored with its turn (the request id is in the button's value)
and acknowledged with a private thank-you.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from slack_bolt.async_app import AsyncApp, AsyncAssistant, AsyncBoltContext
from slack_bolt.context.set_suggested_prompts.async_set_suggested_prompts import (
    AsyncSetSuggestedPrompts,
)
from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from adapters.chat.render import ERROR_ICON
from adapters.slack.assistant import (
    BAD,
    FEEDBACK_ACTION,
    GOOD,
    SUGGESTED_PROMPTS,
    SUGGESTED_PROMPTS_TITLE,
)
from adapters.slack.intake import Intake, incoming_from
from core.types import AgentAPI, ConversationKey

log = logging.getLogger(__name__)

_VALUE = re.compile(rf"^({GOOD}|{BAD}):([\w-]{{1,64}})$")
THANKS = {
    GOOD: "Thanks for the 👍 — noted with this answer.",
    BAD: "Thanks for the 👎 — noted with this answer; it helps to say in the thread what "
    "was wrong.",
}
NOT_STORED = "Sorry, I could not record your feedback right now."

Ack = Callable[[], Awaitable[Any]]


@runtime_checkable
class FeedbackRecorder(Protocol):
    """Where feedback clicks are stored, with their turn (``request_id``);
    a person's last click on an answer counts."""

    async def record_feedback(
        self, conversation: ConversationKey, request_id: str, user_id: str, rating: str
    ) -> None: ...


@dataclass(frozen=True, slots=True)
class Click:
    conversation: ConversationKey
    request_id: str
    user: str
    rating: str  # GOOD or BAD
    channel: str
    thread_ts: str | None


def click_of(body: dict[str, Any]) -> Click | None:
    """A feedback click read from a ``block_actions`` payload (None: not one
    of ours, or malformed)."""
    actions = body.get("actions") or []
    action = actions[0] if actions and isinstance(actions[0], dict) else {}
    match = _VALUE.match(str(action.get("value") or ""))
    user = (body.get("user") or {}).get("id")
    container = body.get("container") or {}
    message = body.get("message") or {}
    channel = (body.get("channel") or {}).get("id") or container.get("channel_id")
    team = (body.get("team") or {}).get("id") or (body.get("user") or {}).get("team_id")
    if match is None or not user or not channel or not team:
        return None
    thread = container.get("thread_ts") or message.get("thread_ts")
    return Click(
        conversation=ConversationKey("slack", str(team), str(channel), thread),
        request_id=match.group(2),
        user=str(user),
        rating=match.group(1),
        channel=str(channel),
        thread_ts=thread,
    )


def register_assistant(
    app: AsyncApp, agent: AgentAPI, intake: Intake, feedback: FeedbackRecorder | None
) -> None:
    """Attach the assistant middleware and the feedback action to ``app``."""
    store = (
        feedback if feedback is not None else agent if isinstance(agent, FeedbackRecorder) else None
    )
    if store is None:
        log.warning("slack: no feedback store: 👍/👎 clicks are acknowledged but not kept")
    assistant = AsyncAssistant(logger=log)

    async def ack_only(ack: Ack) -> None:
        await ack()

    async def suggest(set_suggested_prompts: AsyncSetSuggestedPrompts) -> None:
        try:
            await set_suggested_prompts(
                prompts=list(SUGGESTED_PROMPTS), title=SUGGESTED_PROMPTS_TITLE
            )
        except SlackApiError as e:  # a nicety: the chat works without it
            log.info("slack: no suggested prompts (%s)", e.response.get("error"))

    async def accept_message(
        body: dict[str, Any], event: dict[str, Any], context: AsyncBoltContext, ack: Ack
    ) -> None:
        incoming = incoming_from(body, event, context, threaded=False, assistant=True)
        await intake.accept(incoming, ack, context)

    async def on_message(context: AsyncBoltContext) -> None:
        await intake.handle(context)

    async def on_feedback(body: dict[str, Any], client: AsyncWebClient) -> None:
        click = click_of(body)
        if click is None:
            log.info("slack: a feedback click that names no request: %s", body.get("actions"))
            return
        text = THANKS[click.rating]
        try:
            if store is not None:
                await store.record_feedback(
                    click.conversation, click.request_id, click.user, click.rating
                )
            log.info(
                "slack: feedback %s on request %s from %s",
                click.rating,
                click.request_id,
                click.user,
            )
        except Exception:
            log.exception("slack: feedback on request %s not stored", click.request_id)
            text = f"{ERROR_ICON} {NOT_STORED}"
        await client.chat_postEphemeral(
            channel=click.channel, user=click.user, thread_ts=click.thread_ts, text=text
        )

    started: list[Callable[..., Any]] = [suggest]
    messages: list[Callable[..., Any]] = [on_message]
    clicks: list[Callable[..., Any]] = [on_feedback]
    assistant.thread_started(lazy=started)(ack_only)
    assistant.thread_context_changed(ack_only)  # the context is not used: nothing to keep
    assistant.user_message(lazy=messages)(accept_message)
    app.assistant(assistant)
    app.action(FEEDBACK_ACTION)(ack=ack_only, lazy=clicks)
