"""Build the Bolt app and run it in Socket Mode or behind HTTP.

The Web API client is injected (tests point it at a loopback fake) and always
carries slack_sdk's rate-limit retry handler, so a 429 is retried after
``Retry-After`` by the SDK itself rather than by matching error text.

Tokens are checked at start (``auth.test`` for the bot token, the first
``apps.connections.open`` for the app token): a token Slack refuses stops the
bot with one line naming the setting, instead of the Socket Mode client's
reconnect loop retrying it forever.  Bolt's authorization is handed that
``auth.test`` answer (:func:`reuse_auth_test`), so a process's first event
does not wait for a second round trip to Slack.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any

import aiohttp
from aiohttp import web
from slack_bolt.adapter.socket_mode.async_handler import AsyncSocketModeHandler
from slack_bolt.async_app import AsyncApp
from slack_bolt.middleware.authorization.async_single_team_authorization import (
    AsyncSingleTeamAuthorization,
)
from slack_sdk.errors import SlackApiError
from slack_sdk.socket_mode.aiohttp import SocketModeClient
from slack_sdk.web.async_client import AsyncWebClient
from slack_sdk.web.async_slack_response import AsyncSlackResponse

from adapters.slack.assistant_events import FeedbackRecorder
from adapters.slack.config import SlackConfig
from adapters.slack.listeners import register
from adapters.slack.retries import with_retries
from core.errors import BotError, ConfigError
from core.types import AgentAPI

log = logging.getLogger(__name__)

# What Slack answers for a token that is wrong, revoked, of the wrong kind or
# short of a scope: only the operator can fix it, so retrying is pointless.
AUTH_ERRORS = frozenset(
    {
        "invalid_auth",
        "not_authed",
        "account_inactive",
        "token_revoked",
        "token_expired",
        "not_allowed_token_type",
        "missing_scope",
    }
)
FIX = {
    "SLACK_BOT_TOKEN": "copy the Bot User OAuth Token (xoxb-…) from the app's "
    "OAuth & Permissions page",
    "SLACK_APP_TOKEN": "make an app-level token (xapp-…) with the connections:write "
    "scope under the app's Basic Information → App-Level Tokens",
}


def token_refused(setting: str, error: str) -> ConfigError:
    return ConfigError(f"Slack refused {setting} ({error}): {FIX[setting]}")


async def check_bot_token(client: AsyncWebClient) -> AsyncSlackResponse:
    """``auth.test`` once, its answer: a token Slack refuses is a
    :class:`ConfigError` naming SLACK_BOT_TOKEN, an unreachable API a
    one-line :class:`BotError`."""
    try:
        return await client.auth_test()
    except SlackApiError as e:
        error = str(e.response.get("error"))
        if error in AUTH_ERRORS:
            raise token_refused("SLACK_BOT_TOKEN", error) from e
        raise BotError(f"Slack's auth.test failed ({error})") from e
    except (aiohttp.ClientError, TimeoutError) as e:
        raise BotError(
            f"could not reach Slack at {client.base_url} ({type(e).__name__}: {e}): "
            "check the network and SLACK_API_URL"
        ) from e


def reuse_auth_test(app: AsyncApp, answer: AsyncSlackResponse) -> bool:
    """Hand ``answer`` (this token's ``auth.test`` at start) to Bolt's
    single-workspace authorization, which otherwise asks Slack again on the
    process's first event, in front of its ack and its answer, and keeps
    what it was told for every later one.  Same token, same answer, a round
    trip (100-300 ms from most hosts) off the first request.  False, and
    Bolt asks as before, if this Bolt keeps its middleware elsewhere."""
    for middleware in getattr(app, "_async_middleware_list", ()):
        if isinstance(middleware, AsyncSingleTeamAuthorization):
            if middleware.auth_test_result is None:
                middleware.auth_test_result = answer
            return True
    log.debug("slack: Bolt's authorization not found; it asks auth.test on the first event")
    return False


class _SocketModeClient(SocketModeClient):
    """slack_sdk's aiohttp Socket Mode client, except that an app token Slack
    refuses stops it.

    The SDK's ``connect`` loops ``while not self.closed``, logging a traceback
    and retrying every ``ping_interval`` on any error, and its session monitor
    reconnects the same way; both stop once ``closed`` is set.  So on an auth
    error this marks the client closed and records why in :attr:`refused`.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.refused: asyncio.Future[ConfigError] = asyncio.get_running_loop().create_future()

    async def issue_new_wss_url(self) -> str:
        try:
            response = await self.web_client.apps_connections_open(app_token=self.app_token)
        except SlackApiError as e:
            error = str(e.response.get("error"))
            if error in AUTH_ERRORS:
                self.closed = True  # ends the SDK's connect and reconnect loops
                if not self.refused.done():
                    self.refused.set_result(token_refused("SLACK_APP_TOKEN", error))
            raise  # anything else: the SDK's loop retries (429s are retried by the client)
        return str(response["url"])


class _SocketModeHandler(AsyncSocketModeHandler):
    """Bolt's handler on :class:`_SocketModeClient` (Bolt's ``__init__`` builds
    the SDK client itself, so this one builds ours the same way)."""

    client: _SocketModeClient

    def __init__(self, app: AsyncApp, app_token: str, ping_interval: float = 10) -> None:
        self.app = app
        self.app_token = app_token
        self.client = _SocketModeClient(
            app_token=app_token,
            logger=app.logger,
            web_client=app.client,
            ping_interval=ping_interval,
        )
        self.client.socket_mode_request_listeners.append(self.handle)  # type: ignore[arg-type]

    # The SDK's connect/close are unannotated: called through typed names.
    async def connect_async(self) -> None:
        connect: Callable[[], Awaitable[None]] = self.client.connect
        await connect()

    async def close_async(self) -> None:
        close: Callable[[], Awaitable[None]] = self.client.close
        await close()


def make_client(config: SlackConfig) -> AsyncWebClient:
    """The Web API client for ``config`` (token, base URL, retries)."""
    client = AsyncWebClient(token=config.bot_token, base_url=config.base_url)
    return with_retries(client, config.rate_limit_retries)


def build_app(
    agent: AgentAPI,
    config: SlackConfig,
    client: AsyncWebClient | None = None,
    *,
    feedback: FeedbackRecorder | None = None,
) -> AsyncApp:
    """The Bolt app with our middleware, listeners and error handler.

    ``client`` defaults to one built from ``config``; an injected client gets
    the rate-limit handler added.  HTTP requests are verified with the
    signing secret (a bad signature is a 401); Socket Mode needs none.
    ``feedback`` stores 👍/👎 clicks (default: the agent, when it can).
    """
    client = with_retries(client or make_client(config), config.rate_limit_retries)
    app = AsyncApp(
        client=client,
        signing_secret=config.signing_secret or "",
        name="hugginggpt-slack",
        # Answer Slack only once the ack function returned: it records the event
        # as a job first.  Without this Bolt acks every event listener the moment
        # it matches, so a process killed before the record lost the event (acked,
        # never redelivered).  The work itself still runs in the lazy listeners.
        process_before_response=True,
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

    register(app, agent, config, feedback=feedback)
    return app


async def serve_http(app: AsyncApp, config: SlackConfig, host: str = "0.0.0.0") -> web.AppRunner:
    """Start the Events API endpoint (``POST {http_path}``); the caller cleans up.
    A port that cannot be listened on is a :class:`ConfigError` naming SLACK_HTTP_PORT."""
    runner = web.AppRunner(app.web_app(path=config.http_path), shutdown_timeout=5)
    await runner.setup()
    try:
        await web.TCPSite(runner, host, config.http_port).start()
    except OSError as e:  # in use, or privileged
        await runner.cleanup()
        raise ConfigError(
            f"cannot listen on {host}:{config.http_port} for Slack events "
            f"({e.strerror or e}): set SLACK_HTTP_PORT to a free port"
        ) from e
    log.info("slack: HTTP mode on %s:%s%s", host, config.http_port, config.http_path)
    return runner


async def run_slack(
    agent: AgentAPI,
    config: SlackConfig,
    *,
    ready: asyncio.Event | None = None,
    feedback: FeedbackRecorder | None = None,
) -> None:
    """Run until cancelled: Socket Mode when ``SLACK_APP_TOKEN`` is set,
    else the HTTP endpoint on ``SLACK_HTTP_PORT`` at ``/slack/events``.
    ``ready`` is set once events can arrive.  A token Slack refuses (at start,
    or the app token on a later reconnect) ends it with a :class:`ConfigError`
    naming the setting."""
    app = build_app(agent, config, feedback=feedback)
    reuse_auth_test(app, await check_bot_token(app.client))
    if config.socket_mode:
        assert config.app_token is not None
        handler = _SocketModeHandler(app, config.app_token)
        log.info("slack: connecting in Socket Mode")
        try:
            await handler.connect_async()  # returns at once if the app token is refused
            if ready is not None and not handler.client.refused.done():
                ready.set()
            raise await handler.client.refused
        finally:
            await handler.close_async()
    runner = await serve_http(app, config)
    try:
        if ready is not None:
            ready.set()
        await asyncio.Event().wait()
    finally:
        await runner.cleanup()
