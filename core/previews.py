"""``/plan``: a plan and its models without running anything, kept so it can
be approved and run as it is; and ``recall``, a past request by its id.

A preview is stored as a job that never runs (kind :data:`PREVIEW_KIND`),
its payload a :class:`StoredPreview`; a turn that ran is read back from the
store and its job's checkpoint summary (:class:`core.turn_state.TurnState`).
"""

from __future__ import annotations

import logging
from typing import Any, Protocol

from pydantic import BaseModel

from core.errors import (
    ErrorCode,
    InputRejected,
    RunFailed,
    StoreRejected,
    StoreUnavailable,
)
from core.jobs import JobQueue
from core.mediatypes import inspect_attachment
from core.planning import PlannedTask
from core.request_checks import charge, check_request, settings_for
from core.selection import Selection
from core.server_settings import AppliedSettings
from core.stages import Deps, llm_stage, plan_request, select
from core.store.handles import allocate_handle
from core.threads import work
from core.turn_state import load_state
from core.types import (
    ConversationKey,
    PastRequest,
    PlannedStep,
    PlanPreview,
    Request,
    Stage,
    Usage,
)

log = logging.getLogger(__name__)

PREVIEW_KIND = "plan-preview"  # a /plan preview, kept as a job that never runs


class PreviewDeps(Deps, Protocol):
    jobs: JobQueue


class StoredPreview(BaseModel):
    """A preview as its job's payload keeps it (under ``"preview"``)."""

    key: tuple[str, str, str, str | None]
    user_id: str
    text: str
    steps: list[PlannedStep]
    usage: tuple[int, int, int] = (0, 0, 0)


async def plan_only(deps: PreviewDeps, request: Request) -> PlanPreview:
    """Plan and select models without running anything; the preview is kept
    (:func:`recall`).  The same checks and quotas as a request that runs
    (``/plan`` costs LLM calls too)."""
    usage = Usage()
    try:
        ts = await settings_for(deps, request)
        await check_request(deps, request, ts)
        try:
            with deps.llm.using(ts.llm_model):
                plan, selections = await _preview(deps, request, usage, ts)
        finally:
            await charge(deps, request, usage, ts)
    except InputRejected as e:
        return PlanPreview.failed(e, usage)
    except RunFailed as e:
        log.warning("plan preview failed: %s", e)
        return PlanPreview.failed(e, usage)
    except StoreUnavailable as e:
        log.error("plan preview: store unavailable: %s", e)
        return PlanPreview.failed(RunFailed(ErrorCode.STORE_DOWN), usage)
    timeouts = deps.config.task_timeouts
    steps = tuple(
        PlannedStep(
            t.id,
            t.task,
            tuple(t.dep),
            dict(t.args),
            selections[t.id].model.id if t.id in selections else None,
            selections[t.id].reason if t.id in selections else None,
            typical_seconds=timeouts.typical(t.task),
            max_seconds=timeouts.for_task(t.task),
        )
        for t in plan
    )
    await _remember(deps, request, steps, usage)
    return PlanPreview(steps, usage)  # no steps: answered directly, without a model


async def _preview(
    deps: Deps, request: Request, usage: Usage, ts: AppliedSettings
) -> tuple[list[PlannedTask], dict[int, Selection]]:
    history = await deps.repo.load_history(request.conversation, turns=deps.config.history_turns)
    handles = {h: r.kind for h, r in history.resources.items()}
    for a in request.attachments:
        # Decoding is CPU-bound: off the event loop, like the uploads of a turn.
        checked = await work(
            inspect_attachment,
            a.name,
            a.mime,
            a.data,
            max_bytes=deps.config.max_attachment_bytes,
            max_pixels=deps.config.max_image_pixels,
        )
        handles[allocate_handle(set(handles), a.name)] = checked.kind
    async with llm_stage(deps, Stage.PLANNING, None):
        plan = await plan_request(deps, request, history, handles, usage, ts.runnable)
    async with llm_stage(deps, Stage.SELECTING, None):
        selections = await select(deps, request, plan, usage, ts=ts)
    return plan, selections


async def _remember(
    deps: PreviewDeps, request: Request, steps: tuple[PlannedStep, ...], usage: Usage
) -> None:
    """Keep the preview, so it can be approved and run as it is (``recall``)."""
    key = request.conversation
    preview = StoredPreview(
        key=(key.platform, key.scope, key.channel, key.thread),
        user_id=request.user_id,
        text=request.text,
        steps=list(steps),
        usage=(usage.llm_calls, usage.prompt_tokens, usage.completion_tokens),
    )
    try:
        await deps.jobs.store.remember(
            kind=PREVIEW_KIND,
            conversation=str(request.conversation),
            payload={"preview": preview.model_dump(mode="json")},
            request_id=request.request_id,
            now=deps.jobs.now(),
        )
    except (StoreUnavailable, StoreRejected) as e:
        log.error("request %s: the plan preview was not kept: %s", request.request_id, e)


async def recall(deps: PreviewDeps, request_id: str) -> PastRequest | None:
    """A past request of this deployment (a turn, or a ``/plan`` preview)
    by its id; None when the store no longer has it."""
    row = await deps.jobs.store.by_request(request_id)
    if row is not None and row.kind == PREVIEW_KIND:
        return _past_preview(request_id, row.payload)
    asked = await deps.repo.asked(request_id)
    if asked is None:
        return None
    key, user_id, text = asked
    state = load_state(row.checkpoint if row is not None else None, deps.media)
    reply = state.reply
    ran = {t.id: t.model for t in reply.tasks} if reply is not None else {}
    chosen = state.selections
    steps = tuple(
        PlannedStep(
            t.id,
            t.task,
            tuple(t.dep),
            dict(t.args),
            ran.get(t.id) or (chosen[t.id].model if t.id in chosen else None),
            chosen[t.id].reason if t.id in chosen else None,
        )
        for t in state.plan or ()
    )
    return PastRequest(
        request_id, key, user_id, text, steps, reply, reply.usage if reply else Usage()
    )


def _past_preview(request_id: str, payload: dict[str, Any]) -> PastRequest:
    p = StoredPreview.model_validate(payload["preview"])
    return PastRequest(
        request_id,
        ConversationKey(*p.key),
        p.user_id,
        p.text,
        tuple(p.steps),
        None,
        Usage(*p.usage),
    )
