"""The floor of CPU per request: the client libraries alone, doing exactly
the calls one single-task request makes.

    python -m benchmarks.request_floor [--store sqlite,pg] [--requests 200]
                                       [--burst 500] [--profile PATH]

Issue 20 asks for ≤ 8 ms of CPU per request through the job queue and
≤ 6 for "500 at once: wall ÷ one request", or the floor shown.  This is the
floor: what the libraries the bot uses cost for one request's calls, with
none of the bot's own code running.

1. **Record** one real request through the bot (the single-task shape of
   ``benchmarks.concurrency_cpu``'s job-queue loop, the same settings: the
   harness's ``bench_settings``, a :class:`BenchAdapter` job), in a fresh
   conversation on a server seen before (as all but the first of those
   loops' requests): every chat call the LLM fake received (its JSON body,
   streamed or not), the model call the task-API fake received, and every SQL
   statement with its parameters and its transaction (SQLAlchemy's engine
   events: ``begin``, ``after_cursor_execute``, ``commit``/``rollback``).
2. **Replay** them in a process of its own that runs no core/ or bot/ code
   (it loads only the one-call aiosqlite adapter the bot's SQLite engine is
   built on, ``core/store/sqlite_driver.py``, and the collector settings the
   bot's processes take once started, ``bot/heap.py``, each from its file: no
   package of the project is imported):

   * the chat calls through ``openai.AsyncOpenAI`` as ``core/llm.py`` makes
     them (``client.post("/chat/completions", …)`` with the body as recorded,
     ``cast_to=ChatCompletion``; a streamed one (both are, the plan and the
     answer) with ``stream_cls=AsyncStream[object]``, read to its end), on the SDK's
     aiohttp transport (``openai.DefaultAioHttpClient``) with the limits and
     keep-alive ``core/http_client.py`` sets; its two wrappers (error
     mapping, the hung-up-socket check) are the bot's code and are left out;
   * the model call through ``huggingface_hub.AsyncInferenceClient`` (the
     same task method, the model as ``{HF_INFERENCE_URL}/models/{id}``), its
     session the SDK's own made on the same aiohttp transport (as
     ``core.http_client.like`` builds it, without the bot's redirect check),
     set with ``huggingface_hub.set_async_client_factory``;
   * the SQL: the same statements with the same parameters in the same
     transactions through SQLAlchemy's asyncio engine, the same driver and
     engine options as ``core/store/db.py`` (pool size, no overflow, the
     SQLite pragmas on connect, the one-call adapter; not the bot's
     listener that pings an idle PostgreSQL connection), one transaction per
     pooled connection in line for the pool (FIFO) and, on SQLite, one writer
     at a time, as there.  Statements go by ``conn.exec_driver_sql``: no ORM,
     no statement compilation, no result typing, so this part is a lower
     bound of what the store's statements could cost.  Keys are rewritten
     per replayed request (request id, conversation, file handle, and the ids
     the database returns, mapped to what it returns on replay), on a fresh
     database brought to the schema by the project's migrations.

   Each part alone and all together, ``time.process_time()`` (every thread
   of the process: SQLite's too) per request: ``--requests`` one after
   another (20 conversations in turn, as concurrency_cpu's loop) and
   ``--burst`` at once (each in a conversation of its own, one coroutine
   each, ``asyncio.gather``), on SQLite and on PostgreSQL (a throw-away
   database, ``harness.temp_pg_database``; one replaying process).  In a
   burst, also with every write group-committed ("writes grouped": the
   write transactions asked for while one runs go together in the next one,
   one commit), as the bot groups a burst's accepts, checkpoints and
   finishes (not its turns): the floor of a design that groups them all.
   Every replayed request is checked: each write's row count and returned
   rows as recorded.
3. **Print**, per store and mode: the floor by part and in all, the bot's
   own figure measured in the same run on the same fakes (concurrency_cpu's
   sequential job-queue loop and burst, zero latency), bot ÷ floor, and the
   implied floor of section 7's "500 at once, wall ÷ one request":
   500 × the floor's CPU per request in a burst ÷ the cores the processes
   have (1: SQLite, one process; 2: PostgreSQL, two processes), ÷ one
   request's wall measured as section 7 measures it (the median of 3 through
   the job queue, LLM 0.2 s, models 0.1 s).

``--profile PATH``: the floor's burst again under the CPU-time sampler, by
component (``concurrency_cpu.by_component``): ``PATH.<store>.floor.txt``.
The fakes run in a process of their own, as in the other benchmarks.

Section 7 of ``python -m benchmarks`` (``benchmarks.measure.m_concurrency``)
prints this floor beside its own "total wall ÷ one request": it records one
request through the bot it measured (:func:`record`) and replays only the
burst of "all, writes grouped" (``replay``'s ``parts``, the replaying
process's ``--parts``: no sequential loop, no other part), N at once, on a
fresh database; N × that CPU per request ÷ its processes ÷ its one request.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import json
import os
import pickle
import re
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
MODEL_LATENCY = 0.1  # section 7's latencies (benchmarks.measure.m_concurrency)
LLM_LATENCY = 0.2
PARTS = ("LLM calls", "model call", "SQL", "all")
GROUPED = ("SQL, writes grouped", "all, writes grouped")  # burst only (Replayer._grouped)
ALL_PARTS = PARTS + GROUPED  # what ``replay``'s ``parts`` may name
# what a placeholder follows: the column it is compared with or assigned to
_BEFORE = re.compile(r"([\w.]+)\s*(?:=|!=|<>|<=|>=|<|>|\+|IN\s*\((?:[^()]*,\s*)?)\s*$", re.I)
_INSERT = re.compile(r"^\s*INSERT INTO (\w+)\s*\(([^)]*)\)\s*VALUES\s*\(", re.I)
_TABLE = re.compile(r"\b(?:INSERT INTO|UPDATE|FROM)\s+(\w+)", re.I)
_PLACEHOLDER = re.compile(r"\?|\$(\d+)")


# ------------------------------------------------------------------ the record


@dataclass
class Statement:
    sql: str
    params: Any  # as the driver got them: a tuple, a list of tuples (many), or None
    many: bool
    table: str  # the table it writes or reads first
    rows: int  # rows it returned (-1: none asked)
    rowcount: int
    returned: Any = None  # the first column of the first row returned (an id)
    refs: tuple[tuple[int, str], ...] = ()  # (parameter index, table whose id it is)


@dataclass
class Transaction:
    at: float
    statements: list[Statement] = field(default_factory=list)
    end: str = "commit"  # or "rollback"

    @functools.cached_property
    def write(self) -> bool:  # once: the replay asks for every transaction it runs
        return any(not s.sql.lstrip().upper().startswith("SELECT") for s in self.statements)


@dataclass
class LLMCall:
    at: float
    body: dict[str, Any]

    @property
    def stream(self) -> bool:
        return bool(self.body.get("stream"))


@dataclass
class ModelCall:
    at: float
    task: str
    model: str
    text: str
    sha256: str  # of the body the fake received


Step = Transaction | LLMCall | ModelCall


@dataclass
class Recording:
    store: str  # "sqlite" | "postgresql"
    llm_url: str
    hf_url: str
    api_key: str
    hf_token: str
    pool_size: int
    pool_timeout: float
    steps: list[Step]
    tokens: dict[str, str]  # a recorded key -> its name (rewritten per replayed request)

    def count(self, kind: type) -> int:
        return sum(isinstance(s, kind) for s in self.steps)

    @property
    def transactions(self) -> list[Transaction]:
        return [s for s in self.steps if isinstance(s, Transaction)]

    def describe(self) -> str:
        txs = self.transactions
        streamed = sum(isinstance(s, LLMCall) and s.stream for s in self.steps)
        return (
            f"{self.count(LLMCall)} LLM calls ({streamed} streamed), "
            f"{self.count(ModelCall)} model call, {sum(len(t.statements) for t in txs)} "
            f"statements in {len(txs)} transactions "
            f"({sum(t.end == 'commit' and t.write for t in txs)} writes committed)"
        )


def key_columns() -> dict[str, dict[str, str]]:
    """Per table, its id columns and the table each one's value is an id of:
    the primary key (its own table) and the foreign keys (the table referred to)."""
    from core.store.models import Base  # the schema only

    out: dict[str, dict[str, str]] = {}
    for table in Base.metadata.tables.values():
        cols: dict[str, str] = {}
        for col in table.columns:
            if col.primary_key:
                cols[col.name] = table.name
            for fk in col.foreign_keys:
                cols[col.name] = fk.column.table.name
        out[table.name] = cols
    return out


def placeholder_columns(sql: str) -> dict[int, str]:
    """The column each parameter goes to (by parameter index), where the SQL
    says: an INSERT's column list, else the column a placeholder follows."""
    out: dict[int, str] = {}
    insert = _INSERT.match(sql)
    columns = [c.strip() for c in insert.group(2).split(",")] if insert else []
    values_at = insert.end() if insert else -1
    for n, m in enumerate(_PLACEHOLDER.finditer(sql)):
        index = int(m.group(1)) - 1 if m.group(1) else n
        if index in out:
            continue
        if insert and m.start() >= values_at and n < len(columns):
            out[index] = columns[n]
            continue
        before = _BEFORE.search(sql[max(0, m.start() - 200) : m.start()])
        if before:
            out[index] = before.group(1)
    return out


