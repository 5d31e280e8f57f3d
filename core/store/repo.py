"""Queries in core types: conversation history in, whole turns out.

The agent never sees a row: it gets a :class:`History` (recent turns plus the
files the conversation can refer to, by handle) and hands back a
:class:`TurnRecord`, saved in one transaction.  Every database failure comes
out as :class:`core.errors.StoreUnavailable` so callers need not know the
driver.  Bytes are read only through the media store by storage path.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
import time
from collections.abc import AsyncIterator, Iterable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncSession

from core.errors import StoreUnavailable
from core.store.db import DB_ERRORS, Database, describe_db_error
from core.store.handles import allocate_handle
from core.store.media import MediaStore
from core.store.models import Conversation, Message, ProcessedEvent, ResourceRow, TaskRun, utcnow
from core.types import ConversationKey, Reply, Request, Resource, TaskRecord

log = logging.getLogger(__name__)

EVENT_TTL = timedelta(days=1)
PRUNE_EVERY = 3600.0  # seconds between prunes of processed_events, per process
SAVE_ATTEMPTS = 3  # a handle clash with a concurrent writer is retried this often


@dataclass(frozen=True)
class HistoryTurn:
    role: str  # user | assistant
    text: str
    user_id: str | None
    handles: tuple[str, ...]
    created_at: datetime


@dataclass(frozen=True)
class History:
    turns: list[HistoryTurn]
    resources: dict[str, Resource]  # handle -> Resource (absolute path)


@dataclass(frozen=True)
class TurnRecord:
    request: Request
    uploads: tuple[Resource, ...]  # the user's attachments, already in media, handles allocated
    reply: Reply  # text, generated files (Resources), task records


def _json_safe(value: Any) -> Any:
    """Task args/results may hold paths or numpy scalars: keep what JSON can say."""
    return json.loads(json.dumps(value, default=str))


class Repo:
    def __init__(self, db: Database, media: MediaStore) -> None:
        self.db = db
        self.media = media
        self._last_prune = float("-inf")
        # SQLite has one writer at a time: queue this process's writers here
        # instead of letting them spin on the file lock (busy_timeout).
        self._write_lock = asyncio.Lock() if db.dialect == "sqlite" else None

    # --- plumbing -------------------------------------------------------

    @asynccontextmanager
    async def _session(
        self,
        action: str,
        *,
        passthrough: tuple[type[Exception], ...] = (),
        write: bool = False,
    ) -> AsyncIterator[AsyncSession]:
        """A session in one transaction, rolled back on any error; DB
        failures come out as StoreUnavailable (except ``passthrough`` ones,
        which the caller handles)."""
        lock = self._write_lock if write else None
        try:
            if lock is not None:
                await lock.acquire()
            async with self.db.sessions() as session, session.begin():
                yield session
        except passthrough:
            raise
        except DB_ERRORS as exc:
            raise StoreUnavailable(
                f"the store could not {action} ({self.db.safe_url}): {describe_db_error(exc)}"
            ) from exc
        finally:
            if lock is not None:
                lock.release()

    def _insert(self, table: Any) -> Any:
        dialect = postgresql if self.db.dialect == "postgresql" else sqlite
        return dialect.insert(table)

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

    def _resource(self, row: ResourceRow) -> Resource:
        return Resource(
            handle=row.handle,
            kind=row.kind,
            mime=row.mime,
            path=self.media.path(row.storage_path),
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
        async with self._session("load the conversation history") as s:
            resources: dict[str, Resource] = {}
            cid = await self._conversation_id(s, key)
            if key.thread is not None and parent_resources > 0:
                rows = await s.scalars(
                    sa.select(ResourceRow)
                    .join(Conversation, Conversation.id == ResourceRow.conversation_id)
                    .where(
                        Conversation.platform == key.platform,
                        Conversation.scope == key.scope,
                        Conversation.channel == key.channel,
                        Conversation.id != (cid if cid is not None else -1),
                    )
                    .order_by(ResourceRow.id.desc())
                    .limit(parent_resources)
                )
                for row in rows.all():  # newest first: the newest wins a name clash
                    resources.setdefault(row.handle, self._resource(row))
            if cid is None:
                return History(turns=[], resources=resources)
            rows = await s.scalars(
                sa.select(ResourceRow)
                .where(ResourceRow.conversation_id == cid)
                .order_by(ResourceRow.id)
            )
            own = rows.all()
            for row in own:
                resources[row.handle] = self._resource(row)
            messages = (
                await s.scalars(
                    sa.select(Message)
                    .where(Message.conversation_id == cid)
                    .order_by(Message.id.desc())
                    .limit(max(turns, 0) * 2)
                )
            ).all()
        messages = list(reversed(messages))
        if messages and messages[0].role != "user":
            messages = messages[1:]  # the window cut a pair in half
        handles: dict[int, list[str]] = {}
        for row in own:
            handles.setdefault(row.message_id, []).append(row.handle)
        history = [
            HistoryTurn(
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
        keys = [key] + ([p] if (p := key.parent()) else [])
        async with self._session("list file handles") as s:
            return await self._taken(s, keys)

    async def _taken(self, s: AsyncSession, keys: Iterable[ConversationKey]) -> set[str]:
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

    async def prune_media(self, *, older_than: float = 3600.0) -> tuple[int, int]:
        """Remove media files no conversation refers to any more (after /forget)."""
        return await self.media.prune(await self.stored_paths(), older_than=older_than)

    async def read(self, resource: Resource) -> bytes:
        """The bytes of a stored resource, through the media store only
        (ValueError if its path is not inside the media root)."""
        return await self.media.read(self.media.relative(resource.path))

    # --- writing --------------------------------------------------------

    async def save_turn(self, turn: TurnRecord) -> tuple[Resource, ...]:
        """Persist one whole turn atomically; return the final resources
        (uploads then generated), renamed if a handle was taken meanwhile."""
        # Validate paths before touching the database: a file outside the
        # media root is a programming error, not an outage.
        files = [*turn.uploads, *turn.reply.files]
        storage = [self.media.relative(r.path) for r in files]
        for attempt in range(1, SAVE_ATTEMPTS + 1):
            try:
                async with self._session(
                    "save the turn", passthrough=(IntegrityError,), write=True
                ) as s:
                    return await self._save(s, turn, files, storage)
            except IntegrityError as exc:
                if attempt == SAVE_ATTEMPTS:
                    raise StoreUnavailable(
                        f"the store could not save the turn after {attempt} attempts: "
                        f"{describe_db_error(exc)}"
                    ) from exc
                log.info("handle clash saving %s, retrying", turn.request.request_id)
        raise AssertionError("unreachable")

    async def _save(
        self, s: AsyncSession, turn: TurnRecord, files: list[Resource], storage: list[str]
    ) -> tuple[Resource, ...]:
        req, reply = turn.request, turn.reply
        key = req.conversation
        now = utcnow()
        # Upsert first: it takes the row (PG) or the write lock (SQLite), so
        # concurrent writers to one conversation serialise from here on.
        insert = self._insert(Conversation).values(
            platform=key.platform,
            scope=key.scope,
            channel=key.channel,
            thread=key.thread or "",
            created_at=now,
            updated_at=now,
        )
        cid: int = (
            await s.execute(
                insert.on_conflict_do_update(
                    index_elements=["platform", "scope", "channel", "thread"],
                    set_={"updated_at": now},
                ).returning(Conversation.id)
            )
        ).scalar_one()
        own = await self._taken(s, [key])
        parent = key.parent()
        visible = own | (await self._taken(s, [parent]) if parent else set())

        user = Message(
            conversation_id=cid,
            request_id=req.request_id,
            role="user",
            user_id=req.user_id,
            text=req.text,
            created_at=now,
        )
        s.add(user)
        await s.flush()  # one flush each: the user's message must get the lower id
        assistant = Message(
            conversation_id=cid,
            request_id=req.request_id,
            role="assistant",
            user_id=None,
            text=reply.text,
            created_at=utcnow(),
        )
        s.add(assistant)
        await s.flush()

        final: list[Resource] = []
        renamed: dict[str, str] = {}
        n_uploads = len(turn.uploads)
        for i, (res, rel) in enumerate(zip(files, storage, strict=True)):
            handle = res.handle
            if handle in own:
                handle = allocate_handle(visible | own, res.handle)
                renamed[res.handle] = handle
            own.add(handle)
            msg = user if i < n_uploads else assistant
            s.add(
                ResourceRow(
                    conversation_id=cid,
                    message_id=msg.id,
                    handle=handle,
                    kind=res.kind,
                    mime=res.mime,
                    sha256=res.sha256,
                    size=res.size,
                    storage_path=rel,
                    source=res.source,
                    task_id=res.task_id,
                    created_at=now,
                )
            )
            final.append(dataclasses.replace(res, handle=handle))
        s.add_all(self._task_run(assistant.id, req.request_id, t, renamed) for t in reply.tasks)
        await s.flush()
        if renamed:
            log.info("request %s: handles renamed on save: %s", req.request_id, renamed)
        return tuple(final)

    @staticmethod
    def _task_run(
        message_id: int, request_id: str, record: TaskRecord, renamed: dict[str, str]
    ) -> TaskRun:
        result = None if record.result is None else _json_safe(record.result)
        if record.files:
            result = dict(result or {})
            result["files"] = [renamed.get(h, h) for h in record.files]
        return TaskRun(
            message_id=message_id,
            request_id=request_id,
            task_index=record.id,
            task=record.task,
            model=record.model,
            status=str(record.status),
            started=record.started,
            ended=record.ended,
            error=record.error,
            args=_json_safe(dict(record.args)),
            result=result,
        )

    async def forget(self, key: ConversationKey, user_id: str | None = None) -> int:
        """Delete the conversation's messages (only ``user_id``'s turns when
        given: their requests and the replies to them); files and task runs go
        with them.  Returns the number of messages deleted."""
        async with self._session("forget the conversation", write=True) as s:
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

    async def claim_event(self, source: str, event_id: str) -> bool:
        """Record a platform event; False if it was already recorded (a
        redelivery, here or in another replica)."""
        now = utcnow()
        async with self._session("record the event", write=True) as s:
            result = await s.execute(
                self._insert(ProcessedEvent)
                .values(source=source, event_id=event_id, created_at=now)
                .on_conflict_do_nothing(index_elements=["source", "event_id"])
            )
            claimed = bool(result.rowcount == 1)  # type: ignore[attr-defined]
            if time.monotonic() - self._last_prune >= PRUNE_EVERY:
                self._last_prune = time.monotonic()
                await s.execute(
                    sa.delete(ProcessedEvent).where(ProcessedEvent.created_at < now - EVENT_TTL)
                )
            return claimed
