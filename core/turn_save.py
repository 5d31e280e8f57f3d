"""A turn's end: its :class:`Reply` built, and the turn saved.

:func:`persist` writes the turn (messages, files, task runs), its usage rows
and the job's last checkpoint (the reply) in one transaction, so a resumed
request never stores its turn twice and every turn is counted exactly once.
"""

from __future__ import annotations

import logging
from dataclasses import replace
from typing import Any

from core.errors import StoreConflict, StoreRejected, StoreUnavailable
from core.stages import Deps
from core.store.jobs import JobFence
from core.store.repo import TurnRecord
from core.turn import Turn
from core.turn_state import dump_state
from core.types import (
    Job,
    Reply,
    ReplyNote,
    ReplyStatus,
    Request,
    Resource,
    TaskRecord,
    Timings,
)
from core.usage import TurnUsage, provider_resolver, turn_usage

log = logging.getLogger(__name__)

# Of a message refused for its length, the characters stored (see as_stored).
REFUSED_KEPT_CHARS = 1_000


def reply_of(
    turn: Turn,
    text: str,
    records: tuple[TaskRecord, ...] = (),
    *,
    status: ReplyStatus = ReplyStatus.ANSWERED,
) -> Reply:
    """The reply of ``turn`` as it stands: its files, usage and timings so far."""
    return Reply(
        text=text,
        files=tuple(turn.generated),
        tasks=records,
        timings=Timings.of(turn.timings),
        usage=turn.usage,
        request_id=turn.request.request_id,
        status=status,
        plan_notes=tuple(turn.plan_notes),
    )


async def persist(
    deps: Deps,
    turn: Turn,
    reply: Reply,
    job: Job | None = None,
    *,
    with_usage: bool = False,
) -> Reply:
    """Save the turn (with the job's final checkpoint, and ``with_usage``
    its usage rows: one transaction).  A turn the store refuses or cannot
    take is answered anyway, with a note (:class:`ReplyNote`, worded by
    the adapters); its usage is then recorded on
    its own, so every turn is counted exactly once."""
    usage = _turn_usage(deps, turn.request, reply) if with_usage else None
    stored = as_stored(turn.request, reply, deps.config.max_request_chars)
    record = TurnRecord(stored, tuple(turn.uploads), reply, usage=usage)
    if job is not None:
        state = turn.state

        def checkpoint(final: tuple[Resource, ...]) -> dict[str, Any]:
            generated = tuple(r for r in final if r.source == "generated")
            state.reply = replace(reply, files=generated) if generated else reply
            return dump_state(state, deps.media)

        record = replace(record, job=JobFence(job.id, job.owner, checkpoint))
    try:
        final = await deps.repo.save_turn(record)
    except StoreUnavailable as e:
        log.error("request %s: could not save the turn: %s", turn.request.request_id, e)
        note = ReplyNote.HISTORY_DOWN
    except (StoreConflict, StoreRejected) as e:
        log.error("request %s: %s", turn.request.request_id, e)
        note = ReplyNote.NOT_SAVED
    else:
        generated = tuple(r for r in final if r.source == "generated")
        return replace(reply, files=generated) if generated else reply
    if usage is not None:
        await _record_usage(deps, usage)
    return replace(reply, notes=(*reply.notes, note))


def _turn_usage(deps: Deps, request: Request, reply: Reply) -> TurnUsage:
    return turn_usage(
        request,
        reply.usage,
        reply.tasks,
        llm_model=deps.llm.model,
        error=reply.error,
        provider_of=provider_resolver(deps.catalog),
    )


async def _record_usage(deps: Deps, usage: TurnUsage) -> None:
    """The usage of a turn that could not be saved, in a transaction of
    its own (a saved turn's is written with it: :func:`persist`); a
    request recorded before is ignored.  Never fails the turn."""
    try:
        await deps.usage_store.record(usage)
    except (StoreUnavailable, StoreRejected) as e:
        log.error("request %s: usage not recorded: %s", usage.request_id, e)


def as_stored(request: Request, reply: Reply, limit: int) -> Request:
    """The request as its turn stores it.  A message refused for its length
    keeps its first :data:`REFUSED_KEPT_CHARS` characters and a note of how
    long it was: the chat log (and every later prompt built from the history)
    still shows what was sent and, with the refusal stored beside it, why
    nothing was done, while the database holds a bounded row per refusal
    rather than whatever was pasted.  (Storing nothing would leave the
    refusal answering a message nobody can see.)"""
    if reply.status is not ReplyStatus.REFUSED or len(request.text) <= limit:
        return request
    note = (
        f"\n[… {len(request.text):,} characters in all, refused for its length; "
        f"only the first {REFUSED_KEPT_CHARS:,} are kept]"
    )
    return replace(request, text=request.text[:REFUSED_KEPT_CHARS] + note)
