"""A token Slack refuses ends ``run_slack`` with one ConfigError naming the
setting, instead of slack_sdk's Socket Mode loop retrying it forever; also
when the app token is revoked while the bot is connected."""

from __future__ import annotations

import asyncio
import contextlib

import pytest

from adapters.slack import SlackConfig, run_slack
from core.errors import ConfigError
from tests.fakes.agent_fixture import AgentEnv
from tests.fakes.slack_fake import BOT_TOKEN, FakeSlack

APP_TOKEN = "xapp-test"


def socket_mode(fake: FakeSlack) -> SlackConfig:
    return SlackConfig(bot_token=BOT_TOKEN, app_token=APP_TOKEN, api_url=fake.base_url)


async def test_refused_bot_token_is_a_config_error_before_connecting(
    agent_env: AgentEnv, slack_fake: FakeSlack
) -> None:
    slack_fake.refuse_token(BOT_TOKEN, "token_revoked")
    with pytest.raises(ConfigError, match=r"SLACK_BOT_TOKEN \(token_revoked\)"):
        await asyncio.wait_for(run_slack(agent_env.agent, socket_mode(slack_fake)), 10)
    assert slack_fake.calls_to("apps.connections.open") == []


async def test_refused_app_token_stops_the_socket_mode_client(
    agent_env: AgentEnv, slack_fake: FakeSlack
) -> None:
    slack_fake.refuse_token(APP_TOKEN)
    ready = asyncio.Event()
    with pytest.raises(ConfigError, match=r"SLACK_APP_TOKEN \(invalid_auth\)"):
        await asyncio.wait_for(run_slack(agent_env.agent, socket_mode(slack_fake), ready=ready), 10)
    assert not ready.is_set()
    assert len(slack_fake.calls_to("apps.connections.open")) == 1


async def test_app_token_revoked_while_connected_ends_run_slack(
    agent_env: AgentEnv, slack_fake: FakeSlack
) -> None:
    ready = asyncio.Event()
    task = asyncio.create_task(run_slack(agent_env.agent, socket_mode(slack_fake), ready=ready))
    try:
        await asyncio.wait_for(ready.wait(), 10)
        await slack_fake.wait_socket()
        slack_fake.refuse_token(APP_TOKEN, "token_revoked")
        await slack_fake.socket_drop()  # the client reconnects at once, with the revoked token
        with pytest.raises(ConfigError, match=r"SLACK_APP_TOKEN \(token_revoked\)"):
            await asyncio.wait_for(task, 10)
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError, ConfigError):
            await task
    assert len(slack_fake.calls_to("apps.connections.open")) == 2
