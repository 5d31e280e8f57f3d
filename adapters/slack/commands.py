"""Message commands: ``usage`` and ``config``, typed to the bot.

Slack has no slash commands in threads or the app's chat, so the admin
commands are messages — ``@bot usage [7d]`` in a channel, or just ``usage``
in a DM or the app's own chat::

    usage [PERIOD]                your usage in this workspace (PERIOD: 12h, 7d, 2w, a date)
    usage server [PERIOD]         the whole workspace's (admins)
    config [show]                 the workspace's own settings
    config set KEY VALUE          change one (admins)
    config unset KEY              back to the bot's own setting (admins)

Admins are the Slack user ids in ``SLACK_ADMIN_USERS`` (Slack's events do
not say who is a workspace admin).  A message that only *starts* with one
of these words ("usage of transformers in NLP?") is a request like any
other: :func:`parse` takes a message as a command only when all of it fits.
Commands are answered at once, not queued as jobs; a redelivered event is
answered once (the event id is claimed).  In a channel the answer is
private (ephemeral); in a DM or the app's chat it is a reply in the thread.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass
from enum import StrEnum

from slack_sdk.web.async_client import AsyncWebClient

from adapters.chat.messages import error_text
from adapters.chat.render import ERROR_ICON
from adapters.chat.reports import settings as settings_text
from adapters.chat.reports import usage as usage_text
from adapters.chat.text import split_text
from adapters.slack.config import SlackConfig
from adapters.slack.jobs import Incoming
from adapters.slack.mrkdwn import MARKUP, MESSAGE_LIMIT
from core.errors import InputRejected
from core.types import AgentAPI

log = logging.getLogger(__name__)

CLAIM_SOURCE = "slack-command"
_PERIOD = re.compile(r"^(\d+\s*[a-z]*|\d{4}-\d{2}-\d{2}(?:[t ][\d:]+)?)$", re.IGNORECASE)
_SERVER_WORDS = frozenset({"server", "workspace", "all", "team"})
HELP = (
    "*Commands*\n"
    "`usage [7d]` — what you used in this workspace (`usage server [7d]`: everyone's, admins)\n"
    "`config` — this workspace's own settings; admins: `config set KEY VALUE`, "
    "`config unset KEY`"
)


class Action(StrEnum):
    USAGE = "usage"
    SHOW = "show"
    SET = "set"
    UNSET = "unset"
    HELP = "help"


@dataclass(frozen=True, slots=True)
class Command:
    action: Action
    server_wide: bool = False
    since: str | None = None
    key: str | None = None
    value: str | None = None


def parse(text: str) -> Command | None:
    """The command ``text`` is, or None when it is a request for the model."""
    words = text.split()
    if not words:
        return None
    head, rest = words[0].lower(), words[1:]
    if head == "usage":
        return _usage(rest)
    if head == "config":
        return _config(text.split(None, 3)[1:])
    return None


def _usage(rest: list[str]) -> Command | None:
    server_wide, since = False, None
    for word in rest:
        if word.lower() in _SERVER_WORDS and not server_wide:
            server_wide = True
        elif _PERIOD.match(word) and since is None:
            since = word
        else:
            return None  # "usage of …": a request
    return Command(Action.USAGE, server_wide=server_wide, since=since)


def _config(rest: list[str]) -> Command | None:
    if not rest or (rest[0].lower() == "show" and len(rest) == 1):
        return Command(Action.SHOW)
    verb = rest[0].lower()
    if verb == "set":
        if len(rest) < 3:
            return Command(Action.HELP)
        return Command(Action.SET, key=rest[1], value=rest[2].strip())
    if verb == "unset":
        if len(rest) != 2:
            return Command(Action.HELP)
        return Command(Action.UNSET, key=rest[1])
    if verb == "help" and len(rest) == 1:
        return Command(Action.HELP)
    return None  # "config files in Linux?": a request


async def answer(
    text: str, command: Command, agent: AgentAPI, incoming: Incoming, admin: bool
) -> str:
    """The command's answer in mrkdwn (a refusal starts with ❌)."""
    key = incoming.key
    try:
        if command.action is Action.USAGE:
            report = await agent.usage(
                key,
                incoming.user,
                server_wide=command.server_wide,
                is_admin=admin,
                since=command.since,
            )
            return usage_text(report, MARKUP)
        if command.action is Action.SHOW:
            return settings_text(await agent.settings(key), MARKUP)
        if command.action in (Action.SET, Action.UNSET):
            assert command.key is not None
            values = await agent.configure(
                key,
                command.key,
                command.value if command.action is Action.SET else None,
                user_id=incoming.user,
                is_admin=admin,
            )
            log.info(
                "slack: %s %s %s in %s", incoming.user, command.action, command.key, incoming.team
            )
            return settings_text(values, MARKUP, changed=command.key)
    except InputRejected as e:
        log.info("slack: %r from %s refused: %s", text, incoming.user, e)
        return f"{ERROR_ICON} {MARKUP.escape(error_text(e))}"
    return HELP


async def run(
    agent: AgentAPI,
    client: AsyncWebClient,
    config: SlackConfig,
    incoming: Incoming,
    command: Command,
) -> None:
    """Answer ``command`` where it was typed (once per event)."""
    if incoming.event_id and not await agent.claim_event(CLAIM_SOURCE, incoming.event_id):
        log.info("slack: command event %s was answered before; dropped", incoming.event_id)
        return
    admin = config.is_admin(incoming.user)
    text = await answer(incoming.text, command, agent, incoming, admin)
    private = not incoming.channel.startswith("D")  # a channel: only the person sees it
    for part in split_text(text, MESSAGE_LIMIT):
        if private:
            await client.chat_postEphemeral(
                channel=incoming.channel,
                user=incoming.user,
                thread_ts=incoming.thread_ts,
                text=part,
            )
        else:
            await client.chat_postMessage(
                channel=incoming.channel, thread_ts=incoming.thread_ts, text=part, mrkdwn=True
            )
