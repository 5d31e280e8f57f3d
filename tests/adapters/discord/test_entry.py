"""Start-up: dev-guild sync in setup_hook, explicit global sync, invite URL."""

from __future__ import annotations

from urllib.parse import parse_qs, urlsplit

import discord
import pytest

from adapters.discord import run_discord, sync_commands
from adapters.discord.client import invite_url
from core.errors import ConfigError
from tests.adapters.discord.conftest import config, running_bot
from tests.fakes.agent_fixture import AgentEnv
from tests.fakes.discord_fake import APP_ID, GUILD_ID, FakeDiscord

COMMANDS = ["ask", "plan", "models", "forget", "help", "usage", "config"]


async def test_setup_hook_syncs_only_to_dev_guilds_and_prints_the_invite(
    discord_fake: FakeDiscord, agent_env: AgentEnv, capsys: pytest.CaptureFixture[str]
) -> None:
    async with running_bot(agent_env.agent, config(dev_guild_ids=(GUILD_ID,))):
        pass
    [put] = discord_fake.find("PUT", r"/commands$")
    assert put.path == f"/applications/{APP_ID}/guilds/{GUILD_ID}/commands"
    assert sorted(c["name"] for c in put.json) == sorted(COMMANDS)
    ask = next(c for c in put.json if c["name"] == "ask")
    assert [(o["name"], o["type"], o.get("required", False)) for o in ask["options"]] == [
        ("prompt", 3, True),
        ("file1", 11, False),
        ("file2", 11, False),
        ("file3", 11, False),
    ]
    assert f"client_id={APP_ID}" in capsys.readouterr().out


async def test_no_sync_at_all_without_dev_guilds(
    discord_fake: FakeDiscord, agent_env: AgentEnv
) -> None:
    async with running_bot(agent_env.agent):
        pass
    assert discord_fake.find("PUT", r"/commands$") == []


async def test_sync_commands_registers_globally(
    discord_fake: FakeDiscord, capsys: pytest.CaptureFixture[str]
) -> None:
    await sync_commands(config(token="t", dev_guild_ids=(5,)))
    [put] = discord_fake.find("PUT", r"/commands$")
    assert put.path == f"/applications/{APP_ID}/commands"
    assert sorted(c["name"] for c in put.json) == sorted(COMMANDS)
    assert f"Synced {len(COMMANDS)} global commands" in capsys.readouterr().out


def test_invite_url_asks_for_what_the_bot_needs() -> None:
    query = parse_qs(urlsplit(invite_url(APP_ID)).query)
    assert query["scope"] == ["bot applications.commands"]
    perms = discord.Permissions(int(query["permissions"][0]))
    assert perms.send_messages and perms.send_messages_in_threads and perms.attach_files
    assert perms.read_message_history and perms.embed_links and perms.use_application_commands
    assert not perms.administrator and not perms.manage_messages


async def test_run_without_a_token_says_how_to_fix(agent_env: AgentEnv) -> None:
    with pytest.raises(ConfigError, match="DISCORD_BOT_TOKEN"):
        await run_discord(agent_env.agent, config(token=None))


async def test_shards_from_config_are_passed_to_the_client(agent_env: AgentEnv) -> None:
    from adapters.discord import DiscordBot

    async with DiscordBot(agent_env.agent, config(shard_ids=(2, 3), shard_count=4)) as bot:
        assert (bot.shard_ids, bot.shard_count) == ([2, 3], 4)
