"""What a server's people and admins ask of the bot besides requests:
``/usage`` (:func:`usage`), ``/config`` (:func:`settings`, :func:`configure`).
The agent's admin port (``AgentAPI.usage``, ``settings``, ``configure``,
``forget``) calls these.
"""

from __future__ import annotations

from typing import Any

from core.errors import ErrorCode, InputRejected
from core.server_settings import ServerKey, ServerSettingsService
from core.store.usage import UsageStore
from core.types import ConversationKey, UsageLine, UsageReport
from core.usage import Caller, GroupBy, UsageTotals, parse_since


async def usage(
    store: UsageStore,
    conversation: ConversationKey,
    user_id: str,
    *,
    server_wide: bool = False,
    is_admin: bool = False,
    since: str | None = None,
) -> UsageReport:
    """The caller's usage on this conversation's server (or, ``server_wide``
    and an admin, the whole server's), per model, since ``since``."""
    if server_wide and not is_admin:
        raise InputRejected(ErrorCode.USAGE_ADMINS_ONLY)
    start = parse_since(since) if since else None
    caller = Caller(conversation.platform, conversation.scope, user_id, is_admin)
    where = caller.filters(start)[-1 if server_wide else 0]
    turns = await store.totals(GroupBy.SERVER, where)
    rows = await store.totals(GroupBy.MODEL, where)
    lines = tuple(_usage_line(r) for r in rows)
    total = UsageLine(
        "total",
        llm_calls=sum(x.llm_calls for x in lines),
        prompt_tokens=sum(x.prompt_tokens for x in lines),
        completion_tokens=sum(x.completion_tokens for x in lines),
        model_calls=sum(x.model_calls for x in lines),
        model_seconds=round(sum(x.model_seconds for x in lines), 3),
        cost_usd=None
        if all(x.cost_usd is None for x in lines)
        else sum(x.cost_usd or 0.0 for x in lines),
        unpriced_calls=sum(x.unpriced_calls for x in lines),
    )
    return UsageReport(
        "server" if server_wide else "you",
        start,
        lines,
        total,
        turns=sum(r.requests for r in turns),
    )


async def settings(service: ServerSettingsService, conversation: ConversationKey) -> dict[str, str]:
    """This conversation's server's settings, for display (set keys only)."""
    current = await service.for_conversation(conversation)
    return _shown(current.stored())


async def configure(
    service: ServerSettingsService,
    conversation: ConversationKey,
    key: str,
    value: str | None,
    *,
    user_id: str,
    is_admin: bool,
) -> dict[str, str]:
    """Set (``value``) or unset (None) one of the server's settings; the
    settings after the change."""
    if not is_admin:
        raise InputRejected(ErrorCode.SETTINGS_ADMINS_ONLY)
    server = ServerKey.of(conversation)
    if server is None:
        raise InputRejected(ErrorCode.SETTINGS_NO_SERVER)
    if value is None:
        new = await service.unset(server, key, by=user_id)
    else:
        new = await service.set(server, key, value, by=user_id)
    return _shown(new.stored())


def _usage_line(r: UsageTotals) -> UsageLine:
    kind, model, provider = (*r.key, "", "", "")[:3]
    label = f"{model} (language model)" if kind == "llm" else model
    if provider:
        label = f"{label} via {provider}"
    return UsageLine(
        label or "?",
        llm_calls=r.llm_calls,
        prompt_tokens=r.prompt_tokens,
        completion_tokens=r.completion_tokens,
        model_calls=r.model_calls,
        model_seconds=round(r.model_seconds, 3),
        cost_usd=r.cost_usd,
        unpriced_calls=r.unpriced_calls,
    )


def _shown(stored: dict[str, Any]) -> dict[str, str]:
    """Settings as text: lists comma-separated, pins as ``pinned_model.TASK``."""
    out: dict[str, str] = {}
    for key, value in stored.items():
        if isinstance(value, dict):
            out.update({f"pinned_model.{k}": str(v) for k, v in value.items()})
        elif isinstance(value, list | tuple):
            out[key] = ", ".join(str(v) for v in value)
        else:
            out[key] = str(value)
    return out