def annotate(steps: list[Step]) -> None:
    """Mark each parameter that is an id the database returned earlier in the
    request (to be replaced by what it returns on replay)."""
    keys = key_columns()
    returned: dict[str, set[Any]] = {}
    for tx in (s for s in steps if isinstance(s, Transaction)):
        for st in tx.statements:
            if not st.many and st.params:
                own = keys.get(st.table, {})
                refs = []
                for index, column in placeholder_columns(st.sql).items():
                    name = column.rsplit(".", 1)[-1]
                    target = own.get(name) or next(
                        (t[name] for t in keys.values() if name in t and name != "id"), None
                    )
                    if target is None or index >= len(st.params):
                        continue
                    value = st.params[index]
                    if isinstance(value, int) and value in returned.get(target, ()):
                        refs.append((index, target))
                st.refs = tuple(refs)
            if st.returned is not None:
                returned.setdefault(st.table, set()).add(st.returned)


class SQLRecorder:
    """Every statement and transaction an engine runs, from its events."""

    def __init__(self, engine: Any) -> None:
        from sqlalchemy import event

        self._event = event
        self._engine = engine.sync_engine
        self.open: dict[int, Transaction] = {}
        self.done: list[Transaction] = []
        self._hooks: list[tuple[str, Callable[..., None]]] = [
            ("begin", self._begin),
            ("after_cursor_execute", self._statement),
            ("commit", self._commit),
            ("rollback", self._rollback),
        ]
        for name, fn in self._hooks:
            event.listen(self._engine, name, fn)

    def close(self) -> None:
        for name, fn in self._hooks:
            self._event.remove(self._engine, name, fn)

    def _begin(self, conn: Any) -> None:
        self.open[id(conn)] = Transaction(time.monotonic())

    def _statement(
        self, conn: Any, cursor: Any, sql: str, params: Any, _ctx: Any, many: bool
    ) -> None:
        tx = self.open.setdefault(id(conn), Transaction(time.monotonic()))
        # the adapters buffer a result's rows (SQLAlchemy's async cursors): peek
        buffered = getattr(cursor, "_rows", None)
        rows = list(buffered) if buffered is not None and cursor.description else None
        table = _TABLE.search(sql)
        tx.statements.append(
            Statement(
                sql=sql,
                params=_plain(params),
                many=many,
                table=table.group(1) if table else "",
                rows=len(rows) if rows is not None else -1,
                rowcount=cursor.rowcount if rows is None else -1,
                returned=rows[0][0] if rows and "RETURNING" in sql.upper() else None,
            )
        )

    def _commit(self, conn: Any) -> None:
        self._end(conn, "commit")

    def _rollback(self, conn: Any) -> None:
        self._end(conn, "rollback")

    def _end(self, conn: Any, how: str) -> None:
        tx = self.open.pop(id(conn), None)
        if tx is not None and tx.statements:
            tx.end = how
            self.done.append(tx)


