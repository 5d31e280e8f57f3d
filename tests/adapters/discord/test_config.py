"""DiscordConfig's token and sharding rules (bot/app.py maps the settings:
tests/bot/test_adapter_configs.py)."""

from __future__ import annotations

import pytest

from adapters.discord.config import DiscordConfig
from core.errors import ConfigError


def test_missing_token_and_bad_shards_say_how_to_fix() -> None:
    with pytest.raises(ConfigError, match="DISCORD_BOT_TOKEN"):
        DiscordConfig().require_token()
    with pytest.raises(ConfigError, match="DISCORD_SHARD_COUNT"):
        DiscordConfig(shard_ids=(0,))
    with pytest.raises(ConfigError, match="below"):
        DiscordConfig(shard_ids=(0, 4), shard_count=4)
