"""Which request the current code works for, for logs, metrics and spans.

The agent enters :func:`request_context` at the start of a turn; every log
line written inside it (in this task, the tasks it starts and the threads it
hands work to: they copy the context) carries the request's id, conversation,
user, platform and server.  Standard library only: imported by the CLI at
start-up.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from core.types import Request


@dataclass(frozen=True, slots=True)
class RequestContext:
    """What a log line says about the request it belongs to (no message text)."""

    request_id: str
    conversation: str  # ConversationKey as text: platform:scope/channel[/thread]
    user: str
    platform: str
    server: str  # the Discord server, the Slack workspace, "local" for the terminal

    @classmethod
    def of(cls, request: Request) -> RequestContext:
        key = request.conversation
        return cls(request.request_id, str(key), request.user_id, key.platform, key.scope)

    def fields(self) -> dict[str, str]:
        return {
            "request_id": self.request_id,
            "conversation": self.conversation,
            "user": self.user,
            "platform": self.platform,
            "server": self.server,
        }


FIELDS = ("request_id", "conversation", "user", "platform", "server")

_CURRENT: ContextVar[RequestContext | None] = ContextVar("hugginggpt_request", default=None)


def current() -> RequestContext | None:
    """The request being served here, if any."""
    return _CURRENT.get()


@contextmanager
def request_context(request: Request) -> Iterator[RequestContext]:
    """``with request_context(request):`` every log line inside names the request."""
    ctx = RequestContext.of(request)
    token = _CURRENT.set(ctx)
    try:
        yield ctx
    finally:
        _CURRENT.reset(token)