def _plain(params: Any) -> Any:
    if params is None:
        return None
    if isinstance(params, list):
        return [tuple(p) for p in params]
    return tuple(params)


async def record(urls: Any, agent: Any, adapter: Any, fakes: Any, settings: Any) -> Recording:
    """One single-task request through the job queue, recorded (the bot warm)."""
    from benchmarks.concurrency_worker import timed_job
    from benchmarks.harness import SHAPE_BY_NAME, conversation, request

    shape = SHAPE_BY_NAME["single"]
    # a fresh conversation on a server (scope) already seen, as every request of
    # concurrency_cpu's loops but the first: its settings are read once, then kept
    warm = await timed_job(adapter, request(conversation("Rq7tag", "w"), "u1", shape))
    if not warm.ok:
        raise RuntimeError(f"the request before the recording failed: {warm.why()}")
    req = request(conversation("Rq7tag", "Rq7conv"), "u1", shape)
    db = agent.repo.db
    llm0, hf0 = await fakes.llm_count(), await fakes.hf_count()
    recorder = SQLRecorder(db.engine)
    try:
        run = await timed_job(adapter, req)
    finally:
        recorder.close()
    if not run.ok:
        raise RuntimeError(f"the request to record failed: {run.why()}")
    llm = await fakes.llm_requests(llm0)
    hf = await fakes.hf_calls(hf0)
    steps: list[Step] = list(recorder.done)
    steps += [LLMCall(float(r["at"]), r["body"]) for r in llm]
    texts = {s["task"]: s["args"].get("text", "") for s in shape.steps}
    for c in hf:
        task = next(t for t in texts if c["model"] in {m.id for m in _models(t)})
        steps.append(ModelCall(float(c["t_start"]), task, c["model"], texts[task], c["sha256"]))
    steps.sort(key=lambda s: s.at)
    annotate(steps)
    tokens = {req.request_id: "request", "Rq7tag": "scope", "cRq7conv": "channel"}
    for tx in recorder.done:  # the file handles: unique in their conversation
        for st in tx.statements:
            insert = _INSERT.match(st.sql)
            if insert and insert.group(1) == "resources" and not st.many:
                cols = [c.strip() for c in insert.group(2).split(",")]
                tokens[str(st.params[cols.index("handle")])] = "handle"
    return Recording(
        store=db.dialect,
        llm_url=urls.llm,
        hf_url=urls.hf,
        api_key=_secret(settings.llm.openai_api_key),
        hf_token=_secret(settings.hf.token),
        pool_size=db.pool_size,
        pool_timeout=db.pool_timeout,
        steps=steps,
        tokens=tokens,
    )


