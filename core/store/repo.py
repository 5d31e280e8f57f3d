"""Queries in core types: conversation history in, whole turns out.

The agent never sees a row: it gets a :class:`History` (recent turns plus the
files the conversation can refer to, by handle) and hands back a
:class:`TurnRecord`, saved in one transaction.  Bytes are read only through
the media store by storage path.

Errors say whose fault they are, without naming the driver:
:class:`core.errors.StoreUnavailable` when the database cannot be reached,
is down or too busy; :class:`core.errors.StoreRejected` when it refused a
value (the database is fine, the data is not).

What PostgreSQL refuses and SQLite takes is made acceptable here, the same
way on both backends, for every value written or looked up:

* text (messages, errors, names, JSON strings and keys): NUL removed, a lone
  surrogate (no UTF-8 for it) becomes U+FFFD;
* JSON: NaN and ±infinity become null (PostgreSQL's ``json`` refuses them);
  anything else that is not JSON becomes its ``str()``;
* ``String(n)`` columns (conversation keys, user ids, handles, models…): a
  longer value is hash-shortened — its head, ``~`` and 16 hex digits of its
  SHA-256 — so the same long name always finds the same row;
* INTEGER columns: a task id outside 32 bits is not stored there (the
  resource's ``task_id`` is NULL, the task run's ``task_index`` is -1) but
  kept whole in the task run's ``result`` JSON as ``task_id``; plans number
  their tasks from 0, so only a hostile plan gets there, and the columns keep
  their type (no table rewrite, no second migration head);
* naive datetimes are taken as UTC.

If the database still refuses part of a turn (an encoding it lacks, a
constraint an operator added), the turn is saved again with that part in
ASCII, then without its free text (a placeholder says so), then (files, task
runs, usage) without those rows — a turn is never lost to a refused value.
"""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import json
import logging
import math
import operator
from collections.abc import Iterable
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, cast

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncSession

from core.clock import SYSTEM_CLOCK, Clock, utc
from core.errors import StoreConflict, StoreRejected, StoreUnavailable
from core.store.db import (
    DB_ERRORS,
    Database,
    describe_db_error,
    dialect_insert,
    unique_violation,
)
from core.store.groups import write_groups
from core.store.jobs import JobFence, JobStore, mark_saved
from core.store.media import MediaStore, PruneReport
from core.store.models import (
    Conversation,
    Message,
    ProcessedEvent,
    ResourceRow,
    TaskRun,
    string_lengths,
)
from core.store.summaries import JobSummaries
from core.store.usage import insert_usage
from core.types import ConversationKey, Reply, Request, Resource, TaskRecord
from core.usage import TurnUsage

log = logging.getLogger(__name__)

EVENT_TTL = timedelta(days=1)
PRUNE_EVERY = 3600.0  # seconds between prunes of processed_events, per process
SAVE_ATTEMPTS = 3  # a handle clash with a concurrent writer is retried this often
SAVE_GROUP_LIMIT = 32  # turns at most in one shared save transaction (a burst's)


@dataclass(frozen=True)
class HistoryMessage:
    role: str  # user | assistant
    text: str
    user_id: str | None
    handles: tuple[str, ...]
    created_at: datetime


@dataclass(frozen=True)
class History:
    turns: list[HistoryMessage]
    resources: dict[str, Resource]  # handle -> Resource (absolute path)


@dataclass(frozen=True)
class TurnRecord:
    request: Request
    uploads: tuple[Resource, ...]  # the user's attachments, already in media, handles allocated
    reply: Reply  # text, generated files (Resources), task records
    # The durable job this turn ran as: its reply checkpoint is written in the
    # turn's own transaction (a resumed job never saves its turn twice), and
    # only while this process still holds the job (else LeaseLost).
    job: JobFence | None = None
    # The turn's usage rows (core.store.usage), written in the same
    # transaction: counted exactly when the turn is stored.
    usage: TurnUsage | None = None


# --- what the database will take --------------------------------------------

INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1
INT64_MAX = 2**63 - 1
HASH_CHARS = 16  # hex digits of SHA-256 in a shortened key: 64 bits
JSON_DEPTH = 64  # deeper JSON is stored as its str()
NOT_STORED = "[not stored: the database refused this text ({n} characters)]"


