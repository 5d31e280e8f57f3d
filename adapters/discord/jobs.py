"""Discord requests as durable jobs (see :mod:`core.jobs`).

``/ask`` and mentions record a job before they acknowledge the request; its
payload is everything a process needs to answer it over REST alone: the
interaction's application id, token and its expiry, or the message's id; the
channel, the person, the text, and the attachments as CDN references (the
bytes are downloaded when the job runs, so queued jobs hold no files); for
``/plan`` → Run and Run again, the approved plan, which runs as it is.

:class:`DiscordRunner` rebuilds the request from a payload in whichever
process claims the job and runs the shared turn on a
:class:`~adapters.discord.surface.DiscordSurface`.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Annotated, Any, Literal

import discord
from pydantic import Field, TypeAdapter

from adapters.chat import run_turn
from adapters.discord.incoming import download_each, refusal
from adapters.discord.places import conversation_key
from adapters.discord.posted import FollowupLookup
from adapters.discord.surface import MESSAGE_LIMIT, RENDERER, TOKEN_LIFETIME, DiscordSurface
from core.errors import RunFailed
from core.types import ConversationKey, Job, Notice, PlannedStep, Request

if TYPE_CHECKING:
    from adapters.discord.client import DiscordBot

log = logging.getLogger(__name__)

KIND = "discord"


@dataclass(frozen=True, slots=True)
class AttachmentRef:
    """A user's attachment as the job keeps it (satisfies ``AttachmentLike``)."""

    filename: str
    size: int
    url: str
    content_type: str | None


@dataclass(frozen=True, slots=True, kw_only=True)
class _Asked:
    """What every Discord job's payload holds: where, who, what."""

    channel_id: str
    guild_id: str | None
    key: tuple[str, str, str, str | None]  # the ConversationKey's fields
    user_id: str
    user_name: str | None = None
    is_admin: bool = False
    text: str = ""
    files: tuple[AttachmentRef, ...] = ()  # CDN references: downloaded when the job runs
    upload_limit: int | None = None  # the largest file the answer may post


@dataclass(frozen=True, slots=True, kw_only=True)
class InteractionPayload(_Asked):
    """``/ask``, ``/plan`` → Run, Run again: answered through the interaction's
    webhook while its token lives."""

    via: Literal["interaction"] = "interaction"
    app_id: str
    interaction_id: str
    token: str
    token_expires: datetime
    plan: tuple[PlannedStep, ...] | None = None  # approved: runs as it is, no planning


@dataclass(frozen=True, slots=True, kw_only=True)
class MessagePayload(_Asked):
    """A mention: answered in the channel, replying to the person's message."""

    via: Literal["message"] = "message"
    message_id: str


Payload = InteractionPayload | MessagePayload
# A job's payload as stored (JSON); ``via`` says which.  Payloads stored by
# earlier versions load too: the same names, and what they lacked has a default.
# Built at import, not on the first request.
PAYLOAD: TypeAdapter[Payload] = TypeAdapter(Annotated[Payload, Field(discriminator="via")])


def _refs(attachments: list[Any]) -> tuple[AttachmentRef, ...]:
    return tuple(AttachmentRef(a.filename, a.size, a.url, a.content_type) for a in attachments)


def _key(key: ConversationKey) -> tuple[str, str, str, str | None]:
    return (key.platform, key.scope, key.channel, key.thread)


def _stored(payload: Payload) -> dict[str, Any]:
    data: dict[str, Any] = PAYLOAD.dump_python(payload, mode="json")
    return data


def interaction_payload(
    interaction: discord.Interaction[DiscordBot],
    text: str,
    attachments: list[Any],
    *,
    is_admin: bool = False,
    plan: Sequence[PlannedStep] | None = None,
) -> dict[str, Any]:
    """``plan``: an approved plan (``/plan`` → Run, Run again) to run as it is."""
    created = discord.utils.snowflake_time(interaction.id)
    channel_id = interaction.channel_id or 0
    return _stored(
        InteractionPayload(
            app_id=str(interaction.application_id),
            interaction_id=str(interaction.id),
            token=interaction.token,
            token_expires=created + TOKEN_LIFETIME,
            channel_id=str(channel_id),
            guild_id=str(interaction.guild_id) if interaction.guild_id else None,
            key=_key(conversation_key(interaction.guild_id, interaction.channel, channel_id)),
            user_id=str(interaction.user.id),
            user_name=interaction.user.display_name,
            is_admin=is_admin,
            text=text,
            files=_refs(attachments),
            upload_limit=interaction.filesize_limit,
            plan=None if plan is None else tuple(plan),
        )
    )


def message_payload(
    message: discord.Message,
    text: str,
    key: ConversationKey,
    upload_limit: int,
    *,
    is_admin: bool = False,
) -> dict[str, Any]:
    return _stored(
        MessagePayload(
            message_id=str(message.id),
            channel_id=str(message.channel.id),
            guild_id=str(message.guild.id) if message.guild else None,
            key=_key(key),
            user_id=str(message.author.id),
            user_name=message.author.display_name,
            is_admin=is_admin,
            text=text,
            files=_refs(list(message.attachments)),
            upload_limit=upload_limit,
        )
    )


class DiscordRunner:
    """Runs ``discord`` jobs: the turn, the queue notices, the restart notice."""

    def __init__(self, bot: DiscordBot) -> None:
        self.bot = bot
        self.lookup = FollowupLookup()  # finds a resumed /ask's follow-ups Discord has

    async def run(self, job: Job) -> None:
        bot = self.bot
        p = PAYLOAD.validate_python(job.payload)
        refs = list(p.files)

        async def request() -> Request:
            refused = refusal(refs, bot.config)
            if refused is not None:
                raise refused
            stored = job.inputs_stored  # a resumed job has its files already
            attachments = () if stored else await download_each(bot.http_session, refs, bot.config)
            return Request(
                conversation=ConversationKey(*p.key),
                user_id=p.user_id,
                text=p.text,
                attachments=attachments,
                request_id=job.request_id,
                user_name=p.user_name,
                is_admin=p.is_admin,
                # /plan → Run, Run again: the approved plan, no planning
                plan=p.plan if isinstance(p, InteractionPayload) else None,
            )

        async with contextlib.AsyncExitStack() as stack:
            if isinstance(p, MessagePayload):  # a mention shows "typing…" while it works
                channel = bot.get_partial_messageable(int(p.channel_id))
                await stack.enter_async_context(channel.typing())
            await run_turn(
                bot.agent,
                DiscordSurface(bot, job, self.lookup),
                RENDERER,
                request,
                request_id=job.request_id,
                job=job,
                downloading=bool(refs) and not job.inputs_stored,
                clock=bot.config.clock,
            )

    async def notify(self, job: Job, notice: Notice) -> None:
        await DiscordSurface(self.bot, job).edit_status(RENDERER.notice(notice, MESSAGE_LIMIT))

    async def give_up(self, job: Job, failure: RunFailed) -> None:
        await DiscordSurface(self.bot, job).edit_status(RENDERER.failed(failure, (), MESSAGE_LIMIT))
