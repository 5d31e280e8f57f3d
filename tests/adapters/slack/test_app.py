"""Config from settings, the client's retry handler, and run_slack in HTTP mode."""

from __future__ import annotations

import asyncio
import contextlib
import socket
from pathlib import Path

import aiohttp
import pytest
import yaml
from slack_sdk.http_retry.builtin_async_handlers import AsyncRateLimitErrorRetryHandler
from slack_sdk.web.async_client import AsyncWebClient

from adapters.slack import SlackConfig, build_app, run_slack
from adapters.slack.app import make_client
from bot.settings import Settings
from core.errors import ConfigError
from tests.fakes.agent_fixture import AgentEnv
from tests.fakes.slack_fake import (
    BOT_TOKEN,
    SIGNING_SECRET,
    FakeSlack,
    event_body,
    mention_event,
    signed_request,
)


def settings(**values: object) -> Settings:
    return Settings(_env_file=None, **values)  # type: ignore[call-arg]


def test_config_from_settings() -> None:
    config = SlackConfig.from_settings(
        settings(
            slack_bot_token="xoxb-1",
            slack_signing_secret="s3cret",
            slack_http_port=4000,
            slack_api_url="http://127.0.0.1:1/api",
            max_attachment_bytes=1234,
        )
    )
    assert config == SlackConfig(
        bot_token="xoxb-1",
        signing_secret="s3cret",
        http_port=4000,
        api_url="http://127.0.0.1:1/api",
        max_file_bytes=1234,
    )
    assert config.base_url == "http://127.0.0.1:1/api/" and not config.socket_mode
    socket_mode = SlackConfig.from_settings(
        settings(slack_bot_token="xoxb-1", slack_app_token="xapp-1")
    )
    assert socket_mode.socket_mode and socket_mode.base_url == "https://slack.com/api/"


@pytest.mark.parametrize(
    ("values", "needle"),
    [
        ({}, "SLACK_BOT_TOKEN"),
        ({"slack_bot_token": "  "}, "SLACK_BOT_TOKEN"),
        ({"slack_bot_token": "xoxb-1"}, "SLACK_APP_TOKEN"),
    ],
)
def test_missing_tokens_say_what_to_set(values: dict[str, object], needle: str) -> None:
    with pytest.raises(ConfigError, match=needle):
        SlackConfig.from_settings(settings(**values))


def test_clients_retry_rate_limits_via_the_sdk(agent_env: AgentEnv) -> None:
    config = SlackConfig(bot_token=BOT_TOKEN, signing_secret="s")
    built = make_client(config)
    injected = AsyncWebClient(token=BOT_TOKEN)
    app = build_app(agent_env.agent, config, injected)
    for client in (built, app.client):
        handlers = [
            h for h in client.retry_handlers if isinstance(h, AsyncRateLimitErrorRetryHandler)
        ]
        assert len(handlers) == 1 and handlers[0].max_retry_count == 2
    assert app.client is injected


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def test_run_slack_serves_http_mode_until_cancelled(
    agent_env: AgentEnv, slack_fake: FakeSlack
) -> None:
    port = _free_port()
    config = settings(
        slack_bot_token=BOT_TOKEN,
        slack_signing_secret=SIGNING_SECRET,
        slack_http_port=port,
        slack_api_url=slack_fake.base_url,
    )
    ready = asyncio.Event()
    task = asyncio.create_task(run_slack(agent_env.agent, config, ready=ready))
    try:
        await asyncio.wait_for(ready.wait(), 10)
        raw, headers = signed_request(event_body(mention_event("hello")))
        async with (
            aiohttp.ClientSession() as session,
            session.post(
                f"http://127.0.0.1:{port}/slack/events", data=raw, headers=headers
            ) as response,
        ):
            assert response.status == 200
        await slack_fake.wait_for(
            "chat.update", where=lambda c: str(c.args.get("text")).startswith("✅")
        )
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
    assert task.cancelled()


async def test_run_slack_in_socket_mode_answers_once_per_event(
    agent_env: AgentEnv, slack_fake: FakeSlack
) -> None:
    config = settings(
        slack_bot_token=BOT_TOKEN, slack_app_token="xapp-test", slack_api_url=slack_fake.base_url
    )
    ready = asyncio.Event()
    task = asyncio.create_task(run_slack(agent_env.agent, config, ready=ready))
    try:
        await asyncio.wait_for(ready.wait(), 10)
        await slack_fake.wait_socket()
        (opened,) = slack_fake.calls_to("apps.connections.open")
        assert opened.token == "xapp-test"

        body = event_body(mention_event("hello over the socket"))
        first = await slack_fake.socket_send(body)  # retry_attempt 0: a first delivery
        await slack_fake.wait_socket_ack(first)
        await slack_fake.wait_for(
            "chat.update", where=lambda c: str(c.args.get("text")).startswith("✅")
        )
        posts = len(slack_fake.calls_to("chat.postMessage"))

        retry = await slack_fake.socket_send(body, retry_attempt=1)
        await slack_fake.wait_socket_ack(retry)
        assert len(slack_fake.calls_to("chat.postMessage")) == posts
        assert len(agent_env.llm.calls("plan")) == 1
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


def test_manifest_asks_for_what_the_adapter_uses() -> None:
    manifest = yaml.safe_load(
        (Path(__file__).parents[3] / "adapters" / "slack_manifest.yaml").read_text()
    )
    settings_ = manifest["settings"]
    assert set(settings_["event_subscriptions"]["bot_events"]) == {"app_mention", "message.im"}
    assert settings_["socket_mode_enabled"] is True
    scopes = set(manifest["oauth_config"]["scopes"]["bot"])
    assert scopes == {"app_mentions:read", "chat:write", "files:read", "files:write", "im:history"}
    assert manifest["features"]["app_home"]["messages_tab_enabled"] is True
