"""Who may use the bot where (allow and deny lists for guilds, channels and
roles), and who is a server admin.

Pure and in-memory, so it runs before the interaction is deferred without
risking the 3-second deadline.  A deny always wins; a non-empty allow list
admits only what is on it.  In a thread, the thread and its parent channel
are both checked, so allowing a channel allows its threads.
"""

from __future__ import annotations

from collections.abc import Iterable, Set
from dataclasses import dataclass, field

import discord


@dataclass(frozen=True, slots=True)
class AccessPolicy:
    allowed_guilds: frozenset[int] = field(default_factory=frozenset)
    denied_guilds: frozenset[int] = field(default_factory=frozenset)
    allowed_channels: frozenset[int] = field(default_factory=frozenset)
    denied_channels: frozenset[int] = field(default_factory=frozenset)
    allowed_roles: frozenset[int] = field(default_factory=frozenset)
    denied_roles: frozenset[int] = field(default_factory=frozenset)

    def refusal(
        self,
        guild_id: int | None,
        channel_ids: Iterable[int],
        role_ids: Iterable[int] = (),
    ) -> str | None:
        """Why this place/person may not use the bot, or None when they may.

        DMs have no guild or roles: they are refused only when a guild or role
        allow list restricts the bot to particular servers or members.
        """
        channels = set(channel_ids)
        roles = set(role_ids)
        if guild_id is None:
            if self.allowed_guilds or self.allowed_roles:
                return "I only work in particular servers, not in direct messages."
        else:
            if guild_id in self.denied_guilds or (
                self.allowed_guilds and guild_id not in self.allowed_guilds
            ):
                return "I'm not enabled in this server."
        if channels & self.denied_channels or (
            self.allowed_channels and not channels & self.allowed_channels
        ):
            return "I'm not enabled in this channel."
        if guild_id is not None:
            if roles & self.denied_roles:
                return "One of your roles is not allowed to use me."
            if self.allowed_roles and not roles & self.allowed_roles:
                return "You need a particular role to use me here."
        return None


def is_admin(
    guild_id: int | None,
    permissions: discord.Permissions | None,
    role_ids: Iterable[int],
    admin_roles: Set[int],
) -> bool:
    """A server admin: Manage Server or Administrator (``permissions``: an
    interaction's resolved ones, or a message author's in the server; None
    when unknown), or a member of a ``DISCORD_ADMIN_ROLES`` role.  Admins are
    exempt from the quotas, see the server's usage and change its settings.
    Nobody is an admin in a DM."""
    if guild_id is None:
        return False
    if permissions is not None and (permissions.administrator or permissions.manage_guild):
        return True
    return not admin_roles.isdisjoint(role_ids)
