"""Build the Bolt app and run it in Socket Mode or behind HTTP.

The Web API client is injected (tests point it at a loopback fake) and always
carries slack_sdk's rate-limit retry handler, so a 429 is retried after
``Retry-After`` by the SDK itself rather than by matching error text.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from aiohttp import web
from slack_bolt.adapter.socket_mode.async_handler import AsyncSocketModeHandler
from slack_bolt.async_app import AsyncApp
from slack_sdk.http_retry.builtin_async_handlers import AsyncRateLimitErrorRetryHandler
from slack_sdk.web.async_client import AsyncWebClient

from adapters.slack.config import SlackConfig
from adapters.slack.listeners import register
from core.types import AgentAPI

log = logging.getLogger(__name__)


def make_client(config: SlackConfig) -> AsyncWebClient:
    """The Web API client for ``config`` (token, base URL, retries)."""
    client = AsyncWebClient(token=config.bot_token, base_url=config.base_url)
    return with_rate_limit_retries(client, config.rate_limit_retries)


def with_rate_limit_retries(client: AsyncWebClient, retries: int = 2) -> AsyncWebClient:
    """Add the SDK's 429 handler to ``client`` unless it already has one."""
    if not any(isinstance(h, AsyncRateLimitErrorRetryHandler) for h in client.retry_handlers):
        client.retry_handlers.append(AsyncRateLimitErrorRetryHandler(max_retry_count=retries))
    return client


def build_app(
    agent: AgentAPI, config: SlackConfig, client: AsyncWebClient | None = None
) -> AsyncApp:
    """The Bolt app with our middleware, listeners and error handler.

    ``client`` defaults to one built from ``config``; an injected client gets
    the rate-limit handler added.  HTTP requests are verified with the
    signing secret (a bad signature is a 401); Socket Mode needs none.
    """
    client = with_rate_limit_retries(client or make_client(config), config.rate_limit_retries)
    app = AsyncApp(
        client=client,
        signing_secret=config.signing_secret or "",
        name="hugginggpt-slack",
    )

    @app.error
    async def on_error(error: Exception, body: dict[str, Any]) -> None:
        """The catch-all for middleware and ack functions (lazy listeners
        report their own failures in the thread)."""
        event = body.get("event") or {}
        log.error(
            "slack: unhandled error for event %s (%s in %s)",
            body.get("event_id"),
            event.get("type") or body.get("type"),
            event.get("channel"),
            exc_info=error,
        )

    register(app, agent, config)
    return app


async def serve_http(app: AsyncApp, config: SlackConfig, host: str = "0.0.0.0") -> web.AppRunner:
    """Start the Events API endpoint (``POST {http_path}``); the caller cleans up."""
    runner = web.AppRunner(app.web_app(path=config.http_path), shutdown_timeout=5)
    await runner.setup()
    await web.TCPSite(runner, host, config.http_port).start()
    log.info("slack: HTTP mode on %s:%s%s", host, config.http_port, config.http_path)
    return runner


async def run_slack(agent: AgentAPI, settings: Any, *, ready: asyncio.Event | None = None) -> None:
    """Run until cancelled: Socket Mode when ``SLACK_APP_TOKEN`` is set,
    else the HTTP endpoint on ``SLACK_HTTP_PORT`` at ``/slack/events``.
    ``ready`` is set once events can arrive."""
    config = SlackConfig.from_settings(settings)
    app = build_app(agent, config)
    if config.socket_mode:
        handler = AsyncSocketModeHandler(app, app_token=config.app_token)
        log.info("slack: connecting in Socket Mode")
        try:
            await handler.connect_async()
            if ready is not None:
                ready.set()
            await asyncio.Event().wait()
        finally:
            await handler.close_async()
        return
    runner = await serve_http(app, config)
    try:
        if ready is not None:
            ready.set()
        await asyncio.Event().wait()
    finally:
        await runner.cleanup()