def _secret(value: Any) -> str:
    return str(value.get_secret_value() if hasattr(value, "get_secret_value") else value or "")


def _models(task: str) -> list[Any]:
    from benchmarks.harness import shipped_catalog

    return list(shipped_catalog().models(task))


# ------------------------------------------------------------------ the replay


@dataclass
class Prepared:
    """One replayed request: every statement's parameters with its keys
    rewritten (ids the database returns are mapped as it runs)."""

    params: list[list[Any]]  # per transaction, per statement


def rewrite(value: Any, subs: list[tuple[str, str]]) -> Any:
    if isinstance(value, str):
        for old, new in subs:
            if old in value:
                value = value.replace(old, new)
        return value
    if isinstance(value, tuple):
        return tuple(rewrite(v, subs) for v in value)
    if isinstance(value, list):
        return [rewrite(v, subs) for v in value]
    return value


def prepare(rec: Recording, n: int, conv: str, run: str = "") -> Prepared:
    """Request ``n`` of replay ``run`` in conversation ``conv``."""
    names = {"request": f"rq{run}{n:08d}", "scope": f"floor{run}", "channel": conv}
    names["handle"] = f"h{n}-"
    subs = []
    for old, kind in rec.tokens.items():
        subs.append((old, names[kind] + old if kind == "handle" else names[kind]))
    return Prepared([[rewrite(st.params, subs) for st in tx.statements] for tx in rec.transactions])


