"""The Discord client: app commands, mentions, one-time setup.

One-time work happens in ``setup_hook`` (it runs once, at login), never in
``on_ready`` (which reruns on every reconnect): the download session, the
command sync to development guilds, and the invite URL.  Global sync is a
separate, explicit step (``python -m bot discord sync``).  The client is an
``AutoShardedClient`` so several processes can split the shards of one bot.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import aiohttp
import discord
import discord.http

from adapters.discord.commands import BotTree, install
from adapters.discord.config import DiscordConfig
from adapters.discord.mentions import handle_message
from core.types import AgentAPI

log = logging.getLogger(__name__)

# What the bot needs in a channel: read, answer (also in threads), upload files,
# embed links, read history for replies, and slash commands.
PERMISSIONS = discord.Permissions(
    view_channel=True,
    send_messages=True,
    send_messages_in_threads=True,
    attach_files=True,
    read_message_history=True,
    embed_links=True,
    use_application_commands=True,
)
SCOPES = ("bot", "applications.commands")


@contextmanager
def api_base(base: str | None) -> Iterator[None]:
    """Send discord.py's REST calls to ``base`` (``http://host:port``) for the block.

    ``Route.BASE`` is a class attribute read as each route is built, and it also
    carries webhooks (interaction follow-ups) and the ``/gateway/bot`` lookup that
    names the websocket URL, so one assignment moves the whole client.  It is set
    around the client's life, never at import, and restored after.  (With
    ``DISCORD_SHARD_COUNT`` set, discord.py skips that lookup and connects to its
    default gateway.)
    """
    if not base:
        yield
        return
    base = base.rstrip("/")
    if not re.search(r"/api/v\d+$", base):
        base = f"{base}/api/v10"
    old = discord.http.Route.BASE
    discord.http.Route.BASE = base
    try:
        yield
    finally:
        discord.http.Route.BASE = old


def invite_url(application_id: int) -> str:
    return discord.utils.oauth_url(application_id, permissions=PERMISSIONS, scopes=SCOPES)


class DiscordBot(discord.AutoShardedClient):
    def __init__(
        self, agent: AgentAPI | None, config: DiscordConfig, *, sync_dev_guilds: bool = True
    ) -> None:
        sharding: dict[str, Any] = {}
        if config.shard_ids:
            sharding["shard_ids"] = list(config.shard_ids)
        if config.shard_count:
            sharding["shard_count"] = config.shard_count
        super().__init__(
            # Mentions and DMs carry their content without the privileged
            # message-content intent, so the defaults are enough.
            intents=discord.Intents.default(),
            allowed_mentions=discord.AllowedMentions.none(),
            **sharding,
        )
        self._agent = agent
        self.config = config
        self._sync_dev_guilds = sync_dev_guilds
        self._session: aiohttp.ClientSession | None = None
        self.tree = BotTree(self)
        install(self.tree)

    @property
    def agent(self) -> AgentAPI:
        if self._agent is None:
            raise RuntimeError("this client was built only to sync commands; it has no agent")
        return self._agent

    @property
    def http_session(self) -> aiohttp.ClientSession:
        """For attachment downloads (separate from discord.py's API session)."""
        if self._session is None or self._session.closed:
            self._session = aiohttp.ClientSession()
        return self._session

    async def setup_hook(self) -> None:
        if self._sync_dev_guilds:
            for guild_id in self.config.dev_guild_ids:
                guild = discord.Object(guild_id)
                self.tree.copy_global_to(guild=guild)
                synced = await self.tree.sync(guild=guild)
                log.info("synced %d commands to dev guild %s", len(synced), guild_id)
        if self.application_id is not None:
            url = invite_url(self.application_id)
            log.info("invite URL: %s", url)
            print(f"Invite the bot: {url}", flush=True)

    async def on_ready(self) -> None:
        log.info("connected as %s (shards %s)", self.user, sorted(self.shards))

    async def on_message(self, message: discord.Message) -> None:
        await handle_message(self, message)

    async def close(self) -> None:
        try:
            await super().close()
        finally:
            if self._session is not None:
                await self._session.close()
