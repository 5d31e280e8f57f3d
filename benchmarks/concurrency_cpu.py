"""CPU per request through the job queue, and what it is spent on.

    python -m benchmarks.concurrency_cpu [--store sqlite,pg] [--requests 200]
                                         [--burst 0] [--profile PATH]

Section 5's job-queue figure (``python -m benchmarks --only cpu``) taken
apart: single-task requests at zero latency (the fakes in a process of
their own, as there), run one after another straight to the agent and
through the job queue (accepted as a durable job, claimed, checkpointed,
marked done, as every adapter runs a turn), and with ``--burst N`` N at
once through the queue (section 7's shape, at zero latency).  For each:
CPU per request (``time.process_time`` of this process, every thread), and
the store's work per request counted with SQLAlchemy's engine events:
statements sent, transactions committed.

The statements and commits are counted over 40 more requests after the
timed ones (listening to the engine's events costs CPU of its own).

``--profile PATH``: the job-queue loop again under the CPU-time sampler
(:mod:`benchmarks.cpu_sampler`), its report in ``PATH.<store>.txt`` and
the raw stacks in ``PATH.<store>.stacks`` (with ``--burst``, a burst too:
``PATH.<store>.burst.txt``), summarised here by the
component whose code was running (a C function counts as its caller's):
the openai SDK, httpx2, aiohttp, SQLAlchemy, the drivers, pydantic, json,
the event loop, logging, the project's modules; samples taken while the
loop waited in ``epoll`` are other threads' CPU (SQLite's) and the kernel.

``--callgrind``: run under ``valgrind --tool=callgrind --instr-atstart=no``
to count the instructions of the timed loops alone (``callgrind_control``
turns counting on and off around them, and dumps each loop's counts as a
part of its own: ``callgrind.out.<pid>.1``, ``.2``…, in the loops' order,
each naming its loop; its ``totals:`` line is the loop's instructions): a
figure the machine's load does not move, unlike CPU time (the kernel's work
is not in it).  With ``--burst``, the burst is a part too (under valgrind a
burst of 50 fits its 240 s).
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from sqlalchemy import event

from benchmarks.concurrency_worker import BenchAdapter, error_kinds, timed_job
from benchmarks.cpu_sampler import CpuSampler
from benchmarks.harness import (
    ROOT,
    SHAPE_BY_NAME,
    Fakes,
    FakeURLs,
    Run,
    bench_settings,
    conversation,
    log_to_file,
    open_bot,
    raise_fd_limit,
    request,
    temp_pg_database,
    timed,
)

PG_URL = "postgresql+asyncpg://postgres@127.0.0.1:5432/test"
COUNTED = 40  # requests whose statements are counted (after the timed ones)

# Where a function's own time is filed: the first fragment its file (or, for
# a builtin, its name) contains.  Order matters: the more specific first.
COMPONENTS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("openai SDK", ("/openai/",)),
    ("httpx2", ("/httpx2/", "/httpcore")),
    ("aiohttp", ("/aiohttp/", "/yarl/", "/multidict/")),
    ("SQLAlchemy", ("/sqlalchemy/",)),
    ("drivers (aiosqlite, asyncpg, sqlite3)", ("/aiosqlite/", "/asyncpg/", "sqlite3", "_sqlite")),
    ("pydantic", ("/pydantic/", "/pydantic_core/", "pydantic_core")),
    ("json", ("/json/", "_json", "orjson")),
    ("in epoll: other threads' CPU (SQLite's), the kernel", ("selectors.py:select",)),
    ("the event loop (asyncio)", ("/asyncio/", "selectors")),
    ("logging", ("/logging/",)),
    ("huggingface_hub", ("/huggingface_hub/",)),
    ("core/store", ("/core/store/",)),
    ("core/llm*.py", ("/core/llm",)),
    ("core/jobs.py, core/checkpoint.py", ("/core/jobs.py", "/core/checkpoint.py")),
    ("core/turn_state.py", ("/core/turn_state.py",)),
    ("the rest of core/", ("/core/",)),
    ("benchmarks", ("/benchmarks/",)),
)


class StoreCounter:
    """Statements sent and transactions committed on an engine, from its events."""

    def __init__(self, engine: Any) -> None:
        self.statements = 0
        self.commits = 0
        self.kinds: collections.Counter[str] = collections.Counter()
        self._engine = engine.sync_engine
        event.listen(self._engine, "before_cursor_execute", self._statement)
        event.listen(self._engine, "commit", self._commit)

    def _statement(self, _conn: Any, _cursor: Any, sql: str, *_: Any) -> None:
        self.statements += 1
        self.kinds[" ".join(sql.split()[:3])[:40]] += 1

    def _commit(self, _conn: Any) -> None:
        self.commits += 1

    def reset(self) -> None:
        self.statements = self.commits = 0
        self.kinds.clear()

    def close(self) -> None:
        event.remove(self._engine, "before_cursor_execute", self._statement)
        event.remove(self._engine, "commit", self._commit)


@contextmanager
def counting(engine: Any) -> Iterator[StoreCounter]:
    counter = StoreCounter(engine)
    try:
        yield counter
    finally:
        counter.close()


def component(filename: str, name: str) -> str:
    where = f"{filename}:{name}" if filename != "~" else name
    for label, parts in COMPONENTS:
        if any(p in where for p in parts):
            return label
    if filename == "~":
        return "builtins (C functions called from Python)"
    if "/lib/python3" in filename and "site-packages" not in filename:
        return "the standard library (other)"
    return "other packages"


def by_component(sampler: CpuSampler) -> list[tuple[str, float]]:
    """The share of samples per component of the frame that was running
    (its own time: a C function's is its caller's), largest first."""
    own: collections.Counter[str] = collections.Counter()
    for stack, n in sampler.stacks.items():
        filename, _, name = stack[-1].rpartition(":") if stack else ("~", "", "?")
        own[component(filename, name)] += n
    total = sum(own.values()) or 1
    return [(k, v / total) for k, v in own.most_common()]


@contextmanager
def fakes_process() -> Iterator[FakeURLs]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "benchmarks.fakes_server", "--max-seconds", "1200"],
        cwd=ROOT,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        yield FakeURLs.from_json(proc.stdout.readline())
    finally:
        if proc.stdin:
            proc.stdin.close()
        try:
            proc.wait(5)
        except subprocess.TimeoutExpired:
            proc.kill()


async def sequential(agent: Any, adapter: BenchAdapter | None, tag: str, n: int) -> list[Run]:
    shape = SHAPE_BY_NAME["single"]
    runs = []
    for i in range(n):
        # 20 conversations in turn, as section 5: the history grows to what a planner sees
        req = request(conversation(tag, i % 20), f"u{i}", shape)
        runs.append(await (timed(agent, req) if adapter is None else timed_job(adapter, req)))
    return runs


async def burst(adapter: BenchAdapter, tag: str, n: int) -> list[Run]:
    shape = SHAPE_BY_NAME["single"]
    reqs = [request(conversation(tag, i), f"u{i}", shape) for i in range(n)]
    return list(await asyncio.gather(*(timed_job(adapter, r, within=240) for r in reqs)))


def instrument(on: bool, state: str, part: str | None = None) -> None:
    """Under ``valgrind --tool=callgrind --instr-atstart=no``: count
    instructions only inside the measured loop (a figure the machine's load
    does not change, unlike CPU time); with ``part``, dump the counts so far
    as a part of their own named ``part``."""
    if on:
        subprocess.run(["callgrind_control", "-i", state, str(os.getpid())], check=True)
        if part is not None:
            subprocess.run(["callgrind_control", f"--dump={part}", str(os.getpid())], check=True)


def line(
    label: str, n: int, cpu: float, counter: StoreCounter, counted: int, runs: list[Run]
) -> str:
    bad = error_kinds(runs)
    out = (
        f"  {label:<28} {cpu / n * 1000:6.2f} ms CPU/request   "
        f"{counter.statements / counted:5.1f} statements, "
        f"{counter.commits / counted:4.1f} commits per request"
    )
    if bad:
        out += f"   FAILED {sum(bad.values())}: {next(iter(bad))}"
    return out


async def measure(label: str, urls: FakeURLs, db_url: str | None, tmp: Path, a: Any) -> None:
    shape = SHAPE_BY_NAME["single"]
    async with Fakes(urls) as fakes, open_bot(bench_settings(tmp, urls, db_url)) as agent:
        await fakes.reset()
        await fakes.script(shape)
        adapter = BenchAdapter(agent)
        if a.callgrind:  # a request takes a second or more: no survey rounds meanwhile
            agent.jobs.poll = 3600.0
        await sequential(agent, None, "wd", 10)
        await sequential(agent, adapter, "wj", 10)
        print(f"{label} (load {os.getloadavg()[0]:.1f}):", flush=True)
        loops = [("direct", None), ("job queue", adapter)]
        for what, ad in [x for x in loops if not a.queue_only or x[1] is not None]:
            instrument(a.callgrind, "on")
            c0 = time.process_time()
            runs = await sequential(agent, ad, f"{what[0]}{label}", a.requests)
            cpu = time.process_time() - c0
            instrument(a.callgrind, "off", f"{label} {what}, {a.requests} requests")
            # counted apart: listening to the engine's events costs CPU of its own
            with counting(agent.repo.db.engine) as counter:
                await sequential(agent, ad, f"n{what[0]}{label}", COUNTED)
            print(line(what, a.requests, cpu, counter, COUNTED, runs), flush=True)
            if ad is not None and a.statements:
                for sql, k in counter.kinds.most_common():
                    print(f"      {k / COUNTED:5.2f}  {sql}")
        if a.burst:
            instrument(a.callgrind, "on")
            c0, t0 = time.process_time(), time.perf_counter()
            runs = await burst(adapter, f"b{label}", a.burst)
            cpu, wall = time.process_time() - c0, time.perf_counter() - t0
            instrument(a.callgrind, "off", f"{label} {a.burst} at once")
            with counting(agent.repo.db.engine) as counter:
                await burst(adapter, f"nb{label}", a.burst)
            print(
                line(f"{a.burst} at once (job queue)", a.burst, cpu, counter, a.burst, runs)
                + f"   wall {wall:.2f} s",
                flush=True,
            )
        if a.profile:
            loops: list[tuple[str, Any]] = [("sequential", None)]
            if a.burst:
                loops.append(("burst", a.burst))
            for what, n in loops:
                sampler = CpuSampler(interval=0.0005)
                sampler.start()
                try:
                    if n is None:
                        await sequential(agent, adapter, f"p{label}", a.requests)
                    else:
                        await burst(adapter, f"pb{label}", n)
                finally:
                    sampler.stop()
                name = label if n is None else f"{label}.burst"
                report(sampler, Path(f"{a.profile}.{name}.txt"), what)


def report(sampler: CpuSampler, path: Path, what: str) -> None:
    """Write a profile's report and raw stacks, and print it by component."""
    sampler.write(path)
    with path.with_suffix(".stacks").open("w", encoding="utf-8") as f:
        for stack, k in sampler.stacks.items():  # collapsed: frames;…;frames count
            f.write(";".join(stack) + f" {k}\n")
    print(f"  profile, {what} ({path}; CPU-time samples by the component running):")
    for name, share in by_component(sampler):
        if share >= 0.005:
            print(f"    {100 * share:5.1f} %  {name}")


async def main(a: Any) -> None:
    raise_fd_limit()
    stores = [s.strip() for s in a.store.split(",") if s.strip()]
    with fakes_process() as urls, tempfile.TemporaryDirectory() as tmp:
        log_to_file(Path(tmp) / "bot.log")
        for store in stores:
            where = Path(tmp) / store
            where.mkdir()
            if store == "sqlite":
                await measure("SQLite", urls, None, where, a)
            else:
                async with temp_pg_database(a.pg) as db_url:
                    await measure("PostgreSQL", urls, str(db_url), where, a)


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--store", default="sqlite,pg", help="comma list of sqlite, pg")
    ap.add_argument("--pg", default=PG_URL)
    ap.add_argument("--requests", type=int, default=200)
    ap.add_argument("--burst", type=int, default=0, help="also N at once through the queue")
    ap.add_argument("--profile", default=None, metavar="PATH")
    ap.add_argument("--callgrind", action="store_true", help="run under callgrind (see instrument)")
    ap.add_argument("--queue-only", action="store_true", help="skip the direct loop")
    ap.add_argument("--statements", action="store_true", help="list the statements by kind")
    from bot import event_loop

    event_loop.run(main(ap.parse_args()))  # the loop `python -m bot run` runs on
