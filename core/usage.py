"""Usage per turn: who used what, where, and what it cost (when anything says).

One :class:`TurnUsage` per answered request: the language model's calls and
tokens (every request sent counts, failed ones too, as :class:`core.types.Usage`
counts them), and one :class:`ModelCall` per planned task that was sent to a
model (its model, provider, backend, seconds and outcome).  They are recorded
once per turn by :func:`core.store.usage.insert_usage`, in the transaction
that saves the turn (or on their own for a turn that could not be saved; a
resumed request that records again is ignored, keyed on the request id) and
summed by :class:`GroupBy` (user, channel, server, model) over a
:class:`UsageFilter`.

Cost: neither the Hugging Face router nor Inference Providers documents a
price in its responses (the hub-docs pricing page points at the billing
dashboard; ``huggingface_hub``'s client exposes no response headers), and an
OpenAI-compatible ``usage`` object carries tokens, not money.  So a cost is
recorded only when a caller passes one it was given; otherwise it is
``None`` — unknown, never guessed — and totals say how many calls were
unpriced.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from enum import StrEnum

from core.catalog import Catalog
from core.errors import ErrorCode, InputRejected
from core.types import Request, TaskRecord, Usage

MICRO = 1_000_000  # costs are stored in micro-USD (exact sums)


def to_micro(usd: float | None) -> int | None:
    return None if usd is None else round(usd * MICRO)


def from_micro(micro: int | None) -> float | None:
    return None if micro is None else micro / MICRO


@dataclass(frozen=True, slots=True)
class ModelCall:
    """One task sent to a model in a turn (the model that ran last, after
    any fall-back to the next candidate)."""

    task: str
    model: str
    status: str  # done | failed
    seconds: float = 0.0
    provider: str | None = None  # "hf-inference", "fal-ai", "local", …; None: not known
    backend: str | None = None  # remote | local
    cost_usd: float | None = None  # None: not priced


@dataclass(frozen=True, slots=True)
class TurnUsage:
    """What one turn used.  ``server`` is the conversation's scope (a Discord
    server, a Slack workspace, ``dm``, ``local`` for the terminal)."""

    request_id: str
    at: datetime
    platform: str
    server: str
    conversation: str
    user_id: str
    llm_model: str | None = None
    llm_host: str | None = None
    llm_calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    llm_cost_usd: float | None = None
    model_calls: tuple[ModelCall, ...] = ()
    error: bool = False


ProviderOf = Callable[[TaskRecord], str | None]


def default_provider(record: TaskRecord) -> str | None:
    """What a task record says of its provider: ``local`` for a local run,
    else unknown (the hosted service picks one in the account's order)."""
    return "local" if record.backend == "local" else None


def provider_resolver(catalog: Catalog, default: str | None = None) -> ProviderOf:
    """What is known of a task's provider without asking the service: ``local``
    for a local run, ``endpoint`` for a catalog model with its own endpoint, the
    catalog's pinned provider, else ``default`` (``HF_PROVIDER`` when it names
    one, ``self-hosted`` with ``HF_INFERENCE_URL``; None under ``auto``, where
    the Hub picks in the account's order and the client does not say which)."""

    def provider_of(record: TaskRecord) -> str | None:
        if record.backend == "local":
            return "local"
        info = catalog.get(record.model, record.task) if record.model else None
        if info is not None and info.endpoint:
            return "endpoint"
        if info is not None and info.provider:
            return info.provider
        return default

    return provider_of


def turn_usage(
    request: Request,
    usage: Usage,
    tasks: Iterable[TaskRecord],
    *,
    llm_model: str | None,
    llm_host: str | None = None,
    error: bool = False,
    provider_of: ProviderOf = default_provider,
    llm_cost_usd: float | None = None,
    at: datetime | None = None,
) -> TurnUsage:
    """The usage of one finished turn, from its request, the LLM ``usage``
    the turn counted and its task records (``Reply.tasks``).  A task counts
    as a model call when it was started (skipped tasks and those with no
    model never reached one); its seconds are ``ended - started``."""
    key = request.conversation
    calls = tuple(
        ModelCall(
            task=t.task,
            model=t.model,
            status=t.status.value,
            seconds=_seconds(t),
            provider=provider_of(t),
            backend=t.backend,
        )
        for t in tasks
        if t.started is not None and t.model
    )
    return TurnUsage(
        request_id=request.request_id,
        at=at or datetime.now(UTC),
        platform=key.platform,
        server=key.scope,
        conversation=str(key),
        user_id=request.user_id,
        llm_model=llm_model,
        llm_host=llm_host,
        llm_calls=usage.llm_calls,
        prompt_tokens=usage.prompt_tokens,
        completion_tokens=usage.completion_tokens,
        llm_cost_usd=llm_cost_usd,
        model_calls=calls,
        error=error,
    )


def _seconds(t: TaskRecord) -> float:
    if t.started is None or t.ended is None:
        return 0.0
    return max(0.0, (t.ended - t.started).total_seconds())


# --------------------------------------------------------------- summing up


class GroupBy(StrEnum):
    USER = "user"  # key: (platform, user_id)
    CHANNEL = "channel"  # key: (conversation,)  — a channel or a thread
    SERVER = "server"  # key: (platform, server)
    MODEL = "model"  # key: (kind, model, provider): kind "llm" or "task"


@dataclass(frozen=True, slots=True)
class UsageFilter:
    """Which turns to sum; None leaves a dimension open.  ``since`` is
    inclusive, ``until`` exclusive."""

    platform: str | None = None
    server: str | None = None
    user_id: str | None = None
    conversation: str | None = None
    since: datetime | None = None
    until: datetime | None = None


@dataclass(frozen=True, slots=True)
class UsageTotals:
    """Sums over the turns of one group.  For :attr:`GroupBy.MODEL`, an
    ``llm`` row has the LLM columns (``requests``: turns that called it) and
    a ``task`` row the model columns.  ``cost_usd`` sums the priced calls
    (None when none was priced); ``unpriced_calls`` counts the others, so a
    cost with unpriced calls is a lower bound."""

    key: tuple[str, ...]
    requests: int = 0
    llm_calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    model_calls: int = 0
    model_failures: int = 0
    model_seconds: float = 0.0
    cost_usd: float | None = None
    unpriced_calls: int = 0
    errors: int = 0  # turns whose reply was an error

    @property
    def tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens


def add_costs(a: float | None, b: float | None) -> float | None:
    if a is None:
        return b
    return a if b is None else a + b


def grand_total(rows: Sequence[UsageTotals]) -> UsageTotals:
    """Every row summed (the table's last line)."""
    out = UsageTotals(("total",))
    for r in rows:
        out = UsageTotals(
            ("total",),
            requests=out.requests + r.requests,
            llm_calls=out.llm_calls + r.llm_calls,
            prompt_tokens=out.prompt_tokens + r.prompt_tokens,
            completion_tokens=out.completion_tokens + r.completion_tokens,
            model_calls=out.model_calls + r.model_calls,
            model_failures=out.model_failures + r.model_failures,
            model_seconds=out.model_seconds + r.model_seconds,
            cost_usd=add_costs(out.cost_usd, r.cost_usd),
            unpriced_calls=out.unpriced_calls + r.unpriced_calls,
            errors=out.errors + r.errors,
        )
    return out


_PERIOD = re.compile(r"\s*(\d+)\s*(m|min|h|d|w)\s*", re.IGNORECASE)
_UNITS = {"m": "minutes", "min": "minutes", "h": "hours", "d": "days", "w": "weeks"}


def parse_since(text: str, now: datetime | None = None) -> datetime:
    """The start of a period: ``30m``, ``12h``, ``7d``, ``2w`` back from
    ``now``, or an ISO date or datetime (``2026-08-01``, UTC when it names no
    zone).  :class:`InputRejected` (``BAD_PERIOD``) otherwise."""
    now = now or datetime.now(UTC)
    m = _PERIOD.fullmatch(text)
    if m:
        return now - timedelta(**{_UNITS[m.group(2).lower()]: int(m.group(1))})
    try:
        when = datetime.fromisoformat(text.strip())
    except ValueError:
        raise InputRejected(ErrorCode.BAD_PERIOD, value=text) from None
    return when if when.tzinfo is not None else when.replace(tzinfo=UTC)


@dataclass(frozen=True, slots=True)
class Caller:
    """Who asks for usage (``/usage``): their own, and their server's when
    they are an admin."""

    platform: str
    server: str
    user_id: str
    is_admin: bool = False

    def filters(self, since: datetime | None = None) -> tuple[UsageFilter, ...]:
        """The caller's own usage on this server, then (admins) the server's."""
        own = UsageFilter(
            platform=self.platform, server=self.server, user_id=self.user_id, since=since
        )
        if not self.is_admin:
            return (own,)
        return own, UsageFilter(platform=self.platform, server=self.server, since=since)