class Replayer:
    """The recorded request's calls on the libraries alone."""

    def __init__(self, rec: Recording, db_url: str) -> None:
        self.rec = rec
        self.db_url = db_url
        self.errors: dict[str, int] = {}
        self._n = 0
        self._run = uuid.uuid4().hex[:6]  # request ids unique across replays on one database
        self.replayed: dict[str, int] = {}  # requests replayed, per part
        self.grouped = False  # writes group-committed (see _grouped)
        self._pending: list[tuple[Transaction, list[Any], dict[Any, Any], Any]] = []
        self._writing = False

    async def __aenter__(self) -> Replayer:
        import httpx2
        import huggingface_hub
        import openai
        from sqlalchemy import event
        from sqlalchemy.ext.asyncio import create_async_engine

        sdk = openai.DEFAULT_CONNECTION_LIMITS
        limits = httpx2.Limits(
            max_connections=sdk.max_connections,
            max_keepalive_connections=sdk.max_keepalive_connections,
            keepalive_expiry=50.0,  # core.http_client.KEEPALIVE_SECONDS
        )
        self.llm = openai.AsyncOpenAI(
            api_key=self.rec.api_key,
            base_url=self.rec.llm_url,
            timeout=120,
            max_retries=0,
            http_client=openai.DefaultAioHttpClient(limits=limits),
        )

        def hf_session() -> httpx2.AsyncClient:
            # the SDK's own session (its hooks, redirects, timeout, headers) on aiohttp's transport
            own = huggingface_hub.utils._http.default_async_client_factory()
            return openai.DefaultAioHttpClient(
                event_hooks={k: list(v) for k, v in own.event_hooks.items()},
                follow_redirects=own.follow_redirects,
                timeout=own.timeout,
                headers=own.headers,
                limits=limits,
            )

        huggingface_hub.set_async_client_factory(hf_session)
        self.hf = huggingface_hub.AsyncInferenceClient(token=self.rec.hf_token, timeout=300)
        kw: dict[str, Any] = {"connect_args": {"timeout": 10.0}}
        if self.rec.store == "sqlite":
            dbapi = _one_call_dbapi()
            if dbapi is not None:
                kw["module"] = dbapi
        self.engine = create_async_engine(
            self.db_url,
            pool_size=self.rec.pool_size,
            max_overflow=0,
            pool_timeout=self.rec.pool_timeout,
            **kw,
        )
        if self.rec.store == "sqlite":
            event.listen(self.engine.sync_engine, "connect", _sqlite_pragmas)
        self.gate = asyncio.Semaphore(self.rec.pool_size)
        self.writer = asyncio.Lock() if self.rec.store == "sqlite" else None
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.hf.close()  # type: ignore[no-untyped-call]
        await self.llm.close()
        await self.engine.dispose()

    def failed(self, why: str) -> None:
        key = why[:120]
        self.errors[key] = self.errors.get(key, 0) + 1

    # --- the parts
    async def llm_call(self, call: LLMCall) -> None:
        import openai
        from openai.types.chat import ChatCompletion

        options: Any = {"timeout": 120, "security": {"bearer_auth": True}}
        if call.stream:
            chunks = await self.llm.post(
                "/chat/completions",
                body=call.body,
                cast_to=ChatCompletion,
                stream=True,
                stream_cls=openai.AsyncStream[object],
                options=options,
            )
            n = 0
            async with chunks:
                async for _ in chunks:
                    n += 1
            if not n:
                self.failed("a streamed answer with no chunk")
        else:
            out = await self.llm.post(
                "/chat/completions", body=call.body, cast_to=ChatCompletion, options=options
            )
            if not out.choices:
                self.failed("an answer with no choice")

    async def model_call(self, call: ModelCall) -> None:
        method = getattr(self.hf, call.task.replace("-", "_"))
        out = await method(call.text, model=f"{self.rec.hf_url}/models/{call.model}")
        if out is None:
            self.failed("no model output")

    async def transaction(
        self, tx: Transaction, params: list[Any], ids: dict[tuple[str, Any], Any]
    ) -> None:
        if self.grouped and tx.write and tx.end == "commit":
            await self._grouped(tx, params, ids)
            return
        lock = self.writer if tx.write else None
        if lock is not None:
            await lock.acquire()
        try:
            async with self.gate, self.engine.connect() as conn:
                await conn.begin()
                await self._statements(conn, tx, params, ids)
                if tx.end == "commit":
                    await conn.commit()
                else:
                    await conn.rollback()
        finally:
            if lock is not None:
                lock.release()

    async def _statements(
        self, conn: Any, tx: Transaction, params: list[Any], ids: dict[tuple[str, Any], Any]
    ) -> None:
        for st, p in zip(tx.statements, params, strict=True):
            if st.refs:
                p = list(p)
                for index, table in st.refs:
                    p[index] = ids[(table, p[index])]
                p = tuple(p)
            result = await conn.exec_driver_sql(st.sql, p)
            if st.rows >= 0:
                rows = result.fetchall()
                if st.returned is not None:
                    if not rows:
                        self.failed(f"no row returned: {st.sql[:60]}")
                        continue
                    ids[(st.table, st.returned)] = rows[0][0]
                elif st.rows and not rows:  # a read of what this request wrote
                    self.failed(f"no row read: {st.sql[:60]}")
            elif st.rowcount >= 0 and result.rowcount != st.rowcount:
                self.failed(f"{result.rowcount} rows, not {st.rowcount}: {st.sql[:60]}")

    async def _grouped(
        self, tx: Transaction, params: list[Any], ids: dict[tuple[str, Any], Any]
    ) -> None:
        """Group commit of every write: those asked for while a group runs go
        together in the next one (one transaction, one commit), in the order
        asked, each with its own statements, as ``core/store/jobs.py`` groups
        a burst's accepts, checkpoints and finishes (and here the turn too)."""
        done = asyncio.get_running_loop().create_future()
        self._pending.append((tx, params, ids, done))
        if self._writing:
            await done
            return
        self._writing = True
        try:
            while self._pending:
                group, self._pending = self._pending, []
                try:
                    async with self.gate, self.engine.connect() as conn:
                        await conn.begin()
                        for t, p, i, _ in group:
                            await self._statements(conn, t, p, i)
                        await conn.commit()
                except Exception as e:
                    for *_, f in group:
                        if not f.done():
                            f.set_exception(e)
                else:
                    for *_, f in group:
                        if not f.done():
                            f.set_result(None)
        finally:
            self._writing = False
        await done

    async def request(self, part: str, prepared: Prepared) -> None:
        self.replayed[part] = self.replayed.get(part, 0) + 1
        ids: dict[tuple[str, Any], Any] = {}
        t = 0
        try:
            for step in self.rec.steps:
                if isinstance(step, Transaction):
                    if part in ("SQL", "all"):
                        await self.transaction(step, prepared.params[t], ids)
                    t += 1
                elif isinstance(step, LLMCall):
                    if part in ("LLM calls", "all"):
                        await self.llm_call(step)
                elif part in ("model call", "all"):
                    await self.model_call(step)
        except Exception as e:  # counted, not raised: a burst goes on
            self.failed(f"raised {type(e).__name__}: {e}")

    def batch(self, n: int, conversations: int | None, tag: str) -> list[Prepared]:
        """``n`` requests' parameters, made before the clock starts: in
        ``conversations`` conversations in turn (None: one each)."""
        out = []
        for i in range(n):
            self._n += 1
            conv = f"{tag}{i % conversations if conversations else i}"
            out.append(prepare(self.rec, self._n, conv, self._run))
        return out

    async def sequential(self, part: str, n: int, tag: str) -> float:
        batch = self.batch(n, 20, tag)
        c0 = time.process_time()
        for p in batch:
            await self.request(part, p)
        return (time.process_time() - c0) / n

    async def burst(self, part: str, n: int, tag: str) -> tuple[float, float]:
        batch = self.batch(n, None, tag)
        c0, t0 = time.process_time(), time.perf_counter()
        await asyncio.gather(*(self.request(part, p) for p in batch))
        return (time.process_time() - c0) / n, time.perf_counter() - t0


