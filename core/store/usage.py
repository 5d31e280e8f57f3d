"""Usage rows: one per turn (``usage_turns``), one per model call
(``usage_model_calls``), written together by :func:`insert_usage` — in the
transaction that saves the turn (:meth:`core.store.repo.Repo.save_turn`),
or in one of their own (:meth:`UsageStore.record`) for a turn that was not
saved — and summed by user, channel, server or model (see :mod:`core.usage`).

A turn is recorded once: its ``request_id`` is unique, and a second record
of the same request (a resumed job recording again) inserts nothing.  Text
columns go through the store's :func:`~core.store.repo.fit`, so a long or
odd id maps to the same row every time, on SQLite and PostgreSQL alike.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from contextlib import AbstractAsyncContextManager
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncSession

from core.store.db import Database, Tx, dialect_insert
from core.store.models import UsageModelCall, UsageTurn, string_lengths
from core.usage import (
    GroupBy,
    TurnUsage,
    UsageFilter,
    UsageTotals,
    add_costs,
    from_micro,
    to_micro,
)

T, C = UsageTurn, UsageModelCall


_TURN, _CALL = string_lengths(UsageTurn), string_lengths(UsageModelCall)


def _fit(value: str, limit: int) -> str:
    # Imported here: the repo imports this module (a saved turn's usage
    # rows are inserted in its transaction), as core.store.jobs does.
    from core.store.repo import fit

    return fit(value, limit)


def _fit_opt(value: str | None, limit: int) -> str | None:
    return None if value is None else _fit(value, limit)


@functools.cache
def _insert_turn(dialect: str) -> Any:
    """The ``usage_turns`` insert (nothing on a known request), built once per
    dialect with its values bound at execution."""
    insert = dialect_insert(dialect)
    return (
        insert(UsageTurn)
        .on_conflict_do_nothing(index_elements=["request_id"])
        .returning(UsageTurn.id)
    )


_INSERT_CALLS = sa.insert(UsageModelCall)


async def insert_usage(s: Tx, dialect: str, u: TurnUsage) -> bool:
    """Insert one turn's usage rows in the caller's transaction (the one
    place they are written: :meth:`UsageStore.record`, and the turn's own
    save); False when this request was recorded before."""
    values = {
        "request_id": _fit(u.request_id, _TURN["request_id"]),
        "created_at": u.at,
        "platform": _fit(u.platform, _TURN["platform"]),
        "server": _fit(u.server, _TURN["server"]),
        "conversation": _fit(u.conversation, _TURN["conversation"]),
        "user_id": _fit(u.user_id, _TURN["user_id"]),
        "llm_model": _fit_opt(u.llm_model, _TURN["llm_model"]),
        "llm_host": _fit_opt(u.llm_host, _TURN["llm_host"]),
        "llm_calls": max(0, u.llm_calls),
        "prompt_tokens": max(0, u.prompt_tokens),
        "completion_tokens": max(0, u.completion_tokens),
        "llm_cost_micro_usd": to_micro(u.llm_cost_usd),
        "error": u.error,
    }
    turn_id = (await s.execute(_insert_turn(dialect), values)).scalar()
    if turn_id is None:
        return False
    if u.model_calls:
        await s.execute(
            _INSERT_CALLS,
            [
                {
                    "turn_id": turn_id,
                    "task": _fit(c.task, _CALL["task"]),
                    "model": _fit(c.model, _CALL["model"]),
                    "provider": _fit_opt(c.provider, _CALL["provider"]),
                    "backend": _fit_opt(c.backend, _CALL["backend"]),
                    "status": _fit(c.status, _CALL["status"]),
                    "seconds": max(0.0, float(c.seconds)),
                    "cost_micro_usd": to_micro(c.cost_usd),
                }
                for c in u.model_calls
            ],
        )
    return True


class UsageStore:
    def __init__(self, db: Database) -> None:
        self.db = db

    def _session(
        self, action: str, *, write: bool = False
    ) -> AbstractAsyncContextManager[AsyncSession]:
        return self.db.transaction(action, write=write)

    # --- writing --------------------------------------------------------

    async def record(self, u: TurnUsage) -> bool:
        """Store one turn's usage in a transaction of its own (a turn that is
        saved writes it in the turn's: :class:`~core.store.repo.TurnRecord`);
        False when this request was recorded before."""
        async with self._session("record the usage", write=True) as s:
            return await insert_usage(s, self.db.dialect, u)

    # --- reading --------------------------------------------------------

    async def totals(self, by: GroupBy, where: UsageFilter | None = None) -> list[UsageTotals]:
        """The sums of every group with use in ``where``, busiest first."""
        where = where or UsageFilter()
        async with self._session("sum the usage") as s:
            if by is GroupBy.MODEL:
                rows = await self._by_model(s, where)
                return sorted(rows, key=lambda r: (r.key[0], -(r.llm_calls + r.model_calls), r.key))
            keys = _keys(by)
            turns = await s.execute(
                sa.select(
                    *keys,
                    sa.func.count(T.id),
                    sa.func.sum(T.llm_calls),
                    sa.func.sum(T.prompt_tokens),
                    sa.func.sum(T.completion_tokens),
                    sa.func.sum(T.llm_cost_micro_usd),
                    sa.func.sum(sa.case((T.llm_cost_micro_usd.is_(None), T.llm_calls), else_=0)),
                    sa.func.sum(sa.case((T.error, 1), else_=0)),
                )
                .where(*_conditions(where))
                .group_by(*keys)
            )
            calls = {
                tuple(r[: len(keys)]): r[len(keys) :]
                for r in (await s.execute(_calls_query(keys, where))).all()
            }
        out: list[UsageTotals] = []
        for r in turns.all():
            key = tuple(str(v) for v in r[: len(keys)])
            n, llm_calls, prompt, completion, llm_cost, llm_unpriced, errors = r[len(keys) :]
            m_calls, m_failed, m_seconds, m_cost, m_unpriced = calls.get(
                tuple(r[: len(keys)]), (0, 0, 0.0, None, 0)
            )
            out.append(
                UsageTotals(
                    key,
                    requests=int(n),
                    llm_calls=int(llm_calls or 0),
                    prompt_tokens=int(prompt or 0),
                    completion_tokens=int(completion or 0),
                    model_calls=int(m_calls or 0),
                    model_failures=int(m_failed or 0),
                    model_seconds=float(m_seconds or 0.0),
                    cost_usd=add_costs(_usd(llm_cost), _usd(m_cost)),
                    unpriced_calls=int(llm_unpriced or 0) + int(m_unpriced or 0),
                    errors=int(errors or 0),
                )
            )
        return sorted(out, key=lambda t: (-t.requests, -t.tokens, t.key))

    async def _by_model(self, s: AsyncSession, where: UsageFilter) -> list[UsageTotals]:
        llm = await s.execute(
            sa.select(
                T.llm_model,
                T.llm_host,
                sa.func.count(T.id),
                sa.func.sum(T.llm_calls),
                sa.func.sum(T.prompt_tokens),
                sa.func.sum(T.completion_tokens),
                sa.func.sum(T.llm_cost_micro_usd),
                sa.func.sum(sa.case((T.llm_cost_micro_usd.is_(None), T.llm_calls), else_=0)),
            )
            .where(*_conditions(where), T.llm_calls > 0)
            .group_by(T.llm_model, T.llm_host)
        )
        out = [
            UsageTotals(
                ("llm", model or "?", host or ""),
                requests=int(n),
                llm_calls=int(calls or 0),
                prompt_tokens=int(prompt or 0),
                completion_tokens=int(completion or 0),
                cost_usd=_usd(cost),
                unpriced_calls=int(unpriced or 0),
            )
            for model, host, n, calls, prompt, completion, cost, unpriced in llm.all()
        ]
        tasks = await s.execute(_calls_query([C.model, C.provider], where))
        out.extend(
            UsageTotals(
                ("task", model, provider or ""),
                model_calls=int(n),
                model_failures=int(failed or 0),
                model_seconds=float(seconds or 0.0),
                cost_usd=_usd(cost),
                unpriced_calls=int(unpriced or 0),
            )
            for model, provider, n, failed, seconds, cost, unpriced in tasks.all()
        )
        return out

    async def delete_before(self, before: datetime) -> int:
        """Delete the usage of turns recorded before ``before`` (retention);
        returns how many turns."""
        async with self._session("delete old usage", write=True) as s:
            result = await s.execute(sa.delete(UsageTurn).where(UsageTurn.created_at < before))
        return int(getattr(result, "rowcount", 0) or 0)


def _keys(by: GroupBy) -> list[Any]:
    if by is GroupBy.USER:
        return [T.platform, T.user_id]
    if by is GroupBy.CHANNEL:
        return [T.conversation]
    return [T.platform, T.server]


def _conditions(f: UsageFilter) -> list[sa.ColumnElement[bool]]:
    out: list[sa.ColumnElement[bool]] = []
    if f.platform is not None:
        out.append(T.platform == _fit(f.platform, _TURN["platform"]))
    if f.server is not None:
        out.append(T.server == _fit(f.server, _TURN["server"]))
    if f.user_id is not None:
        out.append(T.user_id == _fit(f.user_id, _TURN["user_id"]))
    if f.conversation is not None:
        out.append(T.conversation == _fit(f.conversation, _TURN["conversation"]))
    if f.since is not None:
        out.append(T.created_at >= f.since)
    if f.until is not None:
        out.append(T.created_at < f.until)
    return out


def _calls_query(keys: Sequence[Any], where: UsageFilter) -> sa.Select[Any]:
    return (
        sa.select(
            *keys,
            sa.func.count(C.id),
            sa.func.sum(sa.case((C.status == "failed", 1), else_=0)),
            sa.func.sum(C.seconds),
            sa.func.sum(C.cost_micro_usd),
            sa.func.sum(sa.case((C.cost_micro_usd.is_(None), 1), else_=0)),
        )
        .join(T, T.id == C.turn_id)
        .where(*_conditions(where))
        .group_by(*keys)
    )


def _usd(micro: Any) -> float | None:
    return from_micro(None if micro is None else int(micro))