_CONVERSATION = string_lengths(Conversation)
_MESSAGE = string_lengths(Message)
_RESOURCE = string_lengths(ResourceRow)
_TASK_RUN = string_lengths(TaskRun)
_EVENT = string_lengths(ProcessedEvent)

# The hot statements (every request reads its history and saves its turn),
# built once with bind parameters, in Core: no ORM unit of work or entity
# loading, and one statement fewer per read (the conversation is joined, not
# looked up first).  Rows come back as plain tuples.
_CONV = cast(sa.Table, Conversation.__table__)
_MSG = cast(sa.Table, Message.__table__)
_RES = cast(sa.Table, ResourceRow.__table__)
_RUN = cast(sa.Table, TaskRun.__table__)
_IN_CHANNEL = (
    _CONV.c.platform == sa.bindparam("platform"),
    _CONV.c.scope == sa.bindparam("scope"),
    _CONV.c.channel == sa.bindparam("channel"),
)
_RESOURCE_COLUMNS = (
    _RES.c.message_id,
    _RES.c.handle,
    _RES.c.kind,
    _RES.c.mime,
    _RES.c.storage_path,
    _RES.c.sha256,
    _RES.c.size,
    _RES.c.source,
    _RES.c.task_id,
)
_RESOURCES_JOIN = _RES.join(_CONV, _CONV.c.id == _RES.c.conversation_id)
# the conversation's own files, oldest first
_OWN_RESOURCES = (
    sa.select(*_RESOURCE_COLUMNS)
    .select_from(_RESOURCES_JOIN)
    .where(*_IN_CHANNEL, _CONV.c.thread == sa.bindparam("thread"))
    .order_by(_RES.c.id)
)
# a thread's channel: the channel's own files and its other threads', newest first
_CHANNEL_RESOURCES = (
    sa.select(*_RESOURCE_COLUMNS)
    .select_from(_RESOURCES_JOIN)
    .where(*_IN_CHANNEL, _CONV.c.thread != sa.bindparam("thread"))
    .order_by(_RES.c.id.desc())
    .limit(sa.bindparam("limit", type_=sa.Integer))
)
# the last messages, newest first
_RECENT_MESSAGES = (
    sa.select(_MSG.c.id, _MSG.c.role, _MSG.c.text, _MSG.c.user_id, _MSG.c.created_at)
    .select_from(_MSG.join(_CONV, _CONV.c.id == _MSG.c.conversation_id))
    .where(*_IN_CHANNEL, _CONV.c.thread == sa.bindparam("thread"))
    .order_by(_MSG.c.id.desc())
    .limit(sa.bindparam("limit", type_=sa.Integer))
)
_INSERT_MESSAGE = sa.insert(_MSG).returning(_MSG.c.id)
_INSERT_RESOURCES = sa.insert(_RES)
_INSERT_TASK_RUNS = sa.insert(_RUN)
PATH_CACHE = 4096  # media paths of stored files remembered per repo (they never change)


def _key_params(key: ConversationKey) -> dict[str, str]:
    return {
        "platform": key.platform,
        "scope": key.scope,
        "channel": key.channel,
        "thread": key.thread or "",
    }


def clean_text(value: str, *, ascii_only: bool = False) -> str:
    """``value`` as every backend stores it: without NUL (PostgreSQL refuses
    it in text), a lone surrogate (which has no UTF-8) as U+FFFD; with
    ``ascii_only`` every other non-ASCII character as a backslash escape."""
    if value.isascii():  # the usual case: nothing but a NUL to drop
        return value.replace("\x00", "") if "\x00" in value else value
    if "\x00" in value:
        value = value.replace("\x00", "")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:  # pairs written as two halves are joined, lone ones replaced
        value = value.encode("utf-16", "surrogatepass").decode("utf-16", "replace")
    if ascii_only and not value.isascii():
        value = value.encode("ascii", "backslashreplace").decode("ascii")
    return value


def fit(value: str, limit: int, *, ascii_only: bool = False) -> str:
    """:func:`clean_text`, then at most ``limit`` characters: a longer value
    keeps its head and ends in ``~`` and 16 hex digits of its SHA-256, so the
    same long name always maps to the same key (and two long names sharing a
    head do not collide)."""
    value = clean_text(value, ascii_only=ascii_only)
    if len(value) <= limit:
        return value
    digest = hashlib.sha256(value.encode("utf-8")).hexdigest()[:HASH_CHARS]
    head = limit - HASH_CHARS - 1
    return f"{value[:head]}~{digest}" if head > 0 else digest[:limit]


