"""bot/app.py maps the settings to each adapter's config (adapters never read
the bot's settings): every field arrives, secrets stay out of reprs, and a
missing token is a ConfigError naming what to set."""

from __future__ import annotations

import pytest

from adapters.slack import SlackConfig
from bot.app import discord_config, slack_config
from bot.settings import Settings
from core.errors import ConfigError


def settings(**values: object) -> Settings:
    return Settings(_env_file=None, **values)  # type: ignore[call-arg]


def test_discord_config_reads_the_discord_fields() -> None:
    config = discord_config(
        settings(
            DISCORD_TOKEN="abc",
            discord_dev_guild_ids="1,2",
            discord_shard_ids="0,1",
            discord_shard_count=4,
            discord_allowed_guilds="1",
            discord_denied_channels="7",
            discord_denied_roles="9",
            discord_admin_roles="3",
            max_attachment_bytes=1234,
            discord_api_base="http://127.0.0.1:1",
        )
    )
    assert config.require_token() == "abc"
    assert config.dev_guild_ids == (1, 2)
    assert (config.shard_ids, config.shard_count) == ((0, 1), 4)
    assert config.access.allowed_guilds == {1} and config.access.denied_roles == {9}
    assert config.access.denied_channels == {7} and not config.access.allowed_roles
    assert config.admin_roles == {3}
    assert config.max_attachment_bytes == 1234
    assert config.api_base == "http://127.0.0.1:1"
    assert "abc" not in repr(config)


def test_discord_config_without_token_or_shards() -> None:
    config = discord_config(settings())
    assert config.token is None and config.shard_ids is None
    with pytest.raises(ConfigError, match="DISCORD_BOT_TOKEN"):
        config.require_token()
    with pytest.raises(ConfigError, match="DISCORD_SHARD_COUNT"):
        discord_config(settings(DISCORD_TOKEN="abc", discord_shard_ids="0"))


def test_slack_config_reads_the_slack_fields() -> None:
    config = slack_config(
        settings(
            slack_bot_token="xoxb-1",
            slack_signing_secret="s3cret",
            slack_http_port=4000,
            slack_api_url="http://127.0.0.1:1/api",
            slack_admin_users="U1,U2",
            max_attachment_bytes=1234,
        )
    )
    assert config == SlackConfig(
        bot_token="xoxb-1",
        signing_secret="s3cret",
        http_port=4000,
        api_url="http://127.0.0.1:1/api",
        max_file_bytes=1234,
        admin_users=frozenset({"U1", "U2"}),
    )
    assert config.base_url == "http://127.0.0.1:1/api/" and not config.socket_mode
    socket_mode = slack_config(settings(slack_bot_token="xoxb-1", slack_app_token="xapp-1"))
    assert socket_mode.socket_mode and socket_mode.base_url == "https://slack.com/api/"
    assert socket_mode.admin_users == frozenset()


@pytest.mark.parametrize(
    ("values", "needle"),
    [
        ({}, "SLACK_BOT_TOKEN"),
        ({"slack_bot_token": "  "}, "SLACK_BOT_TOKEN"),
        ({"slack_bot_token": "xoxb-1"}, "SLACK_APP_TOKEN"),
        ({"slack_bot_token": "xoxb-1", "slack_app_token": " "}, "SLACK_SIGNING_SECRET"),
    ],
)
def test_slack_missing_tokens_say_what_to_set(values: dict[str, object], needle: str) -> None:
    with pytest.raises(ConfigError, match=needle):
        slack_config(settings(**values))
