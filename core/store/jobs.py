"""Queries on ``turn_jobs``: accept, claim with a lease, heartbeat, checkpoint, finish.

Why a table of our own rather than a queue engine: the engines that fit
asyncio (procrastinate, pgqueuer, …) are PostgreSQL-only, and the default
deployment is one process on SQLite with no other service.  The job table
lives in the same store as the turns, so the reply checkpoint and the turn's
rows commit in one transaction (``mark_saved``) and a resumed job can never
store its turn twice.

Concurrency:

* PostgreSQL: ``accept`` takes a transaction-scoped advisory lock per
  conversation, so jobs of one conversation get ids in commit order (the
  acceptance order); ``claim`` selects candidates ``FOR UPDATE SKIP LOCKED``
  (replicas never wait on each other's rows) and every write is conditional
  on the lease (``WHERE lease_owner = me``), so a process that lost its lease
  can change nothing.
* SQLite: one writer at a time (the repo's write lock in-process, the file
  lock across processes), the same conditional writes.

Lease times are the caller's clock (``now``), never the database's, so a
test can expire a lease with a fake clock.
"""

from __future__ import annotations

import asyncio
import json
import zlib
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

import sqlalchemy as sa

from core.errors import LeaseLost, StoreRejected, StoreUnavailable
from core.store.db import Tx, unique_violation
from core.store.groups import fail, write_groups
from core.store.models import StoredJob, utcnow
from core.store.summaries import UNKNOWN
from core.types import Resource

if TYPE_CHECKING:
    from core.store.repo import Repo

QUEUED, RUNNING, DONE = "queued", "running", "done"


@dataclass(frozen=True, slots=True)
class JobRow:
    id: int
    kind: str
    dedup_key: str | None
    conversation: str
    request_id: str
    state: str
    payload: dict[str, Any]
    checkpoint: dict[str, Any] | None
    status_ref: dict[str, Any] | None
    lease_owner: str | None
    lease_expires: datetime | None
    attempts: int
    created_at: datetime
    upload_bytes: int = 0  # the files' sizes as declared at accept (0: text only)


@dataclass(frozen=True, slots=True)
class AcceptedRow:
    """The job a request is recorded as (the store's :class:`core.types.Accepted`,
    with the whole row); ``fresh`` is False when its dedup key was known (a
    redelivery), and then ``job`` is the existing job as it is now."""

    job: JobRow
    fresh: bool


@dataclass(frozen=True, slots=True)
class Slot:
    """What a queue position is computed from (one unfinished job)."""

    id: int
    conversation: str
    state: str
    lease_owner: str | None
    lease_expires: datetime | None = None


@dataclass(frozen=True, slots=True)
class JobFence:
    """Save a turn only while ``owner`` holds job ``job_id``, and write the
    job's checkpoint (built from the turn's final files) in the same transaction."""

    job_id: int
    owner: str
    checkpoint: Callable[[tuple[Resource, ...]], dict[str, Any]]


def _clean(value: dict[str, Any]) -> dict[str, Any]:
    """JSON every backend takes (no NUL, no NaN…), as the repo writes it."""
    from core.store.repo import clean_json

    cleaned = clean_json(value)
    return cleaned if isinstance(cleaned, dict) else {}


# Core statements on the table (cheaper to build and run than ORM-enabled
# ones: no identity map, no entity loading); ``_J`` is the table, ``_C`` its columns.
_J: sa.Table = StoredJob.__table__  # type: ignore[assignment]
_C = _J.c
_CONVERSATION_CHARS: int = StoredJob.conversation.type.length  # type: ignore[attr-defined]

# The claim's values, bound at execution (its statement is built once per shape).
_OWNER = sa.bindparam("owner", type_=_C.lease_owner.type)
_NOW = sa.bindparam("now", type_=_C.lease_expires.type)
_HOLD_BEFORE = sa.bindparam("hold_before", type_=_C.created_at.type)
_LIMIT = sa.bindparam("limit", type_=sa.Integer)


@dataclass(frozen=True, slots=True)
class _ClaimShape:
    """What a claim statement's SQL depends on (its values are parameters)."""

    asked: bool  # the adapter-asked ids are given (own reservations need them)
    held: bool  # ...and the hold time for reservations never asked for
    budget: bool  # a byte budget applies
    room: bool  # some of it is left (else no job with files is looked at)
    alone: bool  # no job with files runs here (one over the budget may start)


