"""The Discord client: app commands, mentions, one-time setup.

One-time work happens in ``setup_hook`` (it runs once, at login), never in
``on_ready`` (which reruns on every reconnect): the persistent buttons, the
command sync to development guilds, the job runner and the invite URL.  Global sync is a
separate, explicit step (``python -m bot discord sync``).  The client is an
``AutoShardedClient`` so several processes can split the shards of one bot.
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import aiohttp
import discord
import discord.http

from adapters.discord.buttons import register as register_buttons
from adapters.discord.commands import BotTree, install
from adapters.discord.config import DiscordConfig
from adapters.discord.jobs import KIND as JOB_KIND
from adapters.discord.jobs import DiscordRunner
from adapters.discord.messages import handle_message
from core.errors import BotError, ConfigError
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


PORTAL = "https://discord.com/developers/applications"
TOKEN_REFUSED = (
    "Discord refused DISCORD_BOT_TOKEN ({why}): copy the bot's token again from "
    f"{PORTAL} → your app → Bot → Reset Token"
)
# Gateway close codes that reconnecting cannot fix, and what to change.
CLOSE_CODES = {
    4004: TOKEN_REFUSED.format(why="gateway close code 4004, authentication failed"),
    4010: "Discord refused the shard (gateway close code 4010): check DISCORD_SHARD_IDS "
    "and DISCORD_SHARD_COUNT",
    4011: "Discord requires more shards for this bot (gateway close code 4011): raise "
    "DISCORD_SHARD_COUNT, or unset it to use Discord's recommendation",
    4012: "Discord does not speak this API version (gateway close code 4012): check "
    "DISCORD_API_BASE",
}


@contextmanager
def startup_errors(config: DiscordConfig) -> Iterator[None]:
    """Turn what discord.py raises when the setup is wrong into one line naming
    the setting to fix: :class:`ConfigError` for the operator's part (token,
    intents, shards), :class:`BotError` for anything else that ends the client.

    Without this, a bogus token ends the process with a traceback.
    """
    try:
        yield
    except discord.LoginFailure as e:  # 401 on GET /users/@me
        raise ConfigError(TOKEN_REFUSED.format(why="401 Unauthorized")) from e
    except discord.PrivilegedIntentsRequired as e:  # close code 4014
        raise ConfigError(
            "Discord refused the bot's gateway intents (close code 4014): enable them at "
            f"{PORTAL} → your app → Bot → Privileged Gateway Intents"
        ) from e
    except discord.ConnectionClosed as e:
        known = CLOSE_CODES.get(e.code)
        if known is not None:
            raise ConfigError(known) from e
        raise BotError(f"Discord closed the gateway connection (close code {e.code})") from e
    except discord.GatewayNotFound as e:
        raise BotError(f"Discord did not name a gateway to connect to ({e})") from e
    except discord.HTTPException as e:
        raise BotError(
            f"Discord's API answered {e.status} ({e.text or 'no reason given'}) "
            f"at {discord.http.Route.BASE}"
        ) from e
    except aiohttp.ClientConnectionError as e:
        where = config.api_base or "discord.com"
        raise BotError(
            f"could not reach Discord at {where} ({type(e).__name__}: {e}): check the "
            "network" + (" and DISCORD_API_BASE" if config.api_base else "")
        ) from e


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
        # Interactions this process is deferring (by id): their turns may
        # start meanwhile; nothing is posted to one before its defer is done.
        self.deferring: dict[str, asyncio.Future[Any]] = {}
        self.tree = BotTree(self)
        install(self.tree)

    @property
    def agent(self) -> AgentAPI:
        if self._agent is None:
            raise RuntimeError("this client was built only to sync commands; it has no agent")
        return self._agent

    async def deferred(self, interaction_id: str) -> None:
        """Until this process's defer of the interaction, if one is in flight,
        is over (done or failed: the caller's next call finds out which)."""
        deferring = self.deferring.get(interaction_id)
        if deferring is not None and not deferring.done():
            await asyncio.wait([deferring])

    @property
    def http_session(self) -> aiohttp.ClientSession:
        """For attachment downloads (separate from discord.py's API session)."""
        if self._session is None or self._session.closed:
            self._session = aiohttp.ClientSession()
        return self._session

    async def setup_hook(self) -> None:
        # Buttons on messages posted before this process started work too.
        register_buttons(self)
        if self._sync_dev_guilds:
            for guild_id in self.config.dev_guild_ids:
                guild = discord.Object(guild_id)
                self.tree.copy_global_to(guild=guild)
                try:
                    synced = await self.tree.sync(guild=guild)
                except discord.Forbidden as e:  # the bot is not in that guild
                    raise ConfigError(
                        f"Discord refused to sync commands to guild {guild_id} ({e.status} "
                        f"{e.text}): invite the bot there with the applications.commands "
                        "scope, or remove it from DISCORD_DEV_GUILD_IDS"
                    ) from e
                log.info("synced %d commands to dev guild %s", len(synced), guild_id)
        if self.application_id is not None:
            url = invite_url(self.application_id)
            log.info("invite URL: %s", url)
            print(f"Invite the bot: {url}", flush=True)
        if self._agent is not None:  # answer (and resume) Discord's durable jobs from here on
            self._agent.register_runner(JOB_KIND, DiscordRunner(self))

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
