"""The Discord adapter's own settings (the composition root, bot/app.py's
``discord_config``, fills them from the bot's settings).

A small frozen dataclass instead of the whole settings object, so tests build
exactly what they need (a fake CDN host, a short status interval) and the
adapter never reads the environment or imports the bot.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from adapters.chat.surface import MONOTONIC, Clock
from adapters.discord.access import AccessPolicy
from core.errors import ConfigError
from core.types import MAX_ATTACHMENT_BYTES

ACCEPT_WITHIN = 2.0  # seconds recording a request may take (Discord's deadline is 3)

DISCORD_CDN_HOSTS = frozenset({"cdn.discordapp.com", "media.discordapp.net"})
DM_FILESIZE_LIMIT = 10 * 1024 * 1024  # uploads in DMs (no guild boost)
MAX_ATTACHMENTS = 3  # /ask has three optional file options; mentions use as many


@dataclass(frozen=True, slots=True)
class DiscordConfig:
    token: str | None = field(default=None, repr=False)
    dev_guild_ids: tuple[int, ...] = ()
    shard_ids: tuple[int, ...] | None = None
    shard_count: int | None = None
    access: AccessPolicy = field(default_factory=AccessPolicy)
    # Members of these roles are admins as Manage Server makes one: /config,
    # /usage server:true, no quotas.
    admin_roles: frozenset[int] = frozenset()
    # Largest attachment accepted from a user (checked against the declared size
    # before downloading, and again while streaming).
    max_attachment_bytes: int = MAX_ATTACHMENT_BYTES
    max_attachments: int = MAX_ATTACHMENTS
    # Attachments are fetched only from these hosts, over these schemes.  Tests
    # add their loopback fake explicitly.
    cdn_hosts: frozenset[str] = DISCORD_CDN_HOSTS
    cdn_schemes: frozenset[str] = frozenset({"https"})
    download_timeout: float = 60.0
    # The status message is edited at most once per this many seconds.
    status_interval: float = 1.0
    dm_filesize_limit: int = DM_FILESIZE_LIMIT
    # Where the REST API lives when not at discord.com (a self-hosted proxy, a
    # test fake): ``http://host:port``; ``/api/v10`` is appended.
    api_base: str | None = None
    # How long recording a request (its job's insert) may take before the
    # person is told it cannot be taken: Discord wants an answer within 3 s.
    # Tests on a loaded machine give it longer.
    accept_within: float = ACCEPT_WITHIN
    # The status pacing's time (tests use a fake clock).
    clock: Clock = field(default=MONOTONIC, compare=False, repr=False)

    def __post_init__(self) -> None:
        if self.shard_ids is not None and self.shard_count is None:
            raise ConfigError(
                "DISCORD_SHARD_IDS needs DISCORD_SHARD_COUNT too (the total number of shards "
                "across all processes), e.g. DISCORD_SHARD_IDS=0,1 DISCORD_SHARD_COUNT=4"
            )
        if self.shard_ids and self.shard_count and max(self.shard_ids) >= self.shard_count:
            raise ConfigError(
                f"DISCORD_SHARD_IDS {list(self.shard_ids)} must be below "
                f"DISCORD_SHARD_COUNT={self.shard_count}"
            )

    def require_token(self) -> str:
        if not self.token:
            raise ConfigError(
                "DISCORD_BOT_TOKEN is not set: create a bot at "
                "https://discord.com/developers/applications and put its token in .env"
            )
        return self.token
