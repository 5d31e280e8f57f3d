"""``@bot …`` in a channel or thread, and any DM: the same flow as /ask.

The reply goes in place (a reply to the user's message), a typing indicator
shows while the agent works, and the status message is created on the first
progress event.  Gateway events can be replayed after a resume, so each
message is claimed once through the agent before anything else happens.
"""

from __future__ import annotations

import logging
import re
from typing import TYPE_CHECKING

import discord

from adapters.discord.flow import (
    SORRY,
    channel_ids,
    conversation_key,
    role_ids,
    run_request,
    to_discord_files,
)
from adapters.discord.incoming import check_attachments, download_all
from adapters.discord.render import OutFile
from core.errors import InputRejected
from core.types import Request

if TYPE_CHECKING:
    from adapters.discord.client import DiscordBot

log = logging.getLogger(__name__)


class MessageSurface:
    """Status = a reply to the user's message, edited; answer = replies."""

    def __init__(self, message: discord.Message, upload_limit: int) -> None:
        self._message = message
        self._status: discord.Message | None = None
        self._answered = False
        self.upload_limit = upload_limit

    async def edit_status(self, text: str) -> None:
        if self._status is None:
            self._status = await self._message.reply(text, mention_author=False)
        else:
            await self._status.edit(content=text)

    async def send(self, content: str | None, files: tuple[OutFile, ...]) -> None:
        none = discord.AllowedMentions.none()
        if self._answered:
            await self._message.channel.send(
                content, files=to_discord_files(files), allowed_mentions=none
            )
        else:
            await self._message.reply(content, files=to_discord_files(files), allowed_mentions=none)
            self._answered = True

    async def send_private(self, content: str) -> None:
        # No ephemeral messages outside interactions: answer in place.
        await self._message.reply(content, mention_author=False)


def _addressed(bot: DiscordBot, message: discord.Message) -> bool:
    if isinstance(message.channel, discord.DMChannel):
        return True
    me = bot.user
    return me is not None and any(u.id == me.id for u in message.mentions)


def _guild_id(message: discord.Message) -> int | None:
    if message.guild is not None:
        return message.guild.id
    return getattr(message.channel, "guild_id", None)


def strip_mention(text: str, user_id: int) -> str:
    return re.sub(rf"<@!?{user_id}>", "", text).strip()


async def handle_message(bot: DiscordBot, message: discord.Message) -> None:
    if message.author.bot or bot.user is None or not _addressed(bot, message):
        return
    guild_id = _guild_id(message)
    channel = message.channel
    reason = bot.config.access.refusal(
        guild_id, channel_ids(channel, channel.id), role_ids(message.author)
    )
    if reason:
        log.info("mention %s refused: %s", message.id, reason)
        return  # silently: a denied channel should not hear from the bot at all
    if not await bot.agent.claim_event("discord", f"message:{message.id}"):
        log.info("mention %s seen before; dropped", message.id)
        return
    refusal = check_attachments(message.attachments, bot.config)
    if refusal:
        await message.reply(f"❌ {refusal}", mention_author=False)
        return
    limit = message.guild.filesize_limit if message.guild else bot.config.dm_filesize_limit
    surface = MessageSurface(message, limit)
    async with channel.typing():
        try:
            attachments = await download_all(bot.http_session, message.attachments, bot.config)
        except InputRejected as exc:
            await message.reply(f"❌ {exc}", mention_author=False)
            return
        request = Request(
            conversation=conversation_key(guild_id, channel, channel.id),
            user_id=str(message.author.id),
            text=strip_mention(message.content, bot.user.id),
            attachments=attachments,
            user_name=message.author.display_name,
        )
        try:
            await run_request(bot.agent, surface, request, bot.config)
        except discord.HTTPException:
            log.exception("discord request %s: replying failed", request.request_id)
            await surface.send_private(SORRY.format(rid=request.request_id))
