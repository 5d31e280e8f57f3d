"""Quotas per user and per server, kept in the store so they hold across
restarts and replicas.

For each user (per platform) and each server or workspace (the conversation
key's ``scope``; Discord DMs have none): requests per minute, requests per
day and LLM tokens per day, each 0 for no limit.  Windows are fixed UTC
minutes and days, so "try again in 31 s" is exact.  A request is counted
when it is admitted (a refused one counts nowhere); its LLM tokens are added
from its :class:`~core.types.Usage` when it ends, so a request started under
the token budget may end over it, and the next one is refused.  Admins
(``Request.is_admin``) are neither limited nor counted.  The counters live
in :mod:`core.store.quotas`.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass

from core.clock import SYSTEM_CLOCK, Clock
from core.errors import ErrorCode, ErrorFields, InputRejected
from core.store.quotas import QuotaStore, Used, Window
from core.types import Request, Usage

log = logging.getLogger(__name__)

MINUTE = 60
DAY = 86_400
PRUNE_EVERY = 3600.0  # seconds between deletions of old windows, per process
_PLACES = {"discord": "server", "slack": "workspace"}
_NO_SERVER = frozenset({"dm"})  # scopes that are not a server (Discord DMs)


@dataclass(frozen=True, slots=True)
class Quotas:
    """The limits (0: none)."""

    user_per_minute: int = 0
    user_per_day: int = 0
    user_tokens_per_day: int = 0
    server_per_minute: int = 0
    server_per_day: int = 0
    server_tokens_per_day: int = 0


class QuotaExceeded(InputRejected):
    """A quota is used up: :attr:`ErrorCode.QUOTA_REQUESTS` or
    :attr:`ErrorCode.QUOTA_TOKENS`, its ``seconds`` until its window ends."""

    @property
    def retry_after(self) -> float:
        return float(self.fields.get("seconds", 0))


class QuotaLimiter:
    def __init__(
        self,
        store: QuotaStore,
        quotas: Quotas,
        *,
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        self.store = store
        self.quotas = quotas
        self._clock = clock
        self._last_prune = float("-inf")

    async def admit(self, req: Request, quotas: Quotas | None = None) -> None:
        """Count ``req`` against its user's and server's quotas (``quotas``:
        its server's, when they differ from the deployment's), or raise
        :class:`QuotaExceeded` saying which one is used up and until when
        (StoreUnavailable when the store cannot be reached)."""
        if req.is_admin:
            return
        now = self._clock.now()
        windows = self._windows(req, now, requests=True, quotas=quotas)
        if not windows:
            return
        prune = None
        if self._clock.monotonic() - self._last_prune >= PRUNE_EVERY:
            self._last_prune = self._clock.monotonic()
            prune = _start(now, DAY) - 2 * DAY
        full = await self.store.admit(windows, prune_before=prune)
        if full is not None:
            raise _refusal(req, full, now)

    async def charge(self, req: Request, usage: Usage, quotas: Quotas | None = None) -> None:
        """Add the LLM tokens ``req`` used to its daily token budgets."""
        tokens = usage.prompt_tokens + usage.completion_tokens
        if req.is_admin or tokens <= 0:
            return
        windows = self._windows(req, self._clock.now(), requests=False, quotas=quotas)
        await self.store.add_tokens(windows, tokens)

    def _windows(
        self, req: Request, now: float, *, requests: bool, quotas: Quotas | None = None
    ) -> list[Window]:
        """The windows ``req`` is counted in (``requests``), or those that
        count its tokens."""
        q = quotas or self.quotas
        key = req.conversation
        user = f"user:{key.platform}:{req.user_id}"
        limits = [(user, q.user_per_minute, q.user_per_day, q.user_tokens_per_day)]
        if key.scope not in _NO_SERVER:
            server = f"server:{key.platform}:{key.scope}"
            limits.append((server, q.server_per_minute, q.server_per_day, q.server_tokens_per_day))
        windows: list[Window] = []
        for name, per_minute, per_day, tokens_per_day in limits:
            name = name[:255]
            if requests and per_minute > 0:
                windows.append(Window(name, "minute", _start(now, MINUTE), per_minute))
            if (requests and per_day > 0) or tokens_per_day > 0:
                windows.append(Window(name, "day", _start(now, DAY), per_day, tokens_per_day))
        return windows


def _start(now: float, length: int) -> int:
    return int(now // length) * length


def _refusal(req: Request, used: Used, now: float) -> QuotaExceeded:
    """The refusal for a full window, e.g. "You have used your 20 requests
    this minute; try again in 31 s." (worded in core.errors)."""
    w = used.window
    length = MINUTE if w.period == "minute" else DAY
    wait = max(1, math.ceil(w.start + length - now))
    fields: ErrorFields = {"seconds": wait}
    if not w.key.startswith("user:"):
        fields["place"] = _PLACES.get(req.conversation.platform, "server")
    log.info("request %s refused: %s is over its %s quota", req.request_id, w.key, w.period)
    if w.max_requests > 0 and used.requests >= w.max_requests:
        fields["limit"], fields["period"] = w.max_requests, w.period
        return QuotaExceeded(ErrorCode.QUOTA_REQUESTS, **fields)
    fields["limit"] = w.max_tokens
    return QuotaExceeded(ErrorCode.QUOTA_TOKENS, **fields)
