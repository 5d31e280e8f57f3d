"""Discord as a :class:`~adapters.chat.surface.Surface`: a job's status message
and answer over REST alone, from the job's payload, in whichever process
runs it.

An interaction is answered through its webhook (the deferred "thinking…"
message is the status message, the answer its follow-ups) while its token
is young enough: each call looks at the token's age on the job's clock
(15 minutes, less a margin), so a run that outlives it switches over
mid-turn.  After that, or if Discord no longer knows the interaction, the
status message (the interaction's own, which the bot may edit as its
author) is edited through the channel and the answer is a channel message
that replies to it and mentions the person.  A mention is answered with
replies to the person's message.  The status message is remembered on the
job, so a resumed job edits the one its last process left; so is each
message of the answer the moment Discord has it (``Posted.answer``,
their ids), so a job resumed after its process died mid-answer (or after
the answer, before the job was done) posts only the rest, never an answer
twice.  A message Discord made just before the process died, unrecorded, is
not made again either (:mod:`adapters.discord.posted`): channel messages
carry a nonce Discord enforces, and a resumed ``/ask`` finds its follow-up
in the channel before posting it.

The last message of an answer carries the buttons (:mod:`adapters.discord.buttons`):
run again, details, delete.
"""

from __future__ import annotations

import io
import logging
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

import discord

from adapters.chat import Limits, Markup, OutFile, Renderer
from adapters.chat.files import answer_messages
from adapters.discord.posted import FollowupLookup, part_nonce
from core.types import Job, Posted, Resource

MessageId = int

if TYPE_CHECKING:
    from adapters.discord.client import DiscordBot

log = logging.getLogger(__name__)

MESSAGE_LIMIT = 2000
FILES_PER_MESSAGE = 10
TOKEN_LIFETIME = timedelta(minutes=15)
TOKEN_MARGIN = timedelta(seconds=30)  # don't start on a token about to expire


def _code(text: str) -> str:
    return f"``{text}``" if "`" in text else f"`{text}`"


MARKUP = Markup(bold=lambda text: f"**{text}**", code=_code)
RENDERER = Renderer(MARKUP)


def to_discord_files(files: Sequence[OutFile]) -> list[discord.File]:
    return [discord.File(io.BytesIO(f.data), filename=f.name) for f in files]


def interaction_webhook(bot: DiscordBot, app_id: int, token: str) -> discord.Webhook:
    """An interaction's webhook (its ``@original`` response and follow-ups)
    from the application id and token a job stored, as
    ``Interaction.followup`` is.  ``Webhook.partial`` makes an incoming
    webhook; an interaction's is the application's, which is what lets
    ``send`` post ephemeral messages."""
    hook = discord.Webhook.partial(app_id, token, client=bot)
    hook.type = discord.WebhookType.application
    return hook


