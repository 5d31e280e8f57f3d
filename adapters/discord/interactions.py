"""What every interaction handler (slash command or button) shares: the bot,
the conversation, whether the person is an admin, the access lists, and the two ways to
answer (privately, or by resolving a deferred response).

Every handler is typed ``discord.Interaction[DiscordBot]``, so
``interaction.client`` is the bot and its agent without a cast.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, TypeAlias, TypeGuard

import discord

from adapters.chat.intake import process
from adapters.chat.render import ERROR_ICON
from adapters.chat.text import split_text
from adapters.discord.access import is_admin
from adapters.discord.places import channel_ids, conversation_key, role_ids
from adapters.discord.surface import MESSAGE_LIMIT
from core.types import Accepted, ConversationKey

if TYPE_CHECKING:
    from adapters.discord.client import DiscordBot

log = logging.getLogger(__name__)

Inter: TypeAlias = "discord.Interaction[DiscordBot]"

EPHEMERAL_VIEW_TIMEOUT = 15 * 60.0


def ours(interaction: discord.Interaction[discord.Client]) -> TypeGuard[Inter]:
    """Narrow an interaction from discord.py's generic signatures (buttons) to ours."""
    from adapters.discord.client import DiscordBot  # the client imports this module

    return isinstance(interaction.client, DiscordBot)


def conversation_of(interaction: Inter) -> ConversationKey:
    channel_id = interaction.channel_id or 0
    return conversation_key(interaction.guild_id, interaction.channel, channel_id)


def asked_by_admin(interaction: Inter) -> bool:
    """The person interacting is a server admin (:func:`~adapters.discord.access.is_admin`,
    on the permissions the interaction resolved)."""
    return is_admin(
        interaction.guild_id,
        interaction.permissions,
        role_ids(interaction.user),
        interaction.client.config.admin_roles,
    )


def access_refusal(interaction: Inter) -> str | None:
    """Why this person may not use the bot here (the access lists), or None."""
    channel_id = interaction.channel_id or 0
    return interaction.client.config.access.refusal(
        interaction.guild_id,
        channel_ids(interaction.channel, channel_id),
        role_ids(interaction.user),
    )


async def refuse(interaction: Inter, text: str) -> None:
    """A short message only the user sees, whatever state the interaction is in."""
    if not interaction.response.is_done():
        await interaction.response.send_message(f"{ERROR_ICON} {text}", ephemeral=True)
        return
    if interaction.is_expired():
        return
    if interaction.response.type is discord.InteractionResponseType.deferred_channel_message:
        # A "thinking…" would linger: remove it, then answer privately.
        try:
            await interaction.delete_original_response()
        except discord.HTTPException:
            log.debug("could not delete the original response", exc_info=True)
    await interaction.followup.send(f"{ERROR_ICON} {text}", ephemeral=True)


async def defer_and_process(interaction: Inter, accepted: Accepted, what: str) -> None:
    """Acknowledge a recorded request ("thinking…") and run its job here.

    The job is asked for at once, so its turn (the store, the planning call)
    starts while the defer is in flight; the job's surface posts nothing to
    the interaction before the defer is over (:meth:`DiscordBot.deferred`),
    so no reply beats its defer.  A failed defer reaches the tree's error
    handler, as before; its job answers in the channel (the interaction's
    webhook has no message to edit)."""
    bot = interaction.client
    key = str(interaction.id)
    deferring = asyncio.ensure_future(interaction.response.defer(thinking=True))
    bot.deferring[key] = deferring
    try:
        await process(bot.agent, accepted, what)
    finally:
        if not deferring.done():
            await asyncio.wait([deferring])
        bot.deferring.pop(key, None)
    await deferring  # its failure, if it failed


async def send_chunks(
    interaction: Inter, text: str, view: discord.ui.View | None = None
) -> discord.InteractionMessage:
    """Resolve a deferred interaction with ``text`` (split if long; ``view``
    on the last message); the first message."""
    chunks = split_text(text, MESSAGE_LIMIT) or ["(nothing to show)"]
    last = len(chunks) - 1
    first = await interaction.edit_original_response(
        content=chunks[0], view=view if last == 0 and view is not None else None
    )
    none = discord.AllowedMentions.none()
    for i, chunk in enumerate(chunks[1:], start=1):
        if i == last and view is not None:
            await interaction.followup.send(chunk, allowed_mentions=none, view=view)
        else:
            await interaction.followup.send(chunk, allowed_mentions=none)
    return first


async def tell(interaction: Inter, text: str) -> None:
    """Answer privately (ephemeral), split if long, deferred or not."""
    chunks = split_text(text, MESSAGE_LIMIT) or ["(nothing to show)"]
    for i, chunk in enumerate(chunks):
        if i == 0 and not interaction.response.is_done():
            await interaction.response.send_message(chunk, ephemeral=True)
        else:
            await interaction.followup.send(chunk, ephemeral=True)
