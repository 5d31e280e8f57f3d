"""Which Slack Web API calls are tried again, by slack_sdk's own retry engine
(``AsyncWebClient.retry_handlers``): a 429 after its ``Retry-After`` (the
SDK's :class:`AsyncRateLimitErrorRetryHandler`), and a call Slack failed for
a passing reason (a 5xx, or ``ok: false`` with ``internal_error``,
``fatal_error``, ``service_unavailable`` or ``request_timeout``) when a
second call cannot do anything twice: the reads, and asking for an upload
URL (one left unused is dropped by Slack).  A post, an edit, a share or a
delete is not tried again on such an answer: Slack may have carried it out
before failing, and the bot's resume logic, not a blind retry, decides
whether it happened."""

from __future__ import annotations

from slack_sdk.http_retry.async_handler import AsyncRetryHandler
from slack_sdk.http_retry.builtin_async_handlers import AsyncRateLimitErrorRetryHandler
from slack_sdk.http_retry.request import HttpRequest
from slack_sdk.http_retry.response import HttpResponse
from slack_sdk.http_retry.state import RetryState
from slack_sdk.web.async_client import AsyncWebClient

REPEATABLE = frozenset(
    {
        "auth.test",
        "conversations.history",
        "conversations.replies",
        "files.getUploadURLExternal",
        "files.info",
    }
)
TRANSIENT = frozenset({"internal_error", "fatal_error", "service_unavailable", "request_timeout"})


class AsyncPassingErrorRetryHandler(AsyncRetryHandler):
    """Tries a :data:`REPEATABLE` call again when Slack failed it for a
    passing reason (see the module docstring), after the SDK's back-off."""

    async def _can_retry_async(
        self,
        *,
        state: RetryState,
        request: HttpRequest,
        response: HttpResponse | None = None,
        error: Exception | None = None,
    ) -> bool:
        if response is None or method_of(request.url) not in REPEATABLE:
            return False
        if response.status_code >= 500:
            return True
        body = response.body or {}
        return body.get("ok") is False and body.get("error") in TRANSIENT


def method_of(url: str) -> str:
    """``chat.postMessage`` of ``https://slack.com/api/chat.postMessage?x=1``."""
    return url.split("?", 1)[0].rstrip("/").rsplit("/", 1)[-1]


def with_retries(client: AsyncWebClient, retries: int = 2) -> AsyncWebClient:
    """Add the SDK's 429 handler and :class:`AsyncPassingErrorRetryHandler`
    (each at most ``retries`` times) to ``client``, unless it has them."""
    have = {type(h) for h in client.retry_handlers}
    for kind in (AsyncRateLimitErrorRetryHandler, AsyncPassingErrorRetryHandler):
        if kind not in have:
            client.retry_handlers.append(kind(max_retry_count=retries))
    return client
