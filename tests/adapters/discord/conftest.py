"""A logged-in DiscordBot on the fake Discord server, with the real agent."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, replace
from typing import Any

import pytest

from adapters.discord import DiscordBot, DiscordConfig
from core.types import AgentAPI
from tests.fakes.agent_fixture import AgentEnv
from tests.fakes.discord_fake import FakeDiscord

TEST_CONFIG = DiscordConfig(
    cdn_hosts=frozenset({"127.0.0.1"}),
    cdn_schemes=frozenset({"http"}),
    status_interval=0.05,
    accept_within=30.0,  # Discord's 2 s is for a real store, not one on a loaded test machine
)


DISPATCHED = ("CommandTree-invoker", "discord.py: on_", "discord-ui-dynamic-item-")


async def settle(within: float = 20.0) -> None:
    """Wait for every command invocation, button press and message handler
    discord.py started."""
    running = [t for t in asyncio.all_tasks() if t.get_name().startswith(DISPATCHED)]
    if running:
        await asyncio.wait_for(asyncio.gather(*running), within)


@asynccontextmanager
async def running_bot(
    agent: AgentAPI, config: DiscordConfig = TEST_CONFIG
) -> AsyncIterator[DiscordBot]:
    async with DiscordBot(agent, config) as bot:
        await bot.login("fake-token")
        yield bot


@dataclass
class Harness:
    fake: FakeDiscord
    bot: DiscordBot
    env: AgentEnv

    async def interact(self, payload: dict[str, Any]) -> dict[str, Any]:
        """Deliver an INTERACTION_CREATE as the gateway would, wait for it to finish."""
        self.bot._connection.parse_interaction_create(payload)  # type: ignore[arg-type]
        await settle()
        return payload

    async def click(
        self, message: dict[str, Any] | str, custom_id: str, **who: Any
    ) -> dict[str, Any]:
        """Press a button on a message the bot posted, wait for it to be handled."""
        return await self.interact(self.fake.click(message, custom_id, **who))

    async def post(self, payload: dict[str, Any]) -> dict[str, Any]:
        """Deliver a MESSAGE_CREATE, wait for the handler to finish."""
        self.bot._connection.parse_message_create(payload)  # type: ignore[arg-type]
        await settle()
        return payload


@pytest.fixture
def discord_config() -> DiscordConfig:
    return TEST_CONFIG


@pytest.fixture
async def harness(
    discord_fake: FakeDiscord, agent_env: AgentEnv, discord_config: DiscordConfig
) -> AsyncIterator[Harness]:
    async with running_bot(agent_env.agent, discord_config) as bot:
        yield Harness(discord_fake, bot, agent_env)


def config(**changes: Any) -> DiscordConfig:
    return replace(TEST_CONFIG, **changes)
