"""The client's retry handler, and run_slack in HTTP and Socket Mode (bot/app.py
maps the settings to a SlackConfig: tests/bot/test_adapter_configs.py)."""

from __future__ import annotations

import asyncio
import contextlib
import socket
from pathlib import Path

import aiohttp
import yaml
from slack_sdk.http_retry.builtin_async_handlers import AsyncRateLimitErrorRetryHandler
from slack_sdk.web.async_client import AsyncWebClient

from adapters.slack import SlackConfig, build_app, run_slack
from adapters.slack.app import make_client
from adapters.slack.retries import AsyncPassingErrorRetryHandler
from tests.fakes.agent_fixture import AgentEnv
from tests.fakes.slack_fake import (
    BOT_TOKEN,
    SIGNING_SECRET,
    FakeSlack,
    event_body,
    mention_event,
    signed_request,
)


def test_clients_retry_rate_limits_and_passing_failures_via_the_sdk(agent_env: AgentEnv) -> None:
    config = SlackConfig(bot_token=BOT_TOKEN, signing_secret="s")
    built = make_client(config)
    injected = AsyncWebClient(token=BOT_TOKEN)
    app = build_app(agent_env.agent, config, injected)
    for client in (built, app.client):
        for kind in (AsyncRateLimitErrorRetryHandler, AsyncPassingErrorRetryHandler):
            handlers = [h for h in client.retry_handlers if isinstance(h, kind)]
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
    config = SlackConfig(
        bot_token=BOT_TOKEN,
        signing_secret=SIGNING_SECRET,
        http_port=port,
        api_url=slack_fake.base_url,
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
        # the token was checked at start; Bolt's authorization reused that answer
        assert len(slack_fake.calls_to("auth.test")) == 1
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
    assert task.cancelled()


async def test_run_slack_in_socket_mode_answers_once_per_event(
    agent_env: AgentEnv, slack_fake: FakeSlack
) -> None:
    config = SlackConfig(bot_token=BOT_TOKEN, app_token="xapp-test", api_url=slack_fake.base_url)
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
        assert len(slack_fake.calls_to("auth.test")) == 1  # at start only (reuse_auth_test)
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


def test_manifest_asks_for_what_the_adapter_uses() -> None:
    manifest = yaml.safe_load(
        (Path(__file__).parents[3] / "adapters" / "slack_manifest.yaml").read_text()
    )
    settings_ = manifest["settings"]
    assert set(settings_["event_subscriptions"]["bot_events"]) == {
        "app_mention",
        "message.im",
        "assistant_thread_started",
        "assistant_thread_context_changed",
    }
    assert settings_["socket_mode_enabled"] is True
    assert settings_["interactivity"]["is_enabled"] is True  # the feedback buttons
    scopes = set(manifest["oauth_config"]["scopes"]["bot"])
    assert scopes == {
        "app_mentions:read",
        "assistant:write",
        "chat:write",
        "files:read",
        "files:write",
        "im:history",
        "channels:history",  # a resumed request reads its thread back
        "groups:history",
        "mpim:history",
    }
    assert manifest["features"]["app_home"]["messages_tab_enabled"] is True
    assert manifest["features"]["assistant_view"]["assistant_description"]
