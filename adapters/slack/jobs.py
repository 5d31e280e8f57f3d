"""Slack requests as durable jobs (see :mod:`core.jobs`).

The ack path records the event as a job (:func:`payload` is everything the
job needs: the event's channel, thread, user, text and file references, not
the files' bytes, which are downloaded when the job runs; whether it came
from an assistant thread); the event id is the job's unique key, so a
redelivery finds its job.  :class:`SlackRunner` turns a stored payload back
into a turn in the original thread, from any process: a resumed job edits
the status message its last process left, or, in an assistant thread,
streams its answer again there (:mod:`adapters.slack.assistant`).
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

from pydantic import TypeAdapter
from slack_sdk.web.async_client import AsyncWebClient

from adapters.chat import run_turn
from adapters.chat.text import shorten
from adapters.slack import assistant
from adapters.slack.assistant import AssistantSurface, Features
from adapters.slack.config import SlackConfig
from adapters.slack.files import download_files
from adapters.slack.mrkdwn import MESSAGE_LIMIT, RENDERER
from adapters.slack.posted import PostLookup
from adapters.slack.surface import SlackSurface
from core.errors import RunFailed
from core.media_files import sniff_mime
from core.types import AgentAPI, ConversationKey, Job, Notice, Posted, Request

log = logging.getLogger(__name__)

KIND = "slack"
TITLED_THREADS = 4096  # assistant threads whose title this process set (most recent)


@dataclass(frozen=True, slots=True)
class Incoming:
    """What a listener read from a Slack event; stored as the job's payload
    (:data:`PAYLOAD`)."""

    team: str
    channel: str
    user: str
    text: str
    ts: str
    thread_ts: str | None  # the thread to answer in (None: the channel itself)
    files: tuple[dict[str, Any], ...] = ()  # Slack's file objects
    event_id: str | None = None
    assistant: bool = False  # in an assistant thread (the app's own chat)

    @property
    def key(self) -> ConversationKey:
        return ConversationKey("slack", self.team, self.channel, self.thread_ts)

    @property
    def title(self) -> str:
        """What the request is about, in a line (an assistant thread's title)."""
        names = ", ".join(str(f.get("name") or "file") for f in self.files)
        return shorten(" ".join(self.text.split()) or names or "A request", 80)


# A job's payload as stored (JSON): the event as the listener read it.
# Payloads stored by earlier versions load too: the same names, and what they
# lacked (``assistant``) has a default.  Built at import, not on the first ack.
PAYLOAD: TypeAdapter[Incoming] = TypeAdapter(Incoming)


def payload(incoming: Incoming) -> dict[str, Any]:
    data: dict[str, Any] = PAYLOAD.dump_python(incoming, mode="json")
    return data


def incoming_of(data: dict[str, Any]) -> Incoming:
    return PAYLOAD.validate_python(data)


def dedup_key(event_id: str | None) -> str | None:
    return f"slack:{event_id}" if event_id else None


class SlackRunner:
    """Runs ``slack`` jobs: the turn, the queue notices, the restart notice.

    A job from an assistant thread runs on the AI-app surface
    (:class:`~adapters.slack.assistant.AssistantSurface`) unless its workspace
    has shown it lacks it, or the job already has a status message (it fell
    back before a restart); every other job on a status message.
    """

    def __init__(self, agent: AgentAPI, client: AsyncWebClient, config: SlackConfig) -> None:
        self.agent = agent
        self.client = client
        self.config = config
        self.features = Features()
        self.lookup = PostLookup()  # finds a resumed job's posts Slack already has
        self._titled: OrderedDict[tuple[str, str], None] = OrderedDict()

    def surface(self, job: Job, *, titled: bool = False) -> SlackSurface | AssistantSurface:
        """Where ``job`` shows (``titled``: its turn starts, and may name the thread)."""
        incoming = incoming_of(job.payload)
        thread = incoming.thread_ts
        if (
            incoming.assistant
            and thread is not None
            and not self.features.lacking(incoming.team)
            and Posted.of(job).ts is None  # no status message to go on in
        ):
            return AssistantSurface(
                self.agent,
                self.client,
                self.config,
                team=incoming.team,
                channel=incoming.channel,
                thread_ts=thread,
                user=incoming.user,
                features=self.features,
                job=job,
                title=self._title(incoming, thread) if titled else None,
                lookup=self.lookup,
            )
        return SlackSurface(
            self.agent,
            self.client,
            self.config,
            channel=incoming.channel,
            thread_ts=thread,
            user=incoming.user,
            job=job,
            lookup=self.lookup,
        )

    def _title(self, incoming: Incoming, thread: str) -> str | None:
        """The thread's title from its first request this process sees (a
        later request in the thread keeps it)."""
        key = (incoming.channel, thread)
        if key in self._titled:
            self._titled.move_to_end(key)
            return None
        self._titled[key] = None
        while len(self._titled) > TITLED_THREADS:
            self._titled.popitem(last=False)
        return incoming.title

    async def run(self, job: Job) -> None:
        incoming = incoming_of(job.payload)
        log.info(
            "slack request %s: event %s from %s in %s",
            job.request_id,
            incoming.event_id,
            incoming.user,
            incoming.key,
        )
        stored = job.inputs_stored  # a resumed job has its files already

        async def request() -> Request:
            attachments = (
                () if stored else await download_files(incoming.files, self.config, sniff_mime)
            )
            return Request(
                conversation=incoming.key,
                user_id=incoming.user,
                text=incoming.text,
                attachments=attachments,
                request_id=job.request_id,
                is_admin=self.config.is_admin(incoming.user),
            )

        surface = self.surface(job, titled=True)
        await run_turn(
            self.agent,
            surface,
            assistant.RENDERER if isinstance(surface, AssistantSurface) else RENDERER,
            request,
            request_id=job.request_id,
            job=job,
            downloading=bool(incoming.files) and not stored,
            clock=self.config.clock,
        )

    async def notify(self, job: Job, notice: Notice) -> None:
        surface = self.surface(job)
        text = RENDERER.notice(notice, MESSAGE_LIMIT)
        if isinstance(surface, AssistantSurface):
            await surface.notice(notice, text)
        else:
            await surface.edit_status(text)

    async def give_up(self, job: Job, failure: RunFailed) -> None:
        incoming = incoming_of(job.payload)
        surface = SlackSurface(  # a message in the thread, in any kind of thread
            self.agent,
            self.client,
            self.config,
            channel=incoming.channel,
            thread_ts=incoming.thread_ts,
            user=incoming.user,
            job=job,
        )
        await surface.edit_status(RENDERER.failed(failure, (), MESSAGE_LIMIT))