def _summary(cp: dict[str, Any] | None) -> dict[str, Any] | None:
    """What a finished job keeps of its checkpoint: no files, no results."""
    if not cp or cp.get("reply") is None:
        return None
    return {
        "v": cp.get("v"),
        "plan": cp.get("plan"),
        "selections": cp.get("selections") or {},
        "usage": cp.get("usage"),
        "timings": cp.get("timings"),
        "reply": {**cp["reply"], "files": []},
    }


def _conversation(name: str) -> str:
    """The conversation as the column takes it: a name longer than the column
    (a caller's own text, e.g. a preview's ``str(key)``) is hash-shortened
    as the conversation tables shorten theirs (:func:`core.store.repo.fit`)."""
    from core.store.repo import fit

    return fit(name, _CONVERSATION_CHARS)


def _row(r: Any) -> JobRow:
    """A :class:`JobRow` from a result row holding every column of ``_J``."""
    return JobRow(
        id=r.id,
        kind=r.kind,
        dedup_key=r.dedup_key,
        conversation=r.conversation,
        request_id=r.request_id,
        state=r.state,
        payload=dict(r.payload or {}),
        checkpoint=dict(r.checkpoint) if r.checkpoint is not None else None,
        status_ref=dict(r.status_ref) if r.status_ref is not None else None,
        lease_owner=r.lease_owner,
        lease_expires=r.lease_expires,
        attempts=r.attempts,
        created_at=r.created_at,
        upload_bytes=r.upload_bytes or 0,
    )


def _claimable(
    t: Any,
    owner: Any,
    now: Any,
    asked: Sequence[int] | sa.BindParameter[Any] | None = None,
    hold_before: Any = None,
) -> sa.ColumnElement[bool]:
    """A job (a row of ``t``: the table or an alias of it) ``owner`` may start
    now: queued and free (never leased, released, reserved by ``owner``
    itself, or by a process whose lease ran out), or running under a lease
    that ran out (its process died).

    With ``asked``, ``owner``'s own reservations count only when their id is
    in it (the adapter asked to process them: it has acknowledged the
    request) or they were accepted before ``hold_before`` (it never asked)."""
    c = t.c
    own: sa.ColumnElement[bool] = c.lease_owner == owner
    if asked is not None:
        if isinstance(asked, sa.BindParameter):
            allowed: list[sa.ColumnElement[bool]] = [c.id.in_(asked)]
        else:
            allowed = [c.id.in_(list(asked))] if asked else []
        if hold_before is not None:
            allowed.append(c.created_at < hold_before)
        own = sa.and_(own, sa.or_(*allowed)) if allowed else sa.false()
    return sa.or_(
        sa.and_(
            c.state == QUEUED,
            sa.or_(c.lease_owner.is_(None), own, c.lease_expires < now),
        ),
        sa.and_(c.state == RUNNING, c.lease_expires < now, c.lease_owner != owner),
    )


def _held(
    job_ids: int | Sequence[int], owner: str, *, running: bool = False
) -> sa.ColumnElement[bool]:
    """The jobs among ``job_ids`` that ``owner`` holds (unfinished; with
    ``running``, started): every write a lease guards is conditional on this,
    so a process that lost its lease can change nothing."""
    ids = _C.id == job_ids if isinstance(job_ids, int) else _C.id.in_(list(job_ids))
    state = _C.state == RUNNING if running else _C.state != DONE
    return sa.and_(ids, _C.lease_owner == owner, state)


async def _update_held(
    s: Tx,
    job_ids: int | Sequence[int],
    owner: str,
    values: dict[str, Any],
    *,
    running: bool = False,
) -> int:
    """Write ``values`` on the jobs of ``job_ids`` that ``owner`` holds; how many."""
    result = await s.execute(
        sa.update(_J).where(_held(job_ids, owner, running=running)).values(**values)
    )
    return int(result.rowcount)  # type: ignore[attr-defined]


# The checkpoint write (several per request): built once, values bound.
_MARK_SAVED = (
    sa.update(_J)
    .where(_C.id == sa.bindparam("job_id"), _C.lease_owner == _OWNER, _C.state == RUNNING)
    .values(checkpoint=sa.bindparam("cp", type_=_C.checkpoint.type), updated_at=_NOW)
)


async def mark_saved(
    s: Tx,
    job_id: int,
    owner: str,
    checkpoint: dict[str, Any],
    now: datetime | None = None,
) -> dict[str, Any] | None:
    """Store the job's checkpoint in the caller's transaction (the one that
    saves the turn); :class:`LeaseLost` (rolling it back) if ``owner`` no
    longer holds the job.  Returns what a finished job keeps of it (once
    the transaction commits, :meth:`JobStore.finish` need not read it back)."""
    cp = _clean(checkpoint)
    params = {"job_id": job_id, "owner": owner, "cp": cp, "now": now or utcnow()}
    result = await s.execute(_MARK_SAVED, params)
    if result.rowcount != 1:  # type: ignore[attr-defined]
        raise LeaseLost(f"job {job_id} is no longer held by {owner}")
    return _summary(cp)