def _from_file(relative: str, name: str) -> Any:
    """One module of the bot loaded from its file alone, as ``name``: importing
    it by its package's name would load the package's ``__init__`` and with it
    much more of the bot."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(name, ROOT / relative)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _one_call_dbapi() -> Any:
    """The bot's one-call aiosqlite adapter (``core/store/sqlite_driver.py``)."""
    return _from_file("core/store/sqlite_driver.py", "floor_sqlite_driver").one_call_dbapi()


def _settle_heap() -> None:
    """The collector settled as the bot's processes settle it once started
    (``bot/heap.py``: start-up frozen, a larger young generation), so the floor
    and the bot pay the same collector."""
    _from_file("bot/heap.py", "floor_heap").settle()


def _sqlite_pragmas(dbapi_connection: Any, _record: Any) -> None:
    """What core/store/db.py sets on every SQLite connection."""
    cursor = dbapi_connection.cursor()
    try:
        cursor.execute("PRAGMA foreign_keys=ON")
        cursor.execute("PRAGMA busy_timeout=15000")
        cursor.execute("PRAGMA journal_mode=WAL")
    finally:
        cursor.close()


async def replay(
    rec: Recording,
    db_url: str,
    requests: int,
    burst: int,
    profile: str | None = None,
    parts: Sequence[str] | None = None,
    *,
    settle: bool = False,
) -> dict[str, Any]:
    """The floor: each part alone and all together, sequential and at once.
    ``settle``: once warm, the collector settled as the bot's processes settle
    it (the replay's own process: it changes the whole process's collector).

    ``parts`` (default: all of ``ALL_PARTS``): only those.  One of ``PARTS``
    runs ``requests`` one after another (none when 0) and ``burst`` at once
    (none when 0); one of ``GROUPED`` only at once (section 7 of
    ``python -m benchmarks`` asks for ``GROUPED[1]`` alone)."""
    chosen = ALL_PARTS if parts is None else tuple(parts)
    unknown = [p for p in chosen if p not in ALL_PARTS]
    if unknown:
        raise ValueError(f"unknown part(s) {unknown}: not in {ALL_PARTS}")
    plain = [p for p in PARTS if p in chosen]
    grouped = [p for p in GROUPED if p in chosen]
    # the warm-up (connections, first uses): 10 requests but for tiny runs
    first = requests if plain and requests else burst
    out: dict[str, Any] = {"sequential": {}, "burst": {}, "burst_wall": {}}
    async with Replayer(rec, db_url) as r:
        for i in range(10 if first >= 10 else 1):
            await r.request("all", r.batch(1, None, f"w{i}-")[0])
        if settle:
            _settle_heap()
        if r.errors:
            out["errors"] = dict(r.errors)
            return out
        for part in plain if requests else ():
            out["sequential"][part] = await r.sequential(part, requests, f"s{part[0]}-")
        if burst:
            for part in plain:
                cpu, wall = await r.burst(part, burst, f"b{part[0]}-")
                out["burst"][part], out["burst_wall"][part] = cpu, wall
            r.grouped = True  # the writes of a burst group-committed
            for part in grouped:
                cpu, wall = await r.burst(part.split(",")[0], burst, f"g{part[0]}-")
                out["burst"][part], out["burst_wall"][part] = cpu, wall
            r.grouped = False
        if profile and burst:
            from benchmarks.cpu_sampler import CpuSampler

            sampler = CpuSampler(interval=0.0005)
            sampler.start()
            try:
                await r.burst("all", burst, "p-")
            finally:
                sampler.stop()
            out["stacks"] = [[list(s), k] for s, k in sampler.stacks.items()]
        out["errors"] = dict(r.errors)
        out["replayed"] = dict(r.replayed)
    return out


async def rows_per_table(db_url: str) -> dict[str, int]:
    """Rows in each of the store's tables (the test compares the bot's and the replay's)."""
    from sqlalchemy import text
    from sqlalchemy.ext.asyncio import create_async_engine

    from core.store.models import Base

    engine = create_async_engine(db_url)
    try:
        async with engine.connect() as conn:
            return {
                t: int((await conn.execute(text(f'SELECT count(*) FROM "{t}"'))).scalar_one())
                for t in Base.metadata.tables
            }
    finally:
        await engine.dispose()


async def fresh_schema(db_url: str) -> None:
    """The project's migrations on an empty database (setup, not measured)."""
    from core.store.db import Database

    db = Database(db_url)
    try:
        await db.ensure_schema()
    finally:
        await db.aclose()


def _child(a: argparse.Namespace) -> None:
    """The replay in a process of its own (no core/ or bot/ code imported
    but the SQLite driver adapter): reads the recording, prints one JSON line."""
    rec = pickle.loads(Path(a.replay).read_bytes())
    loop = _from_file("bot/event_loop.py", "floor_event_loop")  # the loop the bot runs on
    out = loop.run(replay(rec, a.db, a.requests, a.burst, a.profile, a.parts, settle=True))
    out["project_modules"] = sorted(
        m for m in sys.modules if m.split(".")[0] in ("core", "bot", "adapters", "migrations")
    )
    print(json.dumps(out), flush=True)


