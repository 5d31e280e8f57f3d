"""The tables, as SQLAlchemy 2 declarative models.

Types are portable across SQLite and PostgreSQL (``sa.JSON``, timezone-aware
datetimes stored as UTC).  Children are removed by the database itself
(``ON DELETE CASCADE``; SQLite needs ``PRAGMA foreign_keys=ON``, which
:class:`core.store.db.Database` sets on every connection).  Relationships are
``lazy="raise"``: async code must say what it loads, never trip over an
implicit lazy load.  The schema is created by the alembic migrations in
``migrations/versions``; keep them in step with this file (a test compares).
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Dialect
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column, relationship

# Named constraints: alembic's batch mode on SQLite needs names to alter them.
NAMING_CONVENTION = {
    "ix": "ix_%(column_0_label)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}


def utcnow() -> datetime:
    return datetime.now(UTC)


class UTCDateTime(sa.TypeDecorator[datetime]):
    """A timezone-aware UTC datetime on every backend.

    PostgreSQL keeps the offset (``timestamptz``); SQLite drops it, so values
    are normalised to UTC on the way in and tagged UTC on the way out.
    """

    impl = sa.DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError(f"naive datetime {value!r}: the store keeps aware UTC datetimes")
        return value.astimezone(UTC)

    def process_result_value(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            return value.replace(tzinfo=UTC)
        return value.astimezone(UTC)


def string_lengths(model: type[Base]) -> dict[str, int]:
    """Column name -> n of every ``String(n)`` column of ``model`` (not Text),
    read once at import by the code that fits values to them (an ORM
    attribute's ``.type`` is a slow lookup on a hot path)."""
    return {
        c.name: c.type.length
        for c in model.__table__.columns
        if isinstance(c.type, sa.String) and c.type.length
    }


class Base(DeclarativeBase):
    metadata = sa.MetaData(naming_convention=NAMING_CONVENTION)
    # SQLAlchemy reads this as a plain class attribute (not a ClassVar).
    type_annotation_map = {datetime: UTCDateTime, dict[str, Any]: sa.JSON}  # noqa: RUF012


class Conversation(Base):
    """A channel or a thread on one platform.  ``thread`` is '' for a channel
    (not NULL) so the unique key also covers channels."""

    __tablename__ = "conversations"
    __table_args__ = (sa.UniqueConstraint("platform", "scope", "channel", "thread"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    platform: Mapped[str] = mapped_column(sa.String(32))
    scope: Mapped[str] = mapped_column(sa.String(255))
    channel: Mapped[str] = mapped_column(sa.String(255))
    thread: Mapped[str] = mapped_column(sa.String(255), default="")
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(default=utcnow)

    messages: Mapped[list[Message]] = relationship(
        back_populates="conversation", lazy="raise", passive_deletes=True
    )


class Message(Base):
    """One side of a turn: the user's request or the assistant's reply
    (both carry the turn's ``request_id``)."""

    __tablename__ = "messages"
    __table_args__ = (
        sa.Index("ix_messages_conversation_id_id", "conversation_id", "id"),
        sa.Index("ix_messages_conversation_id_request_id", "conversation_id", "request_id"),
    )

    id: Mapped[int] = mapped_column(primary_key=True)
    conversation_id: Mapped[int] = mapped_column(
        sa.ForeignKey("conversations.id", ondelete="CASCADE")
    )
    request_id: Mapped[str] = mapped_column(sa.String(64))
    role: Mapped[str] = mapped_column(sa.String(16))  # user | assistant
    user_id: Mapped[str | None] = mapped_column(sa.String(255))
    text: Mapped[str] = mapped_column(sa.Text)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)

    conversation: Mapped[Conversation] = relationship(back_populates="messages", lazy="raise")
    resources: Mapped[list[ResourceRow]] = relationship(
        back_populates="message", lazy="raise", passive_deletes=True
    )
    task_runs: Mapped[list[TaskRun]] = relationship(
        back_populates="message", lazy="raise", passive_deletes=True
    )


class ResourceRow(Base):
    """A file a message carried.  Bytes live in the media store at
    ``storage_path`` (relative to the media root); ``handle`` is the name the
    user and the LLM use, unique within a conversation."""

    __tablename__ = "resources"
    __table_args__ = (sa.UniqueConstraint("conversation_id", "handle"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    conversation_id: Mapped[int] = mapped_column(
        sa.ForeignKey("conversations.id", ondelete="CASCADE")
    )
    message_id: Mapped[int] = mapped_column(
        sa.ForeignKey("messages.id", ondelete="CASCADE"), index=True
    )
    handle: Mapped[str] = mapped_column(sa.String(255))
    kind: Mapped[str] = mapped_column(sa.String(16))
    mime: Mapped[str] = mapped_column(sa.String(255))
    sha256: Mapped[str] = mapped_column(sa.String(64))
    size: Mapped[int] = mapped_column(sa.BigInteger)
    storage_path: Mapped[str] = mapped_column(sa.String(512))
    source: Mapped[str] = mapped_column(sa.String(16))  # upload | generated
    task_id: Mapped[int | None] = mapped_column()
    created_at: Mapped[datetime] = mapped_column(default=utcnow)

    message: Mapped[Message] = relationship(back_populates="resources", lazy="raise")


class TaskRun(Base):
    """What one planned task did in a turn (model, timing, outcome)."""

    __tablename__ = "task_runs"

    id: Mapped[int] = mapped_column(primary_key=True)
    message_id: Mapped[int] = mapped_column(
        sa.ForeignKey("messages.id", ondelete="CASCADE"), index=True
    )
    request_id: Mapped[str] = mapped_column(sa.String(64))
    task_index: Mapped[int] = mapped_column()
    task: Mapped[str] = mapped_column(sa.String(64))
    model: Mapped[str | None] = mapped_column(sa.String(255))
    status: Mapped[str] = mapped_column(sa.String(16))
    started: Mapped[datetime | None] = mapped_column()
    ended: Mapped[datetime | None] = mapped_column()
    error: Mapped[str | None] = mapped_column(sa.Text)
    args: Mapped[dict[str, Any]] = mapped_column(default=dict)
    result: Mapped[dict[str, Any] | None] = mapped_column()

    message: Mapped[Message] = relationship(back_populates="task_runs", lazy="raise")


class ProcessedEvent(Base):
    """A platform event id already handled, so redeliveries are dropped even
    across restarts and replicas."""

    __tablename__ = "processed_events"

    source: Mapped[str] = mapped_column(sa.String(32), primary_key=True)
    event_id: Mapped[str] = mapped_column(sa.String(255), primary_key=True)
    created_at: Mapped[datetime] = mapped_column(default=utcnow, index=True)


class QuotaCounter(Base):
    """Requests and LLM tokens one user or server used in one window (a UTC
    minute or day), shared by every process on the store so quotas hold
    across restarts and replicas.  ``key`` is ``user:<platform>:<id>`` or
    ``server:<platform>:<scope>``; ``window_start`` is the window's first
    second (Unix time).  Rows of windows long past are pruned."""

    __tablename__ = "quota_counters"

    key: Mapped[str] = mapped_column(sa.String(255), primary_key=True)
    period: Mapped[str] = mapped_column(sa.String(8), primary_key=True)  # minute | day
    window_start: Mapped[int] = mapped_column(sa.BigInteger, primary_key=True, index=True)
    requests: Mapped[int] = mapped_column(default=0)
    tokens: Mapped[int] = mapped_column(sa.BigInteger, default=0)


class StoredJob(Base):
    """A request the bot accepted, until it has been answered: a job's row in
    ``turn_jobs`` (see :mod:`core.jobs`).

    ``payload`` is the adapter's opaque JSON (what it needs to rebuild the
    request and reply); ``checkpoint`` is the core's (stored uploads, the plan,
    every finished task, then the saved reply).  ``dedup_key`` is the
    platform's event id: a redelivery finds its job instead of a second one.
    ``lease_owner``/``lease_expires``: the process holding the job (queued:
    reserved by the process that accepted it; running: working on it).
    ``upload_bytes``: the sizes of the request's files as the platform declared
    them when it was accepted (0: text only), what admission weighs it by.
    """

    __tablename__ = "turn_jobs"
    __table_args__ = (
        sa.UniqueConstraint("dedup_key"),
        sa.Index("ix_turn_jobs_conversation_id", "conversation", "id"),
        sa.Index("ix_turn_jobs_state_id", "state", "id"),
    )

    id: Mapped[int] = mapped_column(primary_key=True)
    kind: Mapped[str] = mapped_column(sa.String(32))
    dedup_key: Mapped[str | None] = mapped_column(sa.String(255))
    conversation: Mapped[str] = mapped_column(sa.String(800))
    request_id: Mapped[str] = mapped_column(sa.String(64))
    state: Mapped[str] = mapped_column(sa.String(16))  # queued | running | done
    payload: Mapped[dict[str, Any]] = mapped_column(default=dict)
    checkpoint: Mapped[dict[str, Any] | None] = mapped_column()
    status_ref: Mapped[dict[str, Any] | None] = mapped_column()
    lease_owner: Mapped[str | None] = mapped_column(sa.String(128))
    lease_expires: Mapped[datetime | None] = mapped_column()
    attempts: Mapped[int] = mapped_column(default=0)
    upload_bytes: Mapped[int] = mapped_column(sa.BigInteger, default=0, server_default="0")
    error: Mapped[str | None] = mapped_column(sa.Text)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(default=utcnow)
    finished_at: Mapped[datetime | None] = mapped_column()


class UsageTurn(Base):
    """What one turn used (see :mod:`core.usage`): its LLM calls and tokens,
    by whom and where.  ``request_id`` is unique, so a turn is counted once
    even when a resumed request records it again.  ``server`` is the
    conversation key's scope (a Discord server, a Slack workspace, ``dm``,
    the CLI's ``local``); ``conversation`` is the whole key as text.  Costs
    are micro-USD, NULL when nothing priced the calls."""

    __tablename__ = "usage_turns"
    __table_args__ = (
        sa.UniqueConstraint("request_id"),
        sa.Index("ix_usage_turns_server_created_at", "platform", "server", "created_at"),
        sa.Index("ix_usage_turns_user_created_at", "platform", "user_id", "created_at"),
    )

    id: Mapped[int] = mapped_column(primary_key=True)
    request_id: Mapped[str] = mapped_column(sa.String(64))
    created_at: Mapped[datetime] = mapped_column(default=utcnow, index=True)
    platform: Mapped[str] = mapped_column(sa.String(32))
    server: Mapped[str] = mapped_column(sa.String(255))
    conversation: Mapped[str] = mapped_column(sa.String(800))
    user_id: Mapped[str] = mapped_column(sa.String(255))
    llm_model: Mapped[str | None] = mapped_column(sa.String(255))
    llm_host: Mapped[str | None] = mapped_column(sa.String(255))
    llm_calls: Mapped[int] = mapped_column(default=0)
    prompt_tokens: Mapped[int] = mapped_column(sa.BigInteger, default=0)
    completion_tokens: Mapped[int] = mapped_column(sa.BigInteger, default=0)
    llm_cost_micro_usd: Mapped[int | None] = mapped_column(sa.BigInteger)
    error: Mapped[bool] = mapped_column(default=False)


class UsageModelCall(Base):
    """One task of a turn that was sent to a model: which model and provider,
    how long it took, its cost in micro-USD (NULL: not priced)."""

    __tablename__ = "usage_model_calls"

    id: Mapped[int] = mapped_column(primary_key=True)
    turn_id: Mapped[int] = mapped_column(
        sa.ForeignKey("usage_turns.id", ondelete="CASCADE"), index=True
    )
    task: Mapped[str] = mapped_column(sa.String(64))
    model: Mapped[str] = mapped_column(sa.String(255))
    provider: Mapped[str | None] = mapped_column(sa.String(64))
    backend: Mapped[str | None] = mapped_column(sa.String(16))
    status: Mapped[str] = mapped_column(sa.String(16))
    seconds: Mapped[float] = mapped_column(sa.Float, default=0.0)
    cost_micro_usd: Mapped[int | None] = mapped_column(sa.BigInteger)


class ServerSettingsRow(Base):
    """One server's (or workspace's) settings, as the JSON of
    :class:`core.server_settings.ServerSettings`; keys left out inherit the
    deployment's settings."""

    __tablename__ = "server_settings"

    platform: Mapped[str] = mapped_column(sa.String(32), primary_key=True)
    server: Mapped[str] = mapped_column(sa.String(255), primary_key=True)
    settings: Mapped[dict[str, Any]] = mapped_column(default=dict)
    updated_at: Mapped[datetime] = mapped_column(default=utcnow)
    updated_by: Mapped[str | None] = mapped_column(sa.String(255))


class Feedback(Base):
    """A person's 👍 (``good``) or 👎 (``bad``) on an answer, kept with its
    turn (``request_id``, the turn's messages carry it); a person's last
    click on an answer is the one kept."""

    __tablename__ = "feedback"
    __table_args__ = (sa.UniqueConstraint("request_id", "user_id"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    request_id: Mapped[str] = mapped_column(sa.String(64))
    conversation: Mapped[str] = mapped_column(sa.String(800))
    platform: Mapped[str] = mapped_column(sa.String(32))
    user_id: Mapped[str] = mapped_column(sa.String(255))
    rating: Mapped[str] = mapped_column(sa.String(16))  # good | bad
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(default=utcnow)