_CLOSED = "the store closed before this write"


def _one_at_fault(batch: list[_Write | _Accept], exc: BaseException) -> bool:
    """Whether a refused group's writes are tried again one by one: when
    there are several (one of them is at fault), or the one is an accept
    whose dedup key another process recorded just now."""
    return isinstance(exc, StoreRejected) and (len(batch) > 1 or _clash(batch[0], exc))


def _clash(w: _Write | _Accept, exc: StoreRejected) -> bool:
    """An accept refused for its dedup key: another process recorded the
    same event just now (run again, it finds that process's job)."""
    return isinstance(w, _Accept) and unique_violation(exc.__cause__ or exc)


# Accepting and finishing (once per request each): built once, values bound.
_ACCEPT = sa.insert(_J).returning(*_C)
_FINISH = (
    sa.update(_J)
    .where(_C.id == sa.bindparam("job_id"), _C.lease_owner == _OWNER, _C.state != DONE)
    .values(
        state=DONE,
        lease_owner=None,
        lease_expires=None,
        payload=sa.bindparam("payload", type_=_C.payload.type),
        checkpoint=sa.bindparam("summary", type_=_C.checkpoint.type),
        error=sa.bindparam("error", type_=_C.error.type),
        finished_at=_NOW,
        updated_at=_NOW,
    )
)


GROUP_LIMIT = 64  # lease-guarded writes at most in one shared transaction


# The times as the column takes them (aware UTC; a naive one is refused).
_PG_NOWS = sa.bindparam("nows", type_=sa.ARRAY(_C.updated_at.type))

# PostgreSQL: a run of checkpoints (or of finishes) of distinct jobs in one
# statement, each row guarded by its own lease as when alone; the ids it
# changed come back.  One text for any number of rows (arrays, not VALUES):
# one compiled statement, one prepared statement.  JSON goes as text, cast.
_PG_CHECKPOINTS = sa.text(
    f"UPDATE {_J.name} AS j SET checkpoint = CAST(v.cp AS json), updated_at = v.now"
    " FROM unnest(CAST(:ids AS bigint[]), CAST(:owners AS text[]), CAST(:cps AS text[]),"
    " CAST(:nows AS timestamptz[])) AS v(id, owner, cp, now)"
    f" WHERE j.id = v.id AND j.lease_owner = v.owner AND j.state = '{RUNNING}'"
    " RETURNING j.id"
).bindparams(_PG_NOWS)
_PG_FINISHES = sa.text(
    f"UPDATE {_J.name} AS j SET state = '{DONE}', lease_owner = NULL, lease_expires = NULL,"
    " payload = CAST(v.payload AS json), checkpoint = CAST(v.summary AS json),"
    " error = v.error, finished_at = v.now, updated_at = v.now"
    " FROM unnest(CAST(:ids AS bigint[]), CAST(:owners AS text[]),"
    " CAST(:payloads AS text[]), CAST(:summaries AS text[]), CAST(:errors AS text[]),"
    " CAST(:nows AS timestamptz[])) AS v(id, owner, payload, summary, error, now)"
    f" WHERE j.id = v.id AND j.lease_owner = v.owner AND j.state != '{DONE}'"
    " RETURNING j.id"
).bindparams(_PG_NOWS)


def _pg_checkpoints(rows: list[dict[str, Any]]) -> tuple[Any, dict[str, Any]]:
    return _PG_CHECKPOINTS, {
        "ids": [r["job_id"] for r in rows],
        "owners": [r["owner"] for r in rows],
        "cps": [json.dumps(r["cp"]) for r in rows],
        "nows": [r["now"] for r in rows],
    }


def _pg_finishes(rows: list[dict[str, Any]]) -> tuple[Any, dict[str, Any]]:
    return _PG_FINISHES, {
        "ids": [r["job_id"] for r in rows],
        "owners": [r["owner"] for r in rows],
        "payloads": [json.dumps(r["payload"]) for r in rows],
        "summaries": [json.dumps(r["summary"]) for r in rows],
        "errors": [r["error"] for r in rows],
        "nows": [r["now"] for r in rows],
    }


# The statements a run of PostgreSQL group writes goes as (see _PG_CHECKPOINTS).
_PG_MANY: dict[int, Callable[[list[dict[str, Any]]], tuple[Any, dict[str, Any]]]] = {
    id(_MARK_SAVED): _pg_checkpoints,
    id(_FINISH): _pg_finishes,
}


