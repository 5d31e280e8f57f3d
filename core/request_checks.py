"""What a request runs with and whether it may run: its server's settings,
the checks and quotas before any work, and its LLM tokens charged after.

Shared by a turn (:mod:`core.turn_steps`) and a ``/plan`` preview
(:mod:`core.previews`), which costs LLM calls too.
"""

from __future__ import annotations

import logging

from core.config import AgentConfig
from core.errors import ErrorCode, InputRejected, StoreUnavailable
from core.ratelimit import Quotas
from core.server_settings import AppliedSettings, apply_settings
from core.stages import Deps
from core.types import Request, Usage

log = logging.getLogger(__name__)


def quotas(config: AgentConfig) -> Quotas:
    """The deployment's quotas (a server's settings may change them)."""
    return Quotas(
        user_per_minute=config.requests_per_user_per_minute,
        user_per_day=config.requests_per_user_per_day,
        user_tokens_per_day=config.llm_tokens_per_user_per_day,
        server_per_minute=config.requests_per_server_per_minute,
        server_per_day=config.requests_per_server_per_day,
        server_tokens_per_day=config.llm_tokens_per_server_per_day,
    )


async def settings_for(deps: Deps, request: Request) -> AppliedSettings:
    """What this turn runs with: the deployment's settings changed by its
    server's (the deployment's alone when the store cannot say)."""
    try:
        server = await deps.server_settings.for_conversation(request.conversation)
    except StoreUnavailable as e:
        log.error("request %s: server settings unavailable: %s", request.request_id, e)
        server = None
    return apply_settings(
        server,
        runnable=deps.router.runnable_tasks(deps.catalog),
        catalog=deps.catalog,
        selection="downloads" if deps.config.selection == "downloads" else "llm",
        quotas=deps.limiter.quotas,
        llm_model=deps.llm.model,
        usable=lambda task, m: bool(deps.router.usable_models(task, [m])),
    )


async def check_request(deps: Deps, req: Request, ts: AppliedSettings | None = None) -> None:
    """Refuse what no plan can use, and what is over a quota, before any
    work (and any LLM cost); a request that passes is counted."""
    if len(req.attachments) > deps.config.max_attachments:
        raise InputRejected(
            ErrorCode.TOO_MANY_FILES,
            count=len(req.attachments),
            limit=deps.config.max_attachments,
        )
    if len(req.text) > deps.config.max_request_chars:
        raise InputRejected(
            ErrorCode.MESSAGE_TOO_LONG,
            count=len(req.text),
            limit=deps.config.max_request_chars,
        )
    if not req.text.strip() and not req.attachments:
        raise InputRejected(ErrorCode.MESSAGE_EMPTY)
    # QuotaExceeded (an InputRejected) when over
    await deps.limiter.admit(req, ts.quotas if ts else None)


async def charge(deps: Deps, req: Request, usage: Usage, ts: AppliedSettings | None = None) -> None:
    """Add the request's LLM tokens to its quotas (never fails the request)."""
    try:
        await deps.limiter.charge(req, usage, ts.quotas if ts else None)
    except StoreUnavailable as e:
        log.error("request %s: could not count its LLM tokens: %s", req.request_id, e)
