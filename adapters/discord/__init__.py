"""The Discord adapter: slash commands, mentions and DMs over ``AgentAPI``.

Entry points for the composition root:

* :func:`run_discord` — connect and serve until cancelled.
* :func:`sync_commands` — register the commands globally (``python -m bot discord sync``).
"""

from __future__ import annotations

import logging

from adapters.discord.client import DiscordBot, api_base, invite_url, startup_errors
from adapters.discord.config import DiscordConfig
from core.types import AgentAPI

log = logging.getLogger(__name__)

__all__ = ["DiscordBot", "DiscordConfig", "invite_url", "run_discord", "sync_commands"]


async def run_discord(agent: AgentAPI, config: DiscordConfig) -> None:
    """Serve Discord until cancelled (the client is closed on the way out).

    A token, intent or shard setting Discord refuses ends it with a
    :class:`~core.errors.ConfigError` naming the setting (no retries)."""
    token = config.require_token()
    with api_base(config.api_base), startup_errors(config):
        async with DiscordBot(agent, config) as client:
            await client.start(token)


async def sync_commands(config: DiscordConfig) -> None:
    """Register the slash commands globally (they may take up to an hour to
    appear everywhere; use DISCORD_DEV_GUILD_IDS for instant per-guild sync)."""
    token = config.require_token()
    with api_base(config.api_base), startup_errors(config):
        async with DiscordBot(None, config, sync_dev_guilds=False) as client:
            await client.login(token)
            synced = await client.tree.sync()
    names = ", ".join(f"/{c.name}" for c in synced)
    log.info("synced %d global commands: %s", len(synced), names)
    print(f"Synced {len(synced)} global commands: {names}", flush=True)