def fit_handle(value: str, limit: int, *, ascii_only: bool = False) -> str:
    """:func:`fit` for a file handle: a shortened handle keeps its extension."""
    value = clean_text(value, ascii_only=ascii_only)
    stem, dot, ext = value.rpartition(".")
    if len(value) <= limit or not dot or not stem or len(ext) > 10:
        return fit(value, limit)
    return f"{fit(stem, limit - len(ext) - 1)}.{ext}"


def fit_int32(value: Any) -> int | None:
    """``value`` if it fits an INTEGER column, else None."""
    try:
        number = operator.index(value)
    except TypeError:
        return None
    return number if INT32_MIN <= number <= INT32_MAX else None


def clean_json(value: Any, *, ascii_only: bool = False, depth: int = 0) -> Any:
    """A JSON value every backend takes: strings and keys through
    :func:`clean_text`, NaN and ±infinity as null, tuples as lists, anything
    else (paths, numpy scalars) as its ``str()``."""
    kind = type(value)
    if kind is str:
        return clean_text(value, ascii_only=ascii_only)
    if kind is dict and depth < JSON_DEPTH:  # the usual containers, without the checks below
        return {
            (
                k
                if type(k) is str and k.isascii() and "\x00" not in k
                else _json_key(k, ascii_only)
            ): clean_json(v, ascii_only=ascii_only, depth=depth + 1)
            for k, v in value.items()
        }
    if kind is list and depth < JSON_DEPTH:
        return [clean_json(v, ascii_only=ascii_only, depth=depth + 1) for v in value]
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        return float(value) if math.isfinite(value) else None
    if isinstance(value, str):
        return clean_text(value, ascii_only=ascii_only)
    if depth < JSON_DEPTH:
        if isinstance(value, dict):
            return {
                _json_key(k, ascii_only): clean_json(v, ascii_only=ascii_only, depth=depth + 1)
                for k, v in value.items()
            }
        if isinstance(value, list | tuple):
            return [clean_json(v, ascii_only=ascii_only, depth=depth + 1) for v in value]
    return clean_text(str(value), ascii_only=ascii_only)


def _json_key(key: Any, ascii_only: bool) -> str:
    if not isinstance(key, str):  # as json.dumps names them: 1 -> "1", None -> "null"
        scalar = key is None or isinstance(key, bool | int | float)
        key = json.dumps(key) if scalar else str(key)
    return clean_text(key, ascii_only=ascii_only)


def aware(value: datetime | None) -> datetime | None:
    """A naive datetime taken as UTC (the store keeps aware ones)."""
    return value.replace(tzinfo=UTC) if value is not None and value.tzinfo is None else value


def fit_key(key: ConversationKey) -> ConversationKey:
    """The conversation key as stored: every part through :func:`fit`."""
    fitted = ConversationKey(
        fit(key.platform, _CONVERSATION["platform"]),
        fit(key.scope, _CONVERSATION["scope"]),
        fit(key.channel, _CONVERSATION["channel"]),
        None if key.thread is None else fit(key.thread, _CONVERSATION["thread"]),
    )
    return key if fitted == key else fitted


def fit_user(user_id: str | None, *, ascii_only: bool = False) -> str | None:
    return None if user_id is None else fit(user_id, _MESSAGE["user_id"], ascii_only=ascii_only)


# How far each part of a turn has been degraded after the database refused
# it: 0 as given (cleaned), 1 ASCII only, 2 without its free text (messages:
# a placeholder; task runs: no args, result, error or model; files: not
# recorded), 3 (task runs) not recorded; usage rows: 1 not recorded.
_PARTS = {"user": 2, "assistant": 2, "files": 2, "tasks": 3, "usage": 1}
_SHAPES = {
    "user": ("as given", "in ASCII", "as a placeholder"),
    "assistant": ("as given", "in ASCII", "as a placeholder"),
    "files": ("as given", "in ASCII", "left out"),
    "tasks": ("as given", "in ASCII", "without args, result, error and model", "left out"),
    "usage": ("as given", "left out"),
}


