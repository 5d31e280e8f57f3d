"""The Discord adapter's own settings, built once from :class:`bot.settings.Settings`.

A small frozen dataclass instead of the whole settings object, so tests build
exactly what they need (a fake CDN host, a short status interval) and the
adapter never reads the environment.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from adapters.discord.access import AccessPolicy
from core.errors import ConfigError

if TYPE_CHECKING:
    from bot.settings import Settings

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
    # Largest attachment accepted from a user (checked against the declared size
    # before downloading, and again while streaming).
    max_attachment_bytes: int = 25 * 1024 * 1024
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

    @classmethod
    def from_settings(cls, settings: Settings) -> DiscordConfig:
        token = settings.discord_bot_token
        return cls(
            token=token.get_secret_value() if token is not None else None,
            dev_guild_ids=tuple(settings.discord_dev_guild_ids),
            shard_ids=tuple(settings.discord_shard_ids) if settings.discord_shard_ids else None,
            shard_count=settings.discord_shard_count,
            access=AccessPolicy(
                allowed_guilds=frozenset(settings.discord_allowed_guilds),
                denied_guilds=frozenset(settings.discord_denied_guilds),
                allowed_channels=frozenset(settings.discord_allowed_channels),
                denied_channels=frozenset(settings.discord_denied_channels),
                allowed_roles=frozenset(settings.discord_allowed_roles),
                denied_roles=frozenset(settings.discord_denied_roles),
            ),
            max_attachment_bytes=settings.max_attachment_bytes,
            api_base=settings.discord_api_base,
        )

    def require_token(self) -> str:
        if not self.token:
            raise ConfigError(
                "DISCORD_BOT_TOKEN is not set: create a bot at "
                "https://discord.com/developers/applications and put its token in .env"
            )
        return self.token
