"""Typed Slack configuration (the composition root, bot/app.py's
``slack_config``, fills it from the bot's settings).

A plain dataclass rather than the settings object itself, so tests and the
benchmark construct it directly (fake API URL, small caps, short intervals)
without touching the environment, and the adapter never imports the bot.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from urllib.parse import urlsplit

from adapters.chat.surface import MONOTONIC, Clock
from core.types import MAX_ATTACHMENT_BYTES

DEFAULT_API_URL = "https://slack.com/api/"


@dataclass(frozen=True, slots=True)
class SlackConfig:
    bot_token: str
    signing_secret: str | None = None  # HTTP mode
    app_token: str | None = None  # Socket Mode (preferred when set)
    http_port: int = 3000
    http_path: str = "/slack/events"
    api_url: str | None = None  # Web API base override (proxy, tests)
    max_file_bytes: int = MAX_ATTACHMENT_BYTES  # per incoming file
    max_upload_bytes: int = 1024 * 1024 * 1024  # Slack's own upload limit
    status_interval: float = 1.0  # at most one chat.update per interval
    # An assistant thread's answer is streamed in pieces of at least this many
    # characters (slack_sdk's chat_stream buffer: fewer calls, no rate limit).
    stream_buffer_chars: int = 256
    download_timeout: float = 60.0
    rate_limit_retries: int = 2
    # Slack user ids of the admins: exempt from the quotas, and may see the
    # workspace's usage and change its settings (``usage server``, ``config
    # set``).  Slack's events do not say who is an admin, and asking
    # (users.info) would need the users:read scope and a call per message:
    # an allow-list instead.
    admin_users: frozenset[str] = frozenset()
    # The status pacing's time (tests use a fake clock).
    clock: Clock = field(default=MONOTONIC, compare=False, repr=False)

    def is_admin(self, user_id: str) -> bool:
        """A workspace admin (``SLACK_ADMIN_USERS``): exempt from the quotas,
        sees the workspace's usage and changes its settings."""
        return user_id in self.admin_users

    @property
    def socket_mode(self) -> bool:
        return bool(self.app_token)

    @property
    def base_url(self) -> str:
        """The Web API base with the trailing slash slack_sdk expects."""
        url = self.api_url or DEFAULT_API_URL
        return url if url.endswith("/") else url + "/"

    def may_send_token_to(self, url: str) -> bool:
        """Whether a file URL is Slack's own, so the bot token may go with it.

        ``url_private`` always points at ``files.slack.com``; a configured API
        override (a proxy, or the test fake) is trusted too.  Anything else
        would leak the token to a third party.
        """
        parts = urlsplit(url)
        host = (parts.hostname or "").lower()
        if parts.scheme == "https" and (host == "slack.com" or host.endswith(".slack.com")):
            return True
        if self.api_url:
            api = urlsplit(self.api_url)
            return (parts.scheme, parts.netloc) == (api.scheme, api.netloc)
        return False