def replay_in_child(
    rec: Recording,
    db_url: str,
    tmp: Path,
    requests: int,
    burst: int,
    profile: bool,
    parts: Sequence[str] | None = None,
    timeout: float = 900,
) -> dict[str, Any]:
    """:func:`replay` in a process of its own (``parts``: only those; none given: all)."""
    path = tmp / f"recording.{rec.store}.pickle"
    path.write_bytes(pickle.dumps(rec))
    cmd = [
        sys.executable,
        "-m",
        "benchmarks.request_floor",
        "--replay",
        str(path),
        "--db",
        db_url,
        "--requests",
        str(requests),
        "--burst",
        str(burst),
    ]
    if profile:
        cmd += ["--profile", "yes"]
    for part in parts or ():
        cmd += ["--parts", part]  # one each: the names hold commas
    done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=timeout)
    if done.returncode != 0:
        raise RuntimeError(f"the replay failed:\n{done.stderr[-3000:]}")
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


# ------------------------------------------------------------------ the bot's own


async def bot_figures(
    agent: Any, adapter: Any, label: str, requests: int, burst: int
) -> dict[str, Any]:
    from benchmarks.concurrency_cpu import burst as bot_burst
    from benchmarks.concurrency_cpu import sequential
    from benchmarks.concurrency_worker import error_kinds

    out: dict[str, Any] = {}
    c0 = time.process_time()
    runs = await sequential(agent, adapter, f"j{label}", requests)
    out["sequential"] = (time.process_time() - c0) / requests
    out["errors"] = error_kinds(runs)
    if burst:
        c0, t0 = time.process_time(), time.perf_counter()
        runs = await bot_burst(adapter, f"b{label}", burst)
        out["burst"] = (time.process_time() - c0) / burst
        out["burst_wall"] = time.perf_counter() - t0
        for k, v in error_kinds(runs).items():
            out["errors"][k] = out["errors"].get(k, 0) + v
    return out


async def one_request_wall(fakes: Any, adapter: Any, label: str) -> float:
    """One request's wall as section 7 takes it: the median of 3 through the
    job queue with LLM 0.2 s and models 0.1 s (then back to zero latency)."""
    from benchmarks.concurrency_worker import timed_job
    from benchmarks.harness import SHAPE_BY_NAME, conversation, median, request

    shape = SHAPE_BY_NAME["single"]
    await fakes.reset(llm_delay=LLM_LATENCY, model_delay=MODEL_LATENCY)
    await fakes.script(shape)
    walls = []
    for i in range(3):
        run = await timed_job(adapter, request(conversation(f"one{label}", i), f"s{i}", shape))
        walls.append(run.wall)
    await fakes.reset()
    await fakes.script(shape)
    return median(walls)


# ------------------------------------------------------------------ the run


async def measure_store(
    label: str, urls: Any, db_url: str | None, replay_url: str, tmp: Path, a: argparse.Namespace
) -> dict[str, Any]:
    from benchmarks.concurrency_cpu import sequential
    from benchmarks.concurrency_worker import BenchAdapter
    from benchmarks.harness import SHAPE_BY_NAME, Fakes, bench_settings, open_bot

    shape = SHAPE_BY_NAME["single"]
    settings = bench_settings(tmp, urls, db_url)
    async with Fakes(urls) as fakes, open_bot(settings) as agent:
        await fakes.reset()
        await fakes.script(shape)
        adapter = BenchAdapter(agent)
        await sequential(agent, adapter, "warm", 10)
        rec = await record(urls, agent, adapter, fakes, settings)
        print(f"{label}: recorded one request: {rec.describe()}", flush=True)
        bot = await bot_figures(agent, adapter, label, a.requests, a.burst)
        bot["one_wall"] = await one_request_wall(fakes, adapter, label)
    await fresh_schema(replay_url)
    floor = replay_in_child(rec, replay_url, tmp, a.requests, a.burst, bool(a.profile))
    return {"label": label, "recording": rec, "bot": bot, "floor": floor}


