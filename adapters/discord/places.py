"""Where a Discord request was asked: its conversation key, and the ids the
access lists are checked against."""

from __future__ import annotations

import discord

from core.types import ConversationKey


def conversation_key(guild_id: int | None, channel: object, channel_id: int) -> ConversationKey:
    """("discord", guild or "dm", channel, thread): a thread is keyed under its
    parent channel so the core can show it the parent's files."""
    scope = str(guild_id) if guild_id else "dm"
    if isinstance(channel, discord.Thread) and channel.parent_id:
        return ConversationKey("discord", scope, str(channel.parent_id), str(channel.id))
    return ConversationKey("discord", scope, str(channel_id), None)


def channel_ids(channel: object, channel_id: int) -> list[int]:
    """The channel and, for a thread, its parent (for access checks)."""
    ids = [channel_id]
    if isinstance(channel, discord.Thread) and channel.parent_id:
        ids.append(channel.parent_id)
    return ids


def role_ids(user: object) -> tuple[int, ...]:
    """The member's role ids.  ``Member.roles`` drops roles missing from the
    guild cache (always, for a guild we only know from an interaction), so
    read the ids the payload carried; a ``User`` (DMs) has none."""
    return tuple(getattr(user, "_roles", ()))