@dataclass
class _Attempt:
    """One try at saving a turn: how each part is written, and which part
    the database was given last (the one it refused, if it refuses)."""

    shape: dict[str, int]
    part: str = "conversation"
    summary: dict[str, Any] | None = None  # of the job's checkpoint, as written


@dataclass(slots=True)
class _Save:
    """A turn waiting for the next shared save transaction."""

    turn: TurnRecord
    files: list[Resource]
    storage: list[str]
    done: asyncio.Future[tuple[Resource, ...]]


def _each_on_its_own(batch: list[_Save], exc: BaseException) -> bool:
    """Whether a group whose save failed is saved again turn by turn (logged):
    yes unless the database cannot be reached."""
    if isinstance(exc, StoreUnavailable):
        return False
    log.info(
        "saving %d turns together failed (%s); saving each on its own",
        len(batch),
        describe_db_error(exc.__cause__ or exc),
    )
    return True


class Repo:
    def __init__(self, db: Database, media: MediaStore, clock: Clock = SYSTEM_CLOCK) -> None:
        self.db = db
        self.media = media
        self.clock = clock
        self._last_prune = float("-inf")
        # SQLite has one writer at a time: queue this process's writers here
        # instead of letting them spin on the file lock (busy_timeout).
        # storage path -> absolute path (content-addressed: a stored file's
        # path never changes; reading it checks the path again)
        self._paths: dict[str, Path] = {}
        # what this process last read or wrote of each job's checkpoint
        self.job_summaries = JobSummaries()
        # turns asked to be saved while another save is under way (save_turn)
        self._saving = False
        self._saves: list[_Save] = []
        self._saver: asyncio.Task[None] | None = None
        now = sa.bindparam("now", type_=_CONV.c.created_at.type)
        self._upsert_conversation = (
            self._insert(_CONV)
            .values(
                platform=sa.bindparam("platform"),
                scope=sa.bindparam("scope"),
                channel=sa.bindparam("channel"),
                thread=sa.bindparam("thread"),
                created_at=now,
                updated_at=now,
            )
            .on_conflict_do_update(
                index_elements=["platform", "scope", "channel", "thread"], set_={"updated_at": now}
            )
            .returning(_CONV.c.id)
        )

    # --- plumbing -------------------------------------------------------

    def _session(
        self, action: str, *, write: bool = False
    ) -> AbstractAsyncContextManager[AsyncConnection]:
        """A transaction on a Core connection (:meth:`Database.connection`):
        every statement of the repo and the job store is on tables and
        columns; the two that load or delete ORM entities open a session."""
        return self.db.connection(action, write=write)

    def _insert(self, table: Any) -> Any:
        return dialect_insert(self.db.dialect)(table)

    @staticmethod
    def _key_filter(key: ConversationKey) -> sa.ColumnElement[bool]:
        return sa.and_(
            Conversation.platform == key.platform,
            Conversation.scope == key.scope,
            Conversation.channel == key.channel,
            Conversation.thread == (key.thread or ""),
        )

    async def _conversation_id(self, s: AsyncSession, key: ConversationKey) -> int | None:
        return await s.scalar(sa.select(Conversation.id).where(self._key_filter(key)))

    def _resource(self, row: Any) -> Resource:
        """A resource from a row of ``_RESOURCE_COLUMNS``."""
        path = self._paths.get(row.storage_path)
        if path is None:
            path = self.media.path(row.storage_path)
            if len(self._paths) >= PATH_CACHE:
                self._paths.clear()
            self._paths[row.storage_path] = path
        return Resource(
            handle=row.handle,
            kind=row.kind,
            mime=row.mime,
            path=path,
            sha256=row.sha256,
            size=row.size,
            source=row.source,
            task_id=row.task_id,
        )

    # --- reading --------------------------------------------------------

    async def load_history(
        self, key: ConversationKey, *, turns: int = 10, parent_resources: int = 20
    ) -> History:
        """The last ``turns`` user+assistant pairs (oldest first) and every
        file this conversation can name; a thread also sees the
        ``parent_resources`` most recent files of its channel — the channel's
        own turns and its other threads (Slack answers every mention in a
        thread, so a channel's files mostly live in threads) — its own win
        on a clash."""
        key = fit_key(key)
        params: dict[str, Any] = _key_params(key)
        resources: dict[str, Resource] = {}
        async with self._session("load the conversation history") as s:
            if key.thread is not None and parent_resources > 0:
                rows = await s.execute(_CHANNEL_RESOURCES, {**params, "limit": parent_resources})
                for row in rows:  # newest first: the newest wins a name clash
                    resources.setdefault(row.handle, self._resource(row))
            own = (await s.execute(_OWN_RESOURCES, params)).all()
            recent = await s.execute(_RECENT_MESSAGES, {**params, "limit": max(turns, 0) * 2})
            messages = list(reversed(recent.all()))
        for row in own:
            resources[row.handle] = self._resource(row)
        if messages and messages[0].role != "user":
            messages = messages[1:]  # the window cut a pair in half
        handles: dict[int, list[str]] = {}
        for row in own:
            handles.setdefault(row.message_id, []).append(row.handle)
        history = [
            HistoryMessage(
                role=m.role,
                text=m.text,
                user_id=m.user_id,
                handles=tuple(handles.get(m.id, ())),
                created_at=m.created_at,
            )
            for m in messages
        ]
        return History(turns=history, resources=resources)

    async def taken_handles(self, key: ConversationKey) -> set[str]:
        """Handles a new file in ``key`` must not use: the conversation's own
        and, for a thread, its channel's (so a new name never hides one)."""
        key = fit_key(key)
        keys = [key] + ([p] if (p := key.parent()) else [])
        async with self._session("list file handles") as s:
            return await self._taken(s, keys)

    async def _taken(self, s: AsyncConnection, keys: Iterable[ConversationKey]) -> set[str]:
        where = sa.or_(*(self._key_filter(k) for k in keys))
        rows = await s.scalars(
            sa.select(ResourceRow.handle)
            .join(Conversation, Conversation.id == ResourceRow.conversation_id)
            .where(where)
        )
        return set(rows.all())

    async def stored_paths(self) -> set[str]:
        """Every media path a resource row still points at (for pruning)."""
        async with self._session("list stored files") as s:
            return set((await s.scalars(sa.select(ResourceRow.storage_path))).all())

    async def prune_media(self, *, older_than: float = 3600.0) -> PruneReport:
        """Remove media files no conversation refers to any more (after /forget),
        keeping those an unfinished job's checkpoint still needs."""
        keep = await self.stored_paths() | await JobStore(self).checkpointed_paths()
        return await self.media.prune(keep, older_than=older_than)

    async def read(self, resource: Resource) -> bytes:
        """The bytes of a stored resource, through the media store only
        (ValueError if its path is not inside the media root)."""
        return await self.media.read(self.media.relative(resource.path))

    # --- writing --------------------------------------------------------

    async def save_turn(self, turn: TurnRecord) -> tuple[Resource, ...]:
        """Persist one whole turn atomically; return the final resources
        (uploads then generated), renamed if a handle was taken meanwhile.

        A handle clash with a concurrent writer is retried.  A part of the
        turn the database refuses is logged and written again in a plainer
        shape (see the module's docstring) until it is taken; StoreRejected
        only if even the bare turn is refused, StoreUnavailable if the
        database cannot be reached.

        Turns asked for while another is being saved (a burst) are saved
        together next, one transaction and one commit for the group; a group
        the database refuses any part of is saved again turn by turn, so
        each caller still learns its own outcome."""
        # Validate paths before touching the database: a file outside the
        # media root is a programming error, not an outage.
        files = [*turn.uploads, *turn.reply.files]
        storage = [self.media.relative(r.path) for r in files]
        if turn.job is not None:  # unknown until the turn's transaction commits
            self.job_summaries.forget(turn.job.job_id)
        if self._saving:  # another save is under way: this one goes in the next, shared
            done: asyncio.Future[tuple[Resource, ...]] = asyncio.get_running_loop().create_future()
            self._saves.append(_Save(turn, files, storage, done))
            return await done
        self._saving = True  # nothing under way: at once, in the caller's task
        try:
            return await self._save_alone(turn, files, storage)
        finally:
            if self._saves:  # asked meanwhile: saved together, then any asked meanwhile…
                self._saver = asyncio.get_running_loop().create_task(
                    self._save_queued(), name="turn-saves"
                )
            else:
                self._saving = False

    async def _save_queued(self) -> None:
        """Save the turns asked for while others were saved
        (:func:`~core.store.groups.write_groups`): together, one transaction
        (one commit) a group; if the database refuses any part of a group (a
        value, a handle, a lost lease), each of its turns is saved on its
        own, so only the one at fault fails or is saved in a plainer shape.
        A database that cannot be reached fails the group's callers at once
        (each alone would only wait to hear it again)."""
        try:
            await write_groups(
                self._saves,
                limit=SAVE_GROUP_LIMIT,
                together=self._save_together,
                alone=lambda w: self._save_alone(w.turn, w.files, w.storage),
                split=_each_on_its_own,
                kept=lambda w: not w.done.cancelled(),
                together_from=2,
                closed="the store closed before this turn was saved",
            )
        finally:
            self._saving = False

    async def _save_together(self, batch: list[_Save]) -> list[tuple[Resource, ...]]:
        """The turns of ``batch`` in one transaction, each as a first try
        (see :meth:`_save_alone`); raises if any part of any is refused."""
        attempts = [_Attempt(dict.fromkeys(_PARTS, 0)) for _ in batch]
        async with self._session("save turns", write=True) as s:
            finals = [
                await self._save(s, w.turn, w.files, w.storage, attempt)
                for w, attempt in zip(batch, attempts, strict=True)
            ]
        for w, attempt in zip(batch, attempts, strict=True):
            if w.turn.job is not None:
                self.job_summaries.remember(w.turn.job.job_id, attempt.summary)
        return finals

    async def _save_alone(
        self, turn: TurnRecord, files: list[Resource], storage: list[str]
    ) -> tuple[Resource, ...]:
        rid = turn.request.request_id
        shape = dict.fromkeys(_PARTS, 0)
        clashes = 0
        while True:
            attempt = _Attempt(dict(shape))
            try:
                async with self._session("save the turn", write=True) as s:
                    final = await self._save(s, turn, files, storage, attempt)
                if turn.job is not None:
                    self.job_summaries.remember(turn.job.job_id, attempt.summary)
                return final
            except StoreRejected as exc:
                cause = exc.__cause__ or exc
                if unique_violation(cause) and attempt.part == "files":
                    clashes += 1
                    if clashes < SAVE_ATTEMPTS:
                        log.info("handle clash saving %s, retrying", rid)
                        continue
                part = attempt.part
                parts = [part] if part in _PARTS else list(_PARTS) if part == "commit" else []
                bumped = [p for p in parts if shape[p] < _PARTS[p]]
                if not bumped:
                    log.error(
                        "request %s: the database refused the turn (%s, at %s); not saved",
                        rid,
                        describe_db_error(cause),
                        part,
                    )
                    raise
                for p in bumped:
                    shape[p] += 1
                log.error(
                    "request %s: the database refused the %s of the turn (%s); saving the "
                    "turn again with %s",
                    rid,
                    part,
                    describe_db_error(cause),
                    ", ".join(f"{p} {_SHAPES[p][shape[p]]}" for p in bumped),
                )

    async def _save(
        self,
        s: AsyncConnection,
        turn: TurnRecord,
        files: list[Resource],
        storage: list[str],
        attempt: _Attempt,
    ) -> tuple[Resource, ...]:
        req, reply = turn.request, turn.reply
        shape = attempt.shape
        key = fit_key(req.conversation)
        now = utc(self.clock)
        # Upsert first: it takes the row (PG) or the write lock (SQLite), so
        # concurrent writers to one conversation serialise from here on.
        attempt.part = "conversation"
        cid: int = (
            await s.execute(self._upsert_conversation, {**_key_params(key), "now": now})
        ).scalar_one()
        # The handles this turn adds: none may be taken in the conversation.
        # One conversation's turns run one at a time (core.jobs), so a taken
        # one is a bug; a rename would leave the answer, which named the file
        # already, pointing at another one: refuse the turn (StoreConflict).
        # Within the turn it is checked here; against the conversation's files
        # by the table's unique (conversation, handle) key when they are added.
        ascii_files = shape["files"] >= 1
        handles = [fit_handle(r.handle, _RESOURCE["handle"], ascii_only=ascii_files) for r in files]
        seen: set[str] = set()
        for handle in handles:
            if handle in seen:
                raise self._handle_taken(req.request_id, key, [handle])
            seen.add(handle)

        message_ids: dict[str, int] = {}
        # one statement each: the user's message gets the lower id
        for role, user_id, text in (
            ("user", req.user_id, req.text),
            ("assistant", None, reply.text),
        ):
            attempt.part = role
            row = self._message(cid, req.request_id, role, user_id, text, shape[role])
            message_ids[role] = (await s.execute(_INSERT_MESSAGE, row)).scalar_one()

        final: list[Resource] = []
        renamed: dict[str, str] = {}
        rows: list[dict[str, Any]] = []
        n_uploads = len(turn.uploads)
        for i, (res, rel, handle) in enumerate(zip(files, storage, handles, strict=True)):
            if handle != res.handle:
                renamed[res.handle] = handle
            rows.append(
                {
                    "conversation_id": cid,
                    "message_id": message_ids["user" if i < n_uploads else "assistant"],
                    "handle": handle,
                    "kind": fit(res.kind, _RESOURCE["kind"], ascii_only=ascii_files),
                    "mime": fit(res.mime, _RESOURCE["mime"], ascii_only=ascii_files),
                    "sha256": fit(res.sha256, _RESOURCE["sha256"], ascii_only=ascii_files),
                    "size": min(max(res.size, 0), INT64_MAX),
                    "storage_path": rel,
                    "source": fit(res.source, _RESOURCE["source"], ascii_only=ascii_files),
                    "task_id": fit_int32(res.task_id),
                    "created_at": now,
                }
            )
            final.append(dataclasses.replace(res, handle=handle))
        if rows and shape["files"] < 2:
            attempt.part = "files"
            try:
                await s.execute(_INSERT_RESOURCES, rows)
            except DB_ERRORS as exc:
                if unique_violation(exc):
                    raise self._handle_taken(req.request_id, key, handles) from exc
                raise
        elif rows:
            log.error(
                "request %s: files not recorded (the database refused them): %s",
                req.request_id,
                [r["handle"] for r in rows],
            )
        if reply.tasks and shape["tasks"] < 3:
            attempt.part = "tasks"
            await s.execute(
                _INSERT_TASK_RUNS,
                [
                    self._task_run(
                        message_ids["assistant"], req.request_id, t, renamed, shape["tasks"]
                    )
                    for t in reply.tasks
                ],
            )
        if turn.usage is not None and shape["usage"] < 1:
            attempt.part = "usage"
            await insert_usage(s, self.db.dialect, turn.usage)
        elif turn.usage is not None:
            log.error("request %s: usage not recorded (the database refused it)", req.request_id)
        if turn.job is not None:
            attempt.part = "job"
            fence = turn.job
            checkpoint = fence.checkpoint(tuple(final))
            attempt.summary = await mark_saved(s, fence.job_id, fence.owner, checkpoint)
        attempt.part = "commit"
        if renamed:
            log.info("request %s: handles renamed on save: %s", req.request_id, renamed)
        return tuple(final)

    @staticmethod
    def _handle_taken(request_id: str, key: ConversationKey, handles: list[str]) -> StoreConflict:
        which = (
            f"file handle {handles[0]} is"
            if len(handles) == 1
            else (f"file handles {', '.join(handles)}: one of them is")
        )
        return StoreConflict(
            f"request {request_id}: the {which} already taken in {key}; the turn is not saved"
        )

    def _message(
        self, cid: int, request_id: str, role: str, user_id: str | None, text: str, level: int
    ) -> dict[str, Any]:
        """A ``messages`` row."""
        ascii_only = level >= 1
        return {
            "conversation_id": cid,
            "request_id": fit(request_id, _MESSAGE["request_id"], ascii_only=ascii_only),
            "role": role,
            "user_id": None if level >= 2 else fit_user(user_id, ascii_only=ascii_only),
            "text": NOT_STORED.format(n=len(text))
            if level >= 2
            else clean_text(text, ascii_only=ascii_only),
            "created_at": utc(self.clock),
        }

    @staticmethod
    def _task_run(
        message_id: int,
        request_id: str,
        record: TaskRecord,
        renamed: dict[str, str],
        level: int = 0,
    ) -> dict[str, Any]:
        """A ``task_runs`` row."""
        ascii_only = level >= 1
        bare = level >= 2
        result: dict[str, Any] | None = None
        if record.result is not None and not bare:
            cleaned = clean_json(record.result, ascii_only=ascii_only)
            result = cleaned if isinstance(cleaned, dict) else {"value": cleaned}
        if record.files:
            result = dict(result or {})
            result["files"] = [
                fit_handle(renamed.get(h, h), _RESOURCE["handle"], ascii_only=ascii_only)
                for h in record.files
            ]
        index = fit_int32(record.id)
        if index is None:  # the plan's id is kept whole in the JSON
            result = dict(result or {})
            result["task_id"] = clean_json(record.id)
        model = None if bare or record.model is None else record.model
        return {
            "message_id": message_id,
            "request_id": fit(request_id, _TASK_RUN["request_id"], ascii_only=ascii_only),
            "task_index": -1 if index is None else index,
            "task": fit(str(record.task), _TASK_RUN["task"], ascii_only=ascii_only),
            "model": None
            if model is None
            else fit(model, _TASK_RUN["model"], ascii_only=ascii_only),
            "status": fit(str(record.status), _TASK_RUN["status"], ascii_only=ascii_only),
            "started": aware(record.started),
            "ended": aware(record.ended),
            "error": None
            if bare or record.error is None
            else clean_text(record.error, ascii_only=ascii_only),
            "args": {} if bare else clean_json(dict(record.args), ascii_only=ascii_only),
            "result": result,
        }

    async def forget(self, key: ConversationKey, user_id: str | None = None) -> int:
        """Delete the conversation's messages (only ``user_id``'s turns when
        given: their requests and the replies to them); files and task runs go
        with them.  Returns the number of messages deleted."""
        key = fit_key(key)
        user_id = fit_user(user_id)
        async with self.db.transaction("forget the conversation", write=True) as s:
            cid = await self._conversation_id(s, key)
            if cid is None:
                return 0
            where = Message.conversation_id == cid
            if user_id is not None:
                mine = sa.select(Message.request_id).where(
                    Message.conversation_id == cid,
                    Message.role == "user",
                    Message.user_id == user_id,
                )
                where = sa.and_(where, Message.request_id.in_(mine))
            result = await s.execute(
                sa.delete(Message).where(where), execution_options={"synchronize_session": False}
            )
            deleted: int = result.rowcount  # type: ignore[attr-defined]
            if user_id is None:
                await s.execute(sa.delete(Conversation).where(Conversation.id == cid))
            return deleted

    async def asked(self, request_id: str) -> tuple[ConversationKey, str, str] | None:
        """Where request ``request_id`` was asked, by whom, and its text
        (None: not saved, or forgotten)."""
        async with self.db.transaction("find the request") as s:
            row = (
                await s.execute(
                    sa.select(Conversation, Message)
                    .join(Message, Message.conversation_id == Conversation.id)
                    .where(Message.request_id == request_id, Message.role == "user")
                    .limit(1)
                )
            ).first()
            if row is None:
                return None
            c, m = row
            key = ConversationKey(c.platform, c.scope, c.channel, c.thread or None)
            return key, m.user_id or "", m.text

    async def claim_event(self, source: str, event_id: str) -> bool:
        """Record a platform event; False if it was already recorded (a
        redelivery, here or in another replica)."""
        source, event_id = fit(source, _EVENT["source"]), fit(event_id, _EVENT["event_id"])
        now = utc(self.clock)
        async with self._session("record the event", write=True) as s:
            result = await s.execute(
                self._insert(ProcessedEvent)
                .values(source=source, event_id=event_id, created_at=now)
                .on_conflict_do_nothing(index_elements=["source", "event_id"])
            )
            claimed = bool(result.rowcount == 1)  # type: ignore[attr-defined]
            if self.clock.monotonic() - self._last_prune >= PRUNE_EVERY:
                self._last_prune = self.clock.monotonic()
                await s.execute(
                    sa.delete(ProcessedEvent).where(ProcessedEvent.created_at < now - EVENT_TTL)
                )
            return claimed