class DiscordSurface:
    """See the module docstring."""

    def __init__(self, bot: DiscordBot, job: Job, lookup: FollowupLookup | None = None) -> None:
        p = job.payload
        self._job = job
        self._lookup = lookup or FollowupLookup()
        self._bot = bot
        self._payload = p
        upload_limit = int(p.get("upload_limit") or bot.config.dm_filesize_limit)
        self._limits = Limits(
            MESSAGE_LIMIT, upload_limit, FILES_PER_MESSAGE, bot.config.status_interval
        )
        self._channel = bot.get_partial_messageable(int(p["channel_id"]))
        self._user = int(p["user_id"])
        self._status_id: MessageId | None = None
        ref = Posted.of(job)
        self._status_id = ref.message_id or None
        self._webhook: discord.Webhook | None = None
        self._expires: datetime | None = None
        if p["via"] == "interaction" and not ref.channel:
            self._expires = datetime.fromisoformat(p["token_expires"])
            self._webhook = interaction_webhook(bot, int(p["app_id"]), p["token"])
        # the answer's messages so far (an earlier attempt's, on a resumed job)
        self._sent: list[MessageId] = list(ref.answer)

    @property
    def limits(self) -> Limits:
        return self._limits

    @property
    def via_webhook(self) -> bool:
        return self._webhook is not None

    @property
    def _mention(self) -> str:
        return f"<@{self._user}>"

    def _users(self) -> discord.AllowedMentions:
        return discord.AllowedMentions(
            everyone=False, roles=False, users=[discord.Object(self._user)]
        )

    def _asked(self) -> discord.PartialMessage:
        """The person's own message (for a mention)."""
        return self._channel.get_partial_message(int(self._payload["message_id"]))

    async def _hook(self) -> discord.Webhook | None:
        """The interaction's webhook while its token is young enough to use
        (decided by its age on the job's clock, at every call)."""
        if self._webhook is None or self._expires is None:
            return None
        if self._job.now() < self._expires - TOKEN_MARGIN:
            # this process may still be deferring it: nothing goes before the defer
            await self._bot.deferred(self._payload["interaction_id"])
            return self._webhook
        log.info(
            "job %s: the interaction token expires at %s; answering in the channel",
            self._job.id,
            self._expires.isoformat(),
        )
        await self._to_channel(keep_status=True)
        return None

    async def _to_channel(self, *, keep_status: bool) -> None:
        """From now on, answer with channel messages (``keep_status``: the
        interaction's message is still there, edited through the channel)."""
        self._webhook = None
        if not keep_status:
            self._status_id = None
        # the answer's messages so far stay recorded
        ref = Posted.of(self._job).model_copy(
            update={"channel": True, "message_id": self._status_id}
        )
        await ref.save(self._job)

    async def _lost_webhook(self, exc: discord.HTTPException) -> None:
        """Discord no longer knows the interaction: answer in the channel."""
        log.info(
            "job %s: the interaction is gone (%s); answering in the channel", self._job.id, exc
        )
        await self._to_channel(keep_status=False)

    async def _remember_status(self, message_id: MessageId) -> None:
        if message_id != self._status_id:
            self._status_id = message_id
            await Posted.of(self._job).model_copy(update={"message_id": message_id}).save(self._job)

    async def post_status(self, text: str) -> None:
        await self.edit_status(text)

    async def edit_status(self, text: str) -> None:
        hook = await self._hook()
        if hook is not None:
            try:
                message = await hook.edit_message("@original", content=text)  # type: ignore[call-overload]
                await self._remember_status(message.id)
                return
            except discord.NotFound as exc:
                await self._lost_webhook(exc)
        if self._status_id is not None:
            try:
                await self._channel.get_partial_message(self._status_id).edit(content=text)
                return
            except (discord.NotFound, discord.Forbidden) as exc:  # deleted, or not ours to edit
                log.info("job %s: status message %s gone (%s)", self._job.id, self._status_id, exc)
                self._status_id = None
        if self._payload["via"] == "message":
            status = await self._asked().reply(text, mention_author=False)
        else:  # the interaction's own message is out of reach: a new one, to the person
            status = await self._channel.send(
                f"{self._mention} {text}", allowed_mentions=self._users()
            )
        await self._remember_status(status.id)

    async def post_answer(self, text: str, files: Sequence[Resource]) -> None:
        from adapters.discord.buttons import answer_view  # buttons import this module

        agent, rid = self._bot.agent, self._job.request_id
        messages = await answer_messages(agent, RENDERER, text, files, self.limits, rid)
        # Each message is recorded on the job as soon as Discord has it: a job
        # resumed after its process died mid-answer posts only the rest.
        done = len(self._sent)
        for i, message in enumerate(messages):
            if i < done:
                continue
            made = await self._made_before(message.text, len(message.files)) if i == done else None
            if made is None:
                view = None
                if i == len(messages) - 1:
                    earlier = [self._status_id] if self._status_id is not None else []
                    view = answer_view(rid, self._user, [*earlier, *self._sent])
                made = await self._send(i + 1, message.text, message.files, view)
            self._sent.append(made)
            ref = Posted.of(self._job).model_copy(update={"answer": list(self._sent)})
            await ref.save(self._job)
        if done:
            log.info(
                "discord request %s: %d of %d answer messages were posted before a restart",
                rid,
                min(done, len(messages)),
                len(messages),
            )

    async def _made_before(self, content: str | None, files: int) -> MessageId | None:
        """A resumed /ask: the follow-up its last process made for the first
        part it did not record, if Discord has it (a channel message needs no
        look-up: its nonce makes a repeat return it)."""
        p = self._payload
        if not self._job.resumed or p["via"] != "interaction":
            return None
        interaction = int(p["interaction_id"])
        skip = {*self._sent, *([self._status_id] if self._status_id is not None else [])}
        found = await self._lookup.find(
            self._channel,
            interaction_id=interaction,
            after=self._sent[-1] if self._sent else interaction,
            skip=skip,
            content=content or "",
            files=files,
        )
        if found is not None:
            log.info(
                "discord request %s: answer message %s was posted before a restart",
                self._job.request_id,
                found,
            )
        return found

    async def _send(
        self,
        part: int,
        content: str | None,
        files: Sequence[OutFile],
        view: discord.ui.View | None,
    ) -> MessageId:
        none = discord.AllowedMentions.none()
        nonce = part_nonce(self._job.request_id, part)  # a repeat returns the first
        hook = await self._hook()
        if hook is not None:
            try:
                sent = await hook.send(
                    content=content or discord.utils.MISSING,
                    files=to_discord_files(files) or discord.utils.MISSING,
                    allowed_mentions=none,
                    view=view or discord.utils.MISSING,
                    wait=True,
                )
                return sent.id
            except discord.NotFound as exc:
                await self._lost_webhook(exc)
        extra: dict[str, Any] = {"view": view} if view is not None else {}
        extra["nonce"] = nonce
        if self._sent:  # the rest of an answer follows its first message
            message = await self._channel.send(
                content, files=to_discord_files(files), allowed_mentions=none, **extra
            )
        elif self._payload["via"] == "message":
            message = await self._asked().reply(
                content, files=to_discord_files(files), allowed_mentions=none, **extra
            )
        else:  # to the person, in reply to the interaction's message where it still is
            head = f"{self._mention} {content}" if content else self._mention
            if self._status_id is not None:
                extra["reference"] = self._channel.get_partial_message(
                    self._status_id
                ).to_reference(fail_if_not_exists=False)
            message = await self._channel.send(
                head, files=to_discord_files(files), allowed_mentions=self._users(), **extra
            )
        return message.id

    async def tell_privately(self, text: str) -> None:
        hook = await self._hook()
        if hook is not None:
            try:
                await hook.send(text, ephemeral=True)
                return
            except discord.NotFound as exc:
                await self._lost_webhook(exc)
        if self._payload["via"] == "message":
            await self._asked().reply(text, mention_author=False)
        else:
            await self._channel.send(f"{self._mention} {text}", allowed_mentions=self._users())
