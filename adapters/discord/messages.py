"""``@bot …`` in a channel or thread, and any DM: the same turn as /ask.

The reply goes in place (a reply to the user's message), a typing indicator
shows while the agent works, and the status message is created on the first
progress event.  Each message is recorded as a durable job (see
:mod:`adapters.discord.jobs`) before anything else happens, its id the job's
unique key: a message the gateway replays after a resume finds its job
(answered: dropped; unfinished and no live process on it: resumed).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

import discord

from adapters.chat.intake import process
from adapters.chat.render import CANNOT_TAKE, ERROR_ICON
from adapters.chat.text import strip_mention
from adapters.discord.access import is_admin
from adapters.discord.jobs import KIND as JOB_KIND
from adapters.discord.jobs import message_payload
from adapters.discord.places import channel_ids, conversation_key, role_ids
from core.types import new_request_id

if TYPE_CHECKING:
    from adapters.discord.client import DiscordBot

log = logging.getLogger(__name__)


def _addressed(bot: DiscordBot, message: discord.Message) -> bool:
    if isinstance(message.channel, discord.DMChannel):
        return True
    me = bot.user
    return me is not None and any(u.id == me.id for u in message.mentions)


def _guild_id(message: discord.Message) -> int | None:
    if message.guild is not None:
        return message.guild.id
    return getattr(message.channel, "guild_id", None)


def _permissions(message: discord.Message) -> discord.Permissions | None:
    """The author's permissions in the server (the owner has all), or None
    when the server is not in the cache to compute them from."""
    author = message.author
    if message.guild is None or not isinstance(author, discord.Member):
        return None
    return author.guild_permissions


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
    key = conversation_key(guild_id, channel, channel.id)
    limit = message.guild.filesize_limit if message.guild else bot.config.dm_filesize_limit
    text = strip_mention(message.content, bot.user.id)
    admin = is_admin(
        guild_id, _permissions(message), role_ids(message.author), bot.config.admin_roles
    )
    data = message_payload(message, text, key, limit, is_admin=admin)
    try:
        accepted = await bot.agent.accept(
            JOB_KIND,
            key,
            data,
            request_id=new_request_id(),
            dedup=f"discord:message:{message.id}",
            upload_bytes=sum(a.size for a in message.attachments),
        )
    except Exception:
        log.exception("mention %s could not be recorded", message.id)
        await message.reply(f"{ERROR_ICON} {CANNOT_TAKE}", mention_author=False)
        return
    await process(bot.agent, accepted, f"mention {message.id}")
