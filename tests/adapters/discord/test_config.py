"""DiscordConfig from settings, and the sharding rules."""

from __future__ import annotations

import pytest

from adapters.discord.config import DiscordConfig
from bot.settings import Settings
from core.errors import ConfigError


def test_from_settings_reads_the_discord_fields() -> None:
    settings = Settings(
        _env_file=None,  # type: ignore[call-arg]
        DISCORD_TOKEN="abc",
        discord_dev_guild_ids="1,2",
        discord_shard_ids="0,1",
        discord_shard_count=4,
        discord_allowed_guilds="1",
        discord_denied_roles="9",
        max_attachment_bytes=1234,
    )
    config = DiscordConfig.from_settings(settings)
    assert config.require_token() == "abc"
    assert config.dev_guild_ids == (1, 2)
    assert (config.shard_ids, config.shard_count) == ((0, 1), 4)
    assert config.access.allowed_guilds == {1} and config.access.denied_roles == {9}
    assert config.max_attachment_bytes == 1234
    assert "abc" not in repr(config)


def test_missing_token_and_bad_shards_say_how_to_fix() -> None:
    with pytest.raises(ConfigError, match="DISCORD_BOT_TOKEN"):
        DiscordConfig().require_token()
    with pytest.raises(ConfigError, match="DISCORD_SHARD_COUNT"):
        DiscordConfig(shard_ids=(0,))
    with pytest.raises(ConfigError, match="below"):
        DiscordConfig(shard_ids=(0, 4), shard_count=4)