@dataclass(slots=True)
class _Write:
    """One lease-guarded write waiting for the next shared transaction."""

    stmt: Any
    params: dict[str, Any]
    done: asyncio.Future[int]  # the rows it changed (0: the lease is not held)


@dataclass(slots=True)
class _Accept:
    """One request to record, waiting for the next shared transaction."""

    values: dict[str, Any]  # the row's columns
    done: asyncio.Future[AcceptedRow]


# PostgreSQL: the conversations' advisory locks of a batch of accepts, in
# the order given (sorted), in one statement.
_LOCK_CONVERSATIONS = sa.text(
    "SELECT count(pg_advisory_xact_lock(k)) FROM unnest(CAST(:keys AS bigint[])) AS k"
)


class JobStore:
    """The job table, through the repo's sessions (same engine, same SQLite write lock).

    Accepts, checkpoints and finishes are *group-committed*: a checkpoint
    or a finish is one guarded ``UPDATE`` of one row, an accept one
    ``INSERT`` (or the job its dedup key has), and those asked for while a
    transaction of them is under way go together in the next one (on
    SQLite, one commit and one disk sync for all).  A lone write goes at
    once; a caller returns when the transaction holding its write has
    committed, and learns its own outcome: its row (``fresh`` or not), or
    from its row count whether it still held the lease.  A value the
    database refuses fails that transaction: each of its writes is then
    tried on its own, so only the one at fault fails."""

    def __init__(self, repo: Repo) -> None:
        self.repo = repo
        self.dialect = repo.db.dialect
        self._claims: dict[_ClaimShape, Any] = {}
        self._queued: list[_Write | _Accept] = []
        self._writer: asyncio.Task[None] | None = None
        # executemany's row count is the sum of its rows' (not on asyncpg)
        self._summed = self.dialect == "sqlite"

    def _session(self, action: str, *, write: bool = False) -> Any:
        return self.repo._session(action, write=write)

    # --- accepting ---------------------------------------------------------

    async def accept(
        self,
        *,
        kind: str,
        conversation: str,
        payload: dict[str, Any],
        request_id: str,
        dedup_key: str | None,
        owner: str,
        now: datetime,
        lease: float,
        upload_bytes: int = 0,
    ) -> AcceptedRow:
        """Record a request (queued, reserved by ``owner``), or find the job
        its ``dedup_key`` already has.  ``upload_bytes``: its files' declared
        sizes (admission weighs the job by them; see :meth:`claim`).

        Group-committed as checkpoints are (see the class): accepts asked for
        while a transaction runs are inserted together in the next one, in
        the order they were asked, each returning when it has committed."""
        values = {
            "kind": kind,
            "dedup_key": dedup_key,
            "conversation": _conversation(conversation),
            "request_id": request_id,
            "state": QUEUED,
            "payload": _clean(payload),
            "lease_owner": owner,
            "lease_expires": now + timedelta(seconds=lease),
            "attempts": 0,
            "upload_bytes": max(0, upload_bytes),
            "created_at": now,
            "updated_at": now,
        }
        done: asyncio.Future[AcceptedRow] = asyncio.get_running_loop().create_future()
        self._enqueue(_Accept(values, done))
        return await done

    async def _accepts(self, s: Tx, accepts: list[_Accept]) -> list[AcceptedRow]:
        """Insert ``accepts`` in order in the transaction ``s``; a known dedup
        key (in the table, or earlier in ``accepts``) gives its job instead."""
        if self.dialect == "postgresql":
            # One conversation's jobs get ids in commit order: its lock is
            # held until this transaction ends (taken in key order, so two
            # processes' batches never wait on each other in a cycle).
            keys = sorted(
                {zlib.crc32(a.values["conversation"].encode()) - (1 << 31) for a in accepts}
            )
            await s.execute(_LOCK_CONVERSATIONS, {"keys": keys})
        known: dict[str, JobRow] = {}
        dedup = [a.values["dedup_key"] for a in accepts if a.values["dedup_key"] is not None]
        if dedup:
            for r in await s.execute(sa.select(*_C).where(_C.dedup_key.in_(dedup))):
                known[r.dedup_key] = _row(r)
        out: list[AcceptedRow] = []
        for a in accepts:
            key = a.values["dedup_key"]
            if key is not None and key in known:
                out.append(AcceptedRow(known[key], fresh=False))
                continue
            job = _row((await s.execute(_ACCEPT, a.values)).one())
            if key is not None:
                known[key] = job
            out.append(AcceptedRow(job, fresh=True))
        return out

    async def remember(
        self,
        *,
        kind: str,
        conversation: str,
        payload: dict[str, Any],
        request_id: str,
        now: datetime,
    ) -> None:
        """Keep a record that never runs (a ``/plan`` preview), done at once
        and pruned with the finished jobs."""
        async with self._session("remember the plan", write=True) as s:
            await s.execute(
                sa.insert(_J).values(
                    kind=kind,
                    dedup_key=None,
                    conversation=_conversation(conversation),
                    request_id=request_id,
                    state=DONE,
                    payload=_clean(payload),
                    attempts=0,
                    created_at=now,
                    updated_at=now,
                    finished_at=now,
                )
            )

    async def by_request(self, request_id: str) -> JobRow | None:
        """The newest job of ``request_id``."""
        async with self._session("find the request") as s:
            row = (
                await s.execute(
                    sa.select(*_C)
                    .where(_C.request_id == request_id)
                    .order_by(_C.id.desc())
                    .limit(1)
                )
            ).first()
            return _row(row) if row is not None else None

    # --- claiming ----------------------------------------------------------

    def _candidates(self, asked: bool, held: bool, uploads: bool | None = None) -> sa.CTE:
        """The jobs that may start, oldest first: claimable, of the kinds asked
        for, and the head of their conversation (no earlier job of it
        unfinished), so at most one per conversation; at most ``limit``;
        with ``uploads`` only those with (True) or without (False) files.
        Their ids and upload bytes, as a materialised CTE (chosen once:
        PostgreSQL may run a subquery again, and would then pick other rows),
        on PostgreSQL locked, skipping rows another process is claiming.
        ``asked``/``held``: whether the ``asked`` ids and ``hold_before`` are
        given (the statement's shape; their values are bound at execution)."""
        cand = _J.alias("cand")
        earlier = _J.alias("earlier")
        blocked = (
            sa.select(earlier.c.id)
            .where(
                earlier.c.conversation == cand.c.conversation,
                earlier.c.id < cand.c.id,
                earlier.c.state != DONE,
            )
            .exists()
        )
        claimable = _claimable(
            cand,
            _OWNER,
            _NOW,
            sa.bindparam("asked", expanding=True) if asked else None,
            _HOLD_BEFORE if held else None,
        )
        where = [cand.c.kind.in_(sa.bindparam("kinds", expanding=True)), claimable, ~blocked]
        if uploads is not None:
            where.append(cand.c.upload_bytes > 0 if uploads else cand.c.upload_bytes == 0)
        heads = (
            sa.select(cand.c.id, cand.c.upload_bytes)
            .where(*where)
            .order_by(cand.c.id)
            .limit(_LIMIT)
        )
        if self.dialect == "postgresql":
            heads = heads.with_for_update(skip_locked=True)
        name = {None: "heads", True: "with_files", False: "text_only"}[uploads]
        return heads.cte(name).prefix_with("MATERIALIZED")

    def _chosen(self, shape: _ClaimShape) -> sa.CTE:
        """The ids to start (see :meth:`claim`).  With a byte budget, two
        streams of heads: the first ``limit`` without files, and the first
        ``limit`` with files, of which those whose running total of upload
        bytes fits the room left (the total only grows, so the first that
        does not fit stops every later one with files; one bigger than the
        whole budget fits only first, and only when none with files runs
        here); then the first ``limit`` of both by id.  (Those are among the
        first ``limit`` of each stream, so nothing is missed.)"""
        if not shape.budget:
            return self._candidates(shape.asked, shape.held)
        text_only = self._candidates(shape.asked, shape.held, uploads=False)
        if not shape.room:  # nothing with files can start: leave those rows alone
            return text_only
        with_files = self._candidates(shape.asked, shape.held, uploads=True)
        total = sa.func.sum(with_files.c.upload_bytes).over(order_by=with_files.c.id)
        ranked = sa.select(
            with_files.c.id, with_files.c.upload_bytes, total.label("total")
        ).subquery("ranked")
        fits = ranked.c.total <= sa.bindparam("room", type_=sa.BigInteger)
        if shape.alone:  # the first with files may run alone, however big
            fits = sa.or_(fits, ranked.c.total == ranked.c.upload_bytes)
        both = sa.union_all(sa.select(text_only.c.id), sa.select(ranked.c.id).where(fits)).subquery(
            "both"
        )
        return (
            sa.select(both.c.id)
            .order_by(both.c.id)
            .limit(_LIMIT)
            .cte("chosen")
            .prefix_with("MATERIALIZED")
        )

    def _claim_statement(self, shape: _ClaimShape) -> Any:
        """The claim statement of ``shape``, built once per store: its values
        are bound at execution, so each claim skips building and hashing a
        statement of a dozen clauses (most of an idle round's CPU)."""
        stmt = self._claims.get(shape)
        if stmt is None:
            chosen = self._chosen(shape)
            stmt = (
                sa.update(_J)
                .where(_C.id.in_(sa.select(chosen.c.id)), _claimable(_J, _OWNER, _NOW))
                .values(
                    state=RUNNING,
                    lease_owner=_OWNER,
                    lease_expires=sa.bindparam("expires", type_=_C.lease_expires.type),
                    attempts=_C.attempts + 1,
                    updated_at=_NOW,
                )
                .returning(*_C)
            )
            self._claims[shape] = stmt
        return stmt

    async def claim(
        self,
        *,
        owner: str,
        kinds: Iterable[str],
        now: datetime,
        lease: float,
        limit: int,
        asked: Sequence[int] | None = None,
        hold_before: datetime | None = None,
        upload_budget: int | None = None,
        uploads_held: int = 0,
    ) -> list[JobRow]:
        """Start up to ``limit`` claimable jobs (oldest first, at most one per
        conversation, none while an earlier job of its conversation is
        unfinished; see :func:`_claimable` for ``asked``): running, leased to
        ``owner``, one more attempt.

        ``upload_budget``: the declared upload bytes ``owner`` may have running
        at once (None: no limit), of which ``uploads_held`` run already.  Jobs
        with files start in id order while their bytes fit; the first that
        does not fit waits, and every later job with files waits behind it
        (so it is not starved), while jobs without files go on past it.  A
        job bigger than the whole budget starts when no job with files runs
        here, and runs alone.

        One statement: the candidates are chosen (on PostgreSQL locked,
        skipping rows another process is claiming) and started together, each
        checked again as it is written."""
        kinds = list(kinds)
        if not kinds or limit <= 0:
            return []
        room = (upload_budget - uploads_held) if upload_budget is not None else 0
        shape = _ClaimShape(
            asked=asked is not None,
            held=asked is not None and hold_before is not None,
            budget=upload_budget is not None,
            room=room > 0,
            alone=uploads_held == 0,
        )
        params: dict[str, Any] = {
            "owner": owner,
            "now": now,
            "expires": now + timedelta(seconds=lease),
            "kinds": kinds,
            "limit": limit,
            "room": room,
        }
        if asked is not None:
            params["asked"] = list(asked)
            if hold_before is not None:
                params["hold_before"] = hold_before
        async with self._session("claim work", write=True) as s:
            rows = await s.execute(self._claim_statement(shape), params)
            jobs = sorted((_row(r) for r in rows.all()), key=lambda j: j.id)
        for job in jobs:  # what finish would read back, as it stands now
            self.repo.job_summaries.remember(job.id, _summary(job.checkpoint))
        return jobs

    # --- while running ------------------------------------------------------

    async def heartbeat(self, *, owner: str, now: datetime, lease: float) -> set[int]:
        """Extend every lease ``owner`` holds; the ids it still holds."""
        async with self._session("renew leases", write=True) as s:
            rows = await s.scalars(
                sa.update(_J)
                .where(_C.lease_owner == owner, _C.state != DONE)
                .values(lease_expires=now + timedelta(seconds=lease))
                .returning(_C.id)
            )
            return set(rows.all())

    async def save_checkpoint(
        self, job_id: int, *, owner: str, checkpoint: dict[str, Any], now: datetime
    ) -> None:
        """Replace the job's checkpoint (:class:`LeaseLost` if not held)."""
        self.repo.job_summaries.forget(job_id)  # unknown until the write commits
        cp = _clean(checkpoint)
        params = {"job_id": job_id, "owner": owner, "cp": cp, "now": now}
        if await self._grouped(_MARK_SAVED, params) != 1:
            raise LeaseLost(f"job {job_id} is no longer held by {owner}")
        self.repo.job_summaries.remember(job_id, _summary(cp))

    async def _grouped(self, stmt: Any, params: dict[str, Any]) -> int:
        """Run one guarded single-row write in the next shared transaction
        (see the class); the rows it changed."""
        done: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        self._enqueue(_Write(stmt, params, done))
        return await done

    def _enqueue(self, w: _Write | _Accept) -> None:
        """Queue ``w`` for the next shared transaction (its ``done`` tells its outcome)."""
        self._queued.append(w)
        if self._writer is None or self._writer.done():
            self._writer = asyncio.get_running_loop().create_task(
                self._write_queued(), name="job-store-writes"
            )

    async def settle(self, *, cancel: bool = False) -> None:
        """Wait (up to 5 s) for the writes queued so far to end; with
        ``cancel``, stop them instead (rolled back where not committed: a
        crash, after which nothing more of this process reaches the store)."""
        task = self._writer
        if task is None or task.done():
            return
        if cancel:
            task.cancel()
        await asyncio.wait([task], timeout=5.0)
        if cancel:  # a task cancelled before it began runs none of its own clean-up
            for w in self._queued:
                fail(w, StoreUnavailable(_CLOSED))
            self._queued.clear()

    async def _write_queued(self) -> None:
        """Write what is queued, a shared transaction at a time, until nothing
        is (:func:`~core.store.groups.write_groups`): a refused group is
        written again one by one (one of them is at fault), an unavailable
        store (or a defect) reaches every caller of the group; an accept
        whose caller went away before its turn is not recorded."""
        await write_groups(
            self._queued,
            limit=GROUP_LIMIT,
            together=self._write,
            alone=self._alone,
            split=_one_at_fault,
            kept=lambda w: isinstance(w, _Write) or not w.done.cancelled(),
            closed=_CLOSED,
        )

    async def _alone(self, w: _Write | _Accept) -> Any:
        """``w`` in a transaction of its own; an accept whose dedup key another
        process recorded in the meantime finds that process's job."""
        try:
            return (await self._write([w]))[0]
        except StoreRejected as exc:
            if not _clash(w, exc):
                raise
            return (await self._write([w]))[0]

    async def _write(self, batch: list[_Write | _Accept]) -> list[Any]:
        """The writes of ``batch`` in one transaction; each one's outcome (an
        accept's :class:`AcceptedRow`, an update's row count).  Updates of
        one statement go as one ``executemany`` where the driver sums their
        row counts: all held (the usual case) when the sum is their number,
        else each is run again on its own (the same values: a row written
        already is counted again, one not held is not).  On PostgreSQL,
        checkpoints (or finishes) of distinct jobs go as one statement that
        returns the ids it changed (``_PG_MANY``)."""
        accepts = [w for w in batch if isinstance(w, _Accept)]
        updates = [w for w in batch if isinstance(w, _Write)]
        action = "checkpoint requests" if updates else "record the request"
        async with self._session(action, write=True) as s:
            accepted = await self._accepts(s, accepts) if accepts else []
            counts = await self._updates(s, updates)
        rows, done = iter(accepted), iter(counts)
        return [next(rows) if isinstance(w, _Accept) else next(done) for w in batch]

    async def _updates(self, s: Tx, batch: list[_Write]) -> list[int]:
        """Run the updates of ``batch`` in ``s``; their row counts.  Writes of
        distinct jobs (the usual case: a caller waits for its write before
        the next) go grouped by statement, as their order does not matter;
        two of one job keep the order they were asked in."""
        order = list(range(len(batch)))
        if len({w.params["job_id"] for w in batch}) == len(batch):
            first: dict[int, int] = {}
            for k, w in enumerate(batch):
                first.setdefault(id(w.stmt), k)
            order.sort(key=lambda k: first[id(batch[k].stmt)])
        counts = [0] * len(batch)
        i = 0
        while i < len(order):
            j = i + 1
            while j < len(order) and batch[order[j]].stmt is batch[order[i]].stmt:
                j += 1
            run = [batch[k] for k in order[i:j]]
            for k, n in zip(order[i:j], await self._run(s, run), strict=True):
                counts[k] = n
            i = j
        return counts

    async def _run(self, s: Tx, run: list[_Write]) -> list[int]:
        """Updates of one statement: one ``executemany`` when the driver sums
        row counts and all were held, one statement on PostgreSQL for jobs
        all distinct (``_PG_MANY``), else one by one."""
        many = _PG_MANY.get(id(run[0].stmt)) if self.dialect == "postgresql" else None
        if len(run) > 1 and many is not None and len({w.params["job_id"] for w in run}) == len(run):
            stmt, params = many([w.params for w in run])
            changed = set((await s.execute(stmt, params)).scalars())
            return [int(w.params["job_id"] in changed) for w in run]
        if len(run) > 1 and self._summed:
            result = await s.execute(run[0].stmt, [w.params for w in run])
            if int(result.rowcount) == len(run):  # type: ignore[attr-defined]
                return [1] * len(run)
        counts: list[int] = []
        for w in run:
            result = await s.execute(w.stmt, w.params)
            counts.append(int(result.rowcount))  # type: ignore[attr-defined]
        return counts

    async def set_status_ref(
        self, job_id: int, *, owner: str, ref: dict[str, Any], now: datetime
    ) -> bool:
        async with self._session("remember the status message", write=True) as s:
            return await _update_held(s, job_id, owner, {"status_ref": ref, "updated_at": now}) == 1

    async def finish(
        self, job_id: int, *, owner: str, now: datetime, error: str | None = None
    ) -> bool:
        """Mark the job answered; its payload (tokens, event) and checkpoint
        are dropped but for a summary (the plan, the models, the reply's tasks,
        timings and usage: ``AgentAPI.recall``), the row stays (until pruned)
        so redeliveries are refused."""
        summary = self.repo.job_summaries.pop(job_id)  # as this process last wrote it
        params = {"job_id": job_id, "owner": owner, "now": now, "error": error, "payload": {}}
        if summary is not UNKNOWN:
            return await self._grouped(_FINISH, {**params, "summary": summary}) == 1
        async with self._session("finish the request", write=True) as s:
            cp = await s.scalar(sa.select(_C.checkpoint).where(_C.id == job_id))
            result = await s.execute(_FINISH, {**params, "summary": _summary(cp)})
            return int(result.rowcount) == 1

    async def release(self, job_ids: Sequence[int], *, owner: str, now: datetime) -> int:
        """Hand jobs back (queued, no owner) for any process to pick up at once."""
        if not job_ids:
            return 0
        values = {"state": QUEUED, "lease_owner": None, "lease_expires": None, "updated_at": now}
        async with self._session("release requests", write=True) as s:
            return await _update_held(s, job_ids, owner, values)

    async def release_owners(self, owners: Sequence[str], *, now: datetime) -> set[int]:
        """Hand back every unfinished job ``owners`` hold (processes known to
        have ended), queued and free, as their own :meth:`release` would have;
        the ids released."""
        if not owners:
            return set()
        values = {"state": QUEUED, "lease_owner": None, "lease_expires": None, "updated_at": now}
        async with self._session("take over requests", write=True) as s:
            rows = await s.scalars(
                sa.update(_J)
                .where(_C.lease_owner.in_(list(owners)), _C.state != DONE)
                .values(**values)
                .returning(_C.id)
            )
            return set(rows.all())

    async def release_reserved(self, *, owner: str, now: datetime) -> int:
        """Hand back every queued job ``owner`` reserved (stopping)."""
        async with self._session("release requests", write=True) as s:
            result = await s.execute(
                sa.update(_J)
                .where(_C.lease_owner == owner, _C.state == QUEUED)
                .values(lease_owner=None, lease_expires=None, updated_at=now)
            )
            return int(result.rowcount)

    # --- reading -----------------------------------------------------------

    async def get(self, job_ids: Iterable[int]) -> dict[int, JobRow]:
        ids = list(job_ids)
        if not ids:
            return {}
        async with self._session("read requests") as s:
            rows = await s.execute(sa.select(_J).where(_C.id.in_(ids)))
            return {r.id: _row(r) for r in rows.all()}

    async def holders(self, *, now: datetime) -> set[str]:
        """The owners of unfinished jobs whose leases have not run out."""
        async with self._session("read the queue") as s:
            rows = await s.scalars(
                sa.select(_C.lease_owner)
                .where(_C.state != DONE, _C.lease_owner.is_not(None), _C.lease_expires >= now)
                .distinct()
            )
            return {o for o in rows.all() if o is not None}

    async def unfinished(self, up_to: int) -> list[Slot]:
        """Every unfinished job up to id ``up_to`` (for queue positions), by id."""
        async with self._session("read the queue") as s:
            rows = await s.execute(
                sa.select(_C.id, _C.conversation, _C.state, _C.lease_owner, _C.lease_expires)
                .where(_C.state != DONE, _C.id <= up_to)
                .order_by(_C.id)
            )
            return [
                Slot(r.id, r.conversation, r.state, r.lease_owner, r.lease_expires)
                for r in rows.all()
            ]

    async def checkpointed_paths(self) -> set[str]:
        """Media paths unfinished jobs' checkpoints refer to (keep them when pruning)."""
        async with self._session("list checkpointed files") as s:
            rows = await s.scalars(
                sa.select(_C.checkpoint).where(_C.state != DONE, _C.checkpoint.is_not(None))
            )
            out: set[str] = set()
            for cp in rows.all():
                out.update(str(p) for p in (cp or {}).get("paths", ()))
            return out

    async def prune(self, *, before: datetime) -> int:
        """Delete jobs finished before ``before`` (their dedup keys go with them)."""
        async with self._session("prune finished requests", write=True) as s:
            result = await s.execute(sa.delete(_J).where(_C.state == DONE, _C.finished_at < before))
            return int(result.rowcount)