def report(res: dict[str, Any], cores: int, burst: int, profile: str | None) -> None:
    label, bot, floor = res["label"], res["bot"], res["floor"]
    if not floor.get("sequential"):
        print(f"  the replay failed: {floor.get('errors')}")
        return
    modes = [("sequential", "one after another")]
    if burst:
        modes.append(("burst", f"{burst} at once"))
    for mode, what in modes:
        parts = floor[mode]
        print(f"  {what}: floor CPU per request, by part (each alone) and in all")
        for part in PARTS + (GROUPED if mode == "burst" else ()):
            extra = ""
            if mode == "burst":
                extra = f"   (wall {floor['burst_wall'][part]:.2f} s)"
            print(f"    {part:<19} {parts[part] * 1000:6.2f} ms{extra}")
        mine = bot[mode]
        ratio = f"{mine / parts['all']:.2f}"
        if mode == "burst":
            ratio += f" ({mine / parts[GROUPED[1]]:.2f} to the floor with writes grouped)"
        print(
            f"    {'the bot':<19} {mine * 1000:6.2f} ms through the job queue"
            + (f" (wall {bot['burst_wall']:.2f} s)" if mode == "burst" else "")
            + f"   bot ÷ floor {ratio}"
        )
    if burst:
        one = bot["one_wall"]
        print(
            f"  {burst} at once, wall ÷ one request, from CPU alone: {burst} × CPU per request "
            f"in the burst ÷ {cores} core{'s' if cores > 1 else ''} ÷ one request's wall "
            f"({one:.2f} s through the job queue at LLM {LLM_LATENCY:g} s, models "
            f"{MODEL_LATENCY:g} s, median of 3)"
        )
        for what, cpu in (
            ("floor", floor["burst"]["all"]),
            ("floor, writes grouped", floor["burst"][GROUPED[1]]),
            ("the bot's CPU", bot["burst"]),
        ):
            print(
                f"    {what:<22} {burst * cpu / cores / one:5.1f}"
                f"   ({burst} × {cpu * 1000:.2f} ms ÷ {cores} ÷ {one:.2f} s)"
            )
    bad = {**floor.get("errors", {}), **bot.get("errors", {})}
    if bad:
        print(f"  FAILED: {sum(bad.values())}: " + "; ".join(f"{v}× {k}" for k, v in bad.items()))
    if floor.get("project_modules"):  # none expected
        print(f"  (the replay process loaded: {', '.join(floor['project_modules'])})")
    if profile and floor.get("stacks"):
        from benchmarks.concurrency_cpu import report as profile_report
        from benchmarks.cpu_sampler import CpuSampler

        sampler = CpuSampler(interval=0.0005)
        for stack, k in floor["stacks"]:
            sampler.stacks[tuple(stack)] += k
        store = "sqlite" if label == "SQLite" else "pg"
        profile_report(sampler, Path(f"{profile}.{store}.floor.txt"), f"the floor, {burst} at once")
        if store == "sqlite":
            print(
                "    (core/store there: the one-call aiosqlite adapter, core/store/sqlite_driver.py)"
            )


async def main(a: argparse.Namespace) -> None:
    from benchmarks.concurrency_cpu import PG_URL, fakes_process
    from benchmarks.harness import log_to_file, raise_fd_limit, temp_pg_database

    raise_fd_limit()
    stores = [s.strip() for s in a.store.split(",") if s.strip()]
    print(
        "The floor: one single-task request's calls replayed on the client libraries alone "
        "(openai, huggingface_hub, SQLAlchemy's asyncio engine; SQL by exec_driver_sql: no "
        "ORM, no compilation, no result typing, a lower bound), in a process running no "
        "core/ or bot/ code; the bot's own figure measured in the same run on the same fakes "
        f"(zero latency). In a burst, 'writes grouped': every write transaction asked for "
        "while one runs goes in the next one, one commit (the bot groups a burst's accepts, "
        f"checkpoints and finishes so; not its turns). Load {os.getloadavg()[0]:.1f}.",
        flush=True,
    )
    with fakes_process() as urls, tempfile.TemporaryDirectory() as tmp:
        log_to_file(Path(tmp) / "bot.log")
        for store in stores:
            where = Path(tmp) / store
            where.mkdir()
            if store == "sqlite":
                replay_url = f"sqlite+aiosqlite:///{where / 'floor.db'}"
                res = await measure_store("SQLite", urls, None, replay_url, where, a)
                cores = 1
            else:
                async with (
                    temp_pg_database(a.pg or PG_URL) as bot_url,
                    temp_pg_database(a.pg or PG_URL) as replay_url,
                ):
                    res = await measure_store("PostgreSQL", urls, bot_url, replay_url, where, a)
                cores = 2
            print(f"{res['label']} (load {os.getloadavg()[0]:.1f}):", flush=True)
            report(res, cores, a.burst, a.profile)


def cli() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--store", default="sqlite,pg", help="comma list of sqlite, pg")
    ap.add_argument("--pg", default=None, help="PostgreSQL server URL (default: the test one)")
    ap.add_argument("--requests", type=int, default=200, help="sequential requests")
    ap.add_argument("--burst", type=int, default=500, help="requests at once (0: none)")
    ap.add_argument("--profile", default=None, metavar="PATH")
    ap.add_argument("--replay", default=None, help=argparse.SUPPRESS)  # the child's recording
    ap.add_argument("--db", default=None, help=argparse.SUPPRESS)
    # the child's parts, one per option (default: all)
    ap.add_argument("--parts", action="append", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.replay:
        _child(args)
    else:
        from bot import event_loop

        event_loop.run(main(args))


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    # run as benchmarks.request_floor, not __main__: the recording is pickled
    # for the replay's process, which reads it with that module's classes
    from benchmarks.request_floor import cli as _cli

    _cli()
