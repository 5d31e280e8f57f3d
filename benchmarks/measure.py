"""One measurement, in a process of its own (``python -m benchmarks`` runs each).

    python -m benchmarks.measure NAME --fakes '{"control": …, "llm": …, "hf": …}'
                                 [--quick] [--pg URL|none] [--profile PATH]

NAME: makespan | latency | cpu | cli | concurrency | reuse | userpath.  Progress goes to
stderr; the last stdout line is the result (``Result.to_json``).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

from benchmarks import request_floor
from benchmarks.concurrency_worker import BenchAdapter, error_kinds, timed_job
from benchmarks.harness import (
    JARVIS_TOKENS,
    MODEL_LATENCY,
    ROOT,
    SHAPE_BY_NAME,
    SHAPES,
    Fakes,
    FakeURLs,
    Result,
    Run,
    Shape,
    TokenCounter,
    bench_env,
    bench_settings,
    conversation,
    log_to_file,
    makespan,
    median,
    open_bot,
    percentile,
    pg_reachable,
    raise_fd_limit,
    request,
    settings_env_names,
    temp_pg_database,
    timed,
    verdict,
)
from benchmarks.machine_cpu import Spent, snapshot, spent
from benchmarks.user_path import measure_user_path
from bot import event_loop
from core.selection import FINISHED_FIRST
from core.types import Attachment, Request
from tests.fakes.samples import sample_png


def say(msg: str) -> None:
    print(f"  [{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


class Ctx:
    def __init__(self, args: argparse.Namespace, tmp: Path) -> None:
        self.urls = FakeURLs.from_json(args.fakes)
        self.fakes_json: str = args.fakes
        self.workers: int = args.workers
        self.quick: bool = args.quick
        self.pg: str | None = None if args.pg in ("", "none") else args.pg
        self.profile: str | None = args.profile
        self.tmp = tmp
        self.fakes = Fakes(self.urls)


# ------------------------------------------------------- 1. makespan ÷ critical path


async def m_makespan(ctx: Ctx) -> Result:
    """Plans scripted per shape, models 0.2 s, LLM 0 s: first task start → last
    task end (the Reply's task records) ÷ longest path × 0.2 s."""
    res = Result()
    reps = 1 if ctx.quick else 3
    async with ctx.fakes as fakes, open_bot(bench_settings(ctx.tmp, ctx.urls)) as agent:
        # warm-up: every shape once at zero latency (lazy imports, first connections)
        await fakes.reset()
        for i, shape in enumerate(SHAPES):
            await fakes.script(shape)
            await timed(agent, request(conversation("warm", i), f"w{i}", shape))
        await fakes.reset(model_delay=MODEL_LATENCY)
        # MAX_PARALLEL_TASKS: one request's tasks at once (hosted calls; no process-wide limit)
        limit = getattr(getattr(agent, "config", None), "max_parallel_tasks", None)
        for shape in SHAPES:
            await fakes.script(shape)
            ratios: list[float] = []
            spans: list[float] = []
            problems: list[str] = []
            for r in range(reps):
                run = await timed(
                    agent, request(conversation("ms", f"{shape.name}-{r}"), f"u{r}", shape)
                )
                span = makespan(run.reply) if run.reply else None
                if not run.ok or span is None:
                    problems.append(run.why())
                    continue
                spans.append(span)
                ratios.append(span / shape.critical_path())
            cp = shape.critical_path()
            if not ratios:
                res.add(
                    1,
                    "makespan ÷ critical path",
                    shape.name,
                    "error",
                    "≤ 1.05",
                    "FAIL",
                    note="; ".join(problems)[:300],
                )
                continue
            ratio = median(ratios)
            res.add(
                1,
                "makespan ÷ critical path",
                shape.name,
                f"{ratio:.3f}",
                "≤ 1.05",
                verdict(ratio <= 1.05),
                value=ratio,
                unit="ratio",
                note=f"makespan {median(spans):.3f} s, critical path {shape.longest_path()}×"
                f"{MODEL_LATENCY:g} = {cp:.1f} s (median of {len(ratios)})"
                + (
                    f"; {shape.width()} tasks can run at once, a request runs at most {limit}"
                    if limit and shape.width() > limit
                    else ""
                )
                + (f"; {len(problems)} failed: {problems[0][:120]}" if problems else ""),
            )
            res.details.setdefault("makespan", {})[shape.name] = {
                "ratios": ratios,
                "makespans": spans,
                "critical_path": cp,
                "longest_path_nodes": shape.longest_path(),
                "tasks": len(shape.steps),
                "max_concurrent_tasks": agent.config.concurrency,
                "max_parallel_tasks": limit,
            }
    return res


# ---------------------- 2–4. selection off the critical path, tokens, time to answer


async def m_latency(ctx: Ctx) -> Result:
    """LLM 0.5 s per call with LLM selection, models 0.2 s: wall ÷ (planning call +
    critical path + answer call) per shape; prompt tokens from the recorded
    request bodies; time to the answer."""
    res = Result()
    llm_latency = 0.5
    reps = 1 if ctx.quick else 2
    counter = TokenCounter()
    tokens: dict[str, dict[str, Any]] = {}
    first_answer: dict[str, Any] = {}
    async with ctx.fakes as fakes, open_bot(bench_settings(ctx.tmp, ctx.urls)) as agent:
        await fakes.reset()
        for i, shape in enumerate(SHAPES):  # warm-up at zero latency
            await fakes.script(shape)
            await timed(agent, request(conversation("warm", i), f"w{i}", shape))
        await fakes.reset(llm_delay=llm_latency, model_delay=MODEL_LATENCY)
        for shape in SHAPES:
            await fakes.script(shape)
            walls: list[float] = []
            stages: list[dict[str, float]] = []
            kept: list[int] = []  # tasks that kept a guess's result without the choice
            problems: list[str] = []
            for r in range(reps):
                since = await fakes.llm_count()
                run = await timed(
                    agent, request(conversation("lat", f"{shape.name}-{r}"), f"u{r}", shape)
                )
                if not run.ok:
                    problems.append(run.why())
                    continue
                walls.append(run.wall)
                if run.reply is not None:
                    stages.append(dict(run.reply.timings))
                    kept.append(sum(t.reason == FINISHED_FIRST for t in run.reply.tasks))
                if shape.name not in tokens:  # a fresh conversation: no history in the prompts
                    bodies = await fakes.llm_requests(since)
                    per_stage: dict[str, int] = {}
                    schema = 0
                    for b in bodies:
                        msg, sch = counter.prompt(b["body"])
                        per_stage[b["stage"]] = per_stage.get(b["stage"], 0) + msg
                        schema += sch
                    tokens[shape.name] = {
                        "total": sum(per_stage.values()),
                        "per_stage": per_stage,
                        "schema": schema,
                        "calls": len(bodies),
                        "usage_prompt_tokens": run.reply.usage.prompt_tokens if run.reply else None,
                    }
                    if shape.name == "single":
                        answer_calls = [b for b in bodies if b["stage"] == "answer"]
                        streamed = bool(answer_calls and answer_calls[-1]["body"].get("stream"))
                        assert run.reply is not None
                        first_answer = {
                            "streamed": streamed,
                            "first_words": run.first_words,
                            "wall": run.wall,
                            "answer_stage": run.reply.timings.get("response"),
                        }
            ideal = llm_latency + shape.critical_path() + llm_latency
            if not walls:
                res.add(
                    2,
                    "wall ÷ (plan + crit. path + answer)",
                    shape.name,
                    "error",
                    "≤ 1.10",
                    "FAIL",
                    note="; ".join(problems)[:300],
                )
                continue
            ratio = median(walls) / ideal
            res.add(
                2,
                "wall ÷ (plan + crit. path + answer)",
                shape.name,
                f"{ratio:.3f}",
                "≤ 1.10",
                verdict(ratio <= 1.10),
                value=ratio,
                unit="ratio",
                note=f"wall {median(walls):.2f} s vs {ideal:.2f} s (LLM {llm_latency:g} s/call, "
                f"models {MODEL_LATENCY:g} s; median of {len(walls)})"
                + (f"; stages of the first: {_stages(stages[0])}" if stages else "")
                + (
                    "; every task finished before the choice: no selection call (cancelled, or not made: SELECTION_DELAY)"
                    if kept and kept[0] == len(shape.steps)
                    else f"; {kept[0]} task(s) kept a result made before a differing choice"
                    if kept and kept[0]
                    else ""
                )
                + (f"; {len(problems)} failed: {problems[0][:120]}" if problems else ""),
            )
            res.details.setdefault("selection_latency", {})[shape.name] = {
                "walls": walls,
                "ideal": ideal,
                "stage_timings": stages,
                "finished_before_the_choice": kept,
            }
    for shape in SHAPES:
        t = tokens.get(shape.name)
        jarvis = JARVIS_TOKENS[shape.name]
        if t is None:
            res.add(
                3, "prompt tokens / request", shape.name, "error", f"≤ {jarvis / 2:.0f}", "FAIL"
            )
            continue
        by_stage = ", ".join(f"{k} {v}" for k, v in t["per_stage"].items())
        res.add(
            3,
            "prompt tokens / request",
            shape.name,
            f"{t['total']}",
            f"≤ {jarvis / 2:.0f} (½ JARVIS {jarvis})",
            verdict(t["total"] <= jarvis / 2),
            value=t["total"],
            unit="tokens",
            note=f"{counter.method}; {t['calls']} calls: {by_stage}; "
            f"+{t['schema']} in JSON schemas (not counted)",
        )
    res.details["prompt_tokens"] = {"method": counter.method, "shapes": tokens}
    if first_answer:
        first = first_answer["first_words"]
        if first_answer["streamed"] and first is not None:
            # target: ≤ 1 s plus the LLM's own first-token time (the fake's latency)
            res.add(
                4,
                "first answer words − LLM first token",
                "single (streamed)",
                f"{first - llm_latency:.2f} s",
                "≤ 1 s",
                "PASS" if first - llm_latency <= 1.0 else "FAIL",
                value=first - llm_latency,
                unit="s",
                note=f"first words {first:.3f} s after the answer stage began; the fake LLM "
                f"takes {llm_latency:g} s before its first token; whole request "
                f"{first_answer['wall']:.2f} s",
            )
        else:
            res.add(
                4,
                "time to first answer words",
                "single (not streamed)",
                f"{first_answer['wall']:.2f} s",
                "≤ 1 s + first token",
                "FAIL",
                value=first_answer["wall"],
                unit="s",
                note="the answer call is not streamed: figure is the time to the whole answer",
            )
        res.details["first_answer"] = first_answer
    return res


def _stages(timings: dict[str, float]) -> str:
    """The Reply's stage timings, shortly: ``planning 0.51, selection 0.50, …``."""
    return ", ".join(f"{k} {v:.2f}" for k, v in timings.items() if k != "total")


# ------------------------------------------------------------- 5. CPU per request


async def _cpu_loop(
    agent: Any, fakes: Fakes, tag: str, n: int, warm: int, adapter: BenchAdapter | None = None
) -> tuple[float, list[float], list[str]]:
    """``n`` sequential requests after ``warm`` ones: CPU per request, walls,
    failures; straight to ``agent.handle``, or with ``adapter`` through the
    job queue (accepted, claimed, checkpointed, marked done) as adapters do."""
    shape = SHAPE_BY_NAME["single"]

    async def one(req: Request) -> Run:
        return await (timed(agent, req) if adapter is None else timed_job(adapter, req))

    problems: list[str] = []
    for i in range(warm):
        run = await one(request(conversation(f"{tag}w", i % 5), f"w{i}", shape))
        if not run.ok:
            problems.append(run.why())
    walls: list[float] = []
    cpu0 = time.process_time()
    for i in range(n):
        # 20 conversations in turn, so history grows to the 10 turns a planner sees
        run = await one(request(conversation(tag, i % 20), f"u{i}", shape))
        walls.append(run.wall)
        if not run.ok:
            problems.append(run.why())
    cpu = (time.process_time() - cpu0) / n
    return cpu, walls, problems


async def m_cpu(ctx: Ctx) -> Result:
    """Zero latency, warm, in process: process CPU time ÷ requests over sequential
    single-task requests (LLM selection), and p50 wall (the overhead)."""
    res = Result()
    n_sqlite = 40 if ctx.quick else 200
    n_pg = 20 if ctx.quick else 100
    warm = 5 if ctx.quick else 10
    stores: list[tuple[str, str | None, int]] = [("SQLite", None, n_sqlite)]
    pg_note = ""
    if ctx.pg:
        why = await pg_reachable(ctx.pg)
        if why is None:
            stores.append(("PostgreSQL", ctx.pg, n_pg))
        else:
            pg_note = f"PostgreSQL not reachable ({why})"
    else:
        pg_note = "PostgreSQL not asked for (--pg none)"
    async with ctx.fakes as fakes:
        for label, url, n in stores:
            async with _store(url) as db_url:
                tmp = ctx.tmp / label
                tmp.mkdir()
                async with open_bot(bench_settings(tmp, ctx.urls, db_url)) as agent:
                    await fakes.reset()
                    await fakes.script(SHAPE_BY_NAME["single"])
                    say(f"cpu: {n} requests on {label}")
                    cpu, walls, problems = await _cpu_loop(agent, fakes, "cpu", n, warm=warm)
                    p50 = percentile(walls, 0.5)
                    note = f"{n} sequential requests, single-task plan, LLM selection, warm"
                    if problems:
                        note += f"; {len(problems)} failed: {problems[0][:120]}"
                    res.add(
                        5,
                        "CPU per request",
                        label,
                        f"{cpu * 1000:.1f} ms",
                        "≤ 15 ms",
                        verdict(cpu <= 0.015 and not problems),
                        value=cpu * 1000,
                        unit="ms",
                        note=note,
                    )
                    res.add(
                        5,
                        "p50 overhead (wall, 0 latency)",
                        label,
                        f"{p50 * 1000:.1f} ms",
                        "≤ 20 ms",
                        verdict(p50 <= 0.020 and not problems),
                        value=p50 * 1000,
                        unit="ms",
                        note=f"p95 {percentile(walls, 0.95) * 1000:.1f} ms; includes the "
                        "loopback round trips and the fakes' own work (other process)",
                    )
                    # The same through the job queue, as every adapter runs a turn.
                    jcpu, jwalls, jproblems = await _cpu_loop(
                        agent, fakes, "cpuj", n, warm=warm, adapter=BenchAdapter(agent)
                    )
                    res.add(
                        5,
                        "CPU per request, job queue",
                        label,
                        f"{jcpu * 1000:.1f} ms",
                        "",
                        "INFO",
                        value=jcpu * 1000,
                        unit="ms",
                        note=f"the same {n} requests accepted as durable jobs and run by the "
                        "queue (accept, claim, checkpoints, done), as adapters run them; p50 "
                        f"wall {percentile(jwalls, 0.5) * 1000:.1f} ms"
                        + (f"; {len(jproblems)} failed: {jproblems[0][:120]}" if jproblems else ""),
                    )
                    res.details.setdefault("cpu", {})[label] = {
                        "job_queue_cpu_ms": jcpu * 1000,
                        "job_queue_p50_ms": percentile(jwalls, 0.5) * 1000,
                        "requests": n,
                        "cpu_ms": cpu * 1000,
                        "p50_ms": p50 * 1000,
                        "p95_ms": percentile(walls, 0.95) * 1000,
                        "mean_ms": statistics.mean(walls) * 1000,
                        "failed": len(problems),
                    }
                    if ctx.profile and label == "SQLite":
                        await _profile(agent, fakes, ctx.profile, 50 if ctx.quick else 100)
    if pg_note:
        res.add(5, "CPU per request", "PostgreSQL", "skipped", "≤ 15 ms", "SKIP", note=pg_note)
    return res


async def _profile(agent: Any, fakes: Fakes, path: str, n: int) -> None:
    """The job-queue loop again under pyinstrument (after the measured ones),
    to a text file (and .html); the direct loop's profile beside it
    (``….direct.txt``)."""
    try:
        from pyinstrument import Profiler
    except ImportError:
        await _sampled(agent, fakes, path, n)
        return
    for where, adapter in (("direct", None), ("job queue", BenchAdapter(agent))):
        profiler = Profiler(interval=0.0005, async_mode="disabled")
        profiler.start()
        await _cpu_loop(agent, fakes, f"prof{where[0]}", n, warm=0, adapter=adapter)
        profiler.stop()
        out = Path(path) if adapter is not None else Path(path).with_suffix(".direct.txt")
        out.write_text(
            profiler.output_text(unicode=True, color=False, show_all=False), encoding="utf-8"
        )
        out.with_suffix(".html").write_text(profiler.output_html(), encoding="utf-8")
        say(f"profile of {n} requests ({where}) written to {out}")


async def _sampled(agent: Any, fakes: Fakes, path: str, n: int) -> None:
    """:func:`_profile` without pyinstrument: the CPU-time sampler of
    :mod:`benchmarks.cpu_sampler` over ``4 n`` requests (its tick is coarse)."""
    from benchmarks.cpu_sampler import CpuSampler

    for where, adapter in (("direct", None), ("job queue", BenchAdapter(agent))):
        sampler = CpuSampler()
        sampler.start()
        try:
            await _cpu_loop(agent, fakes, f"prof{where[0]}", 4 * n, warm=0, adapter=adapter)
        finally:
            sampler.stop()
        out = Path(path) if adapter is not None else Path(path).with_suffix(".direct.txt")
        sampler.write(out)
        say(f"profile of {4 * n} requests ({where}, CPU-time samples) written to {out}")


class _store:
    """``async with _store(url) as db_url``: a temp PostgreSQL database, or SQLite (None)."""

    def __init__(self, pg_url: str | None) -> None:
        self.pg_url = pg_url
        self._cm: Any = None

    async def __aenter__(self) -> str | None:
        if self.pg_url is None:
            return None
        self._cm = temp_pg_database(self.pg_url)
        return str(await self._cm.__aenter__())

    async def __aexit__(self, *exc: Any) -> None:
        if self._cm is not None:
            await self._cm.__aexit__(*exc)


# ------------------------------------------------------------------------ 6. CLI


async def m_cli(ctx: Ctx) -> Result:
    """Wall time of whole ``python -m bot ask "…"`` processes at zero latency:
    handed to a running ``python -m bot serve`` (the target; median of 3 after
    one untimed warm-up), and cold, without a worker (median of 3 after one
    untimed first run that creates the database); and ``python -m bot --help``."""
    res = Result()
    shape = SHAPE_BY_NAME["single"]
    base = {k: v for k, v in os.environ.items() if k not in settings_env_names()}
    env = bench_env(ctx.tmp, ctx.urls, base)
    env["DATA_DIR"] = str(ctx.tmp)  # the worker's socket here, not in the user's data directory
    cwd = ctx.tmp  # no .env file here
    ask = [sys.executable, "-m", "bot", "ask", shape.text]
    help_ = [sys.executable, "-m", "bot", "--help"]

    cpu: dict[str, list[float]] = {}  # the child's user+system CPU seconds, per command

    def wall(cmd: list[str]) -> tuple[float, int, str]:
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        t0 = time.perf_counter()
        p = subprocess.run(cmd, env=env, cwd=cwd, capture_output=True, text=True, timeout=120)
        took = time.perf_counter() - t0
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        used = after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime
        cpu.setdefault(" ".join(cmd[3:4]) or "python", []).append(used)
        return took, p.returncode, (p.stderr or p.stdout)[-300:]

    def with_worker(n: int) -> tuple[list[tuple[float, int, str]], int, str]:
        """Start ``python -m bot serve`` in the same environment, one untimed
        ask, ``n`` timed ones, stop it: the timed runs, how many asks the
        worker ran (its log says), and the end of its log."""
        log_path = ctx.tmp / "cli-worker.log"
        with log_path.open("w") as log_file:
            worker = subprocess.Popen(
                [sys.executable, "-m", "bot", "serve"],
                env=env,
                cwd=cwd,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=log_file,
            )
        try:
            deadline = time.monotonic() + 60
            while "CLI worker listening on" not in log_path.read_text():
                if worker.poll() is not None or time.monotonic() > deadline:
                    return [], 0, log_path.read_text()[-300:]
                time.sleep(0.02)
            wall(ask)  # warm-up: the worker's first request (connections, lazy imports)
            runs = [wall(ask) for _ in range(n)]
        finally:
            worker.terminate()
            worker.wait(60)
        text = log_path.read_text()
        return runs, text.count("CLI worker: ask ended"), text[-300:]

    async with ctx.fakes as fakes:
        await fakes.reset()
        await fakes.script(shape)
        loop = asyncio.get_running_loop()
        reps = 1 if ctx.quick else 3
        if ctx.quick:  # create the database here (fast, in process) instead of in a first run
            from bot.app import open_store

            settings = bench_settings(ctx.tmp, ctx.urls, env["DATABASE_URL"])
            async with open_store(settings):
                pass
            first, rc, err = None, 0, ""
        else:
            first, rc, err = await loop.run_in_executor(None, wall, ask)
        if rc != 0:
            res.add(
                6,
                "CLI ask wall",
                "python -m bot ask",
                "error",
                "≤ 0.8 s",
                "FAIL",
                note=f"exit {rc}: {err}",
            )
        else:
            asks = [await loop.run_in_executor(None, wall, ask) for _ in range(reps)]
            imports = await loop.run_in_executor(None, _import_times, ask, env, cwd)
            bad = [a for a in asks if a[1] != 0]
            cold = median([a[0] for a in asks])
            cold_cpu = median(cpu["ask"][-reps:])
            res.add(
                6,
                "CLI ask wall, cold",
                "python -m bot ask (no worker)",
                f"{cold:.2f} s",
                "",
                "INFO",
                value=cold,
                unit="s",
                note=f"median of {reps}, 0 latency; CPU {cold_cpu:.2f} s"
                + (f"; first run (creates the DB) {first:.2f} s" if first else "")
                + (f"; {len(bad)} failed: {bad[0][2]}" if bad else "")
                + f"; a -X importtime run spends {imports['total']:.2f} s importing (openai "
                f"{imports.get('openai', 0):.2f}, "
                f"sqlalchemy {imports.get('sqlalchemy', 0):.2f}, huggingface_hub "
                f"{imports.get('huggingface_hub', 0):.2f}, aiohttp {imports.get('aiohttp', 0):.2f})",
            )
            res.details["cli_ask"] = {
                "first": first,
                "runs": [a[0] for a in asks],
                "cpu": cpu["ask"][-reps:],
                "imports": imports,
            }
            n = 3
            runs, served, log_tail = await loop.run_in_executor(None, with_worker, n)
            failed = [r for r in runs if r[1] != 0]
            if not runs:
                res.add(
                    6,
                    "CLI ask wall",
                    "python -m bot ask (worker running)",
                    "error",
                    "≤ 0.8 s",
                    "FAIL",
                    note=f"python -m bot serve did not start: {log_tail}",
                )
            else:
                t = median([r[0] for r in runs])
                ok = not failed and served == n + 1
                res.add(
                    6,
                    "CLI ask wall",
                    "python -m bot ask (worker running)",
                    f"{t:.2f} s",
                    "≤ 0.8 s",
                    verdict(t <= 0.8 and ok),
                    value=t,
                    unit="s",
                    note=f"median of {n} after a warm-up, 0 latency, handed to `python -m bot "
                    f"serve` in the same environment; CLI CPU {median(cpu['ask'][-n:]):.2f} s; "
                    f"cold (no worker) {cold:.2f} s"
                    + (f"; {len(failed)} failed: {failed[0][2]}" if failed else "")
                    + ("" if served == n + 1 else f"; the worker ran {served} of {n + 1} asks"),
                )
                res.details["cli_ask_worker"] = {
                    "runs": [r[0] for r in runs],
                    "cpu": cpu["ask"][-n:],
                    "served": served,
                }
        # what the interpreter alone costs, to read the two figures against
        bare = [
            (await loop.run_in_executor(None, wall, [sys.executable, "-c", "pass"]))[0]
            for _ in range(reps)
        ]
        res.details["python_startup"] = bare
        helps = [await loop.run_in_executor(None, wall, help_) for _ in range(reps)]
        t = median([h[0] for h in helps])
        res.add(
            6,
            "CLI --help wall",
            "python -m bot --help",
            f"{t:.2f} s",
            "≤ 0.3 s",
            verdict(t <= 0.3 and all(h[1] == 0 for h in helps)),
            value=t,
            unit="s",
            note=f"median of {reps}, CPU {median(cpu['--help'][-reps:]):.2f} s; the interpreter "
            f"alone (python -c pass) takes {median(bare):.2f} s",
        )
        res.details["cli_help"] = [h[0] for h in helps]
    return res


def _import_times(cmd: list[str], env: dict[str, str], cwd: Path) -> dict[str, float]:
    """Seconds one run of ``cmd`` spends importing, by top-level package
    (``python -X importtime``: each module's own time), and ``total``."""
    p = subprocess.run(
        [cmd[0], "-X", "importtime", *cmd[1:]],
        env=env,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
    )
    by: dict[str, float] = {}
    for line in p.stderr.splitlines():
        parts = line.split("|")
        if len(parts) != 3 or not line.startswith("import time:"):
            continue
        try:
            own = int(parts[0].split(":")[1]) / 1e6
        except ValueError:  # the header line
            continue
        top = parts[2].strip().split(".")[0]
        by[top] = by.get(top, 0.0) + own
    largest = dict(sorted(by.items(), key=lambda kv: -kv[1])[:12])
    return {**{k: round(v, 3) for k, v in largest.items()}, "total": round(sum(by.values()), 3)}


# -------------------------------------------------------------- 7. concurrency


async def m_concurrency(ctx: Ctx) -> Result:
    """N simultaneous single-task requests in N conversations (LLM 0.2 s,
    models 0.1 s), taken the way every adapter takes them (accepted as durable
    jobs, run under the process's admission limit MAX_INFLIGHT_REQUESTS):
    errors, and total wall ÷ one request's wall.  SQLite runs one process
    (the embedded store has one writer); PostgreSQL runs ``--workers`` bot
    processes on one database, each taking its share of the requests, as a
    deployment of several workers does.

    Beside it, per store, the floor's figure (``benchmarks.request_floor``):
    one request recorded through the same bot at zero latency (while it is
    open: for PostgreSQL before the workers run), its calls replayed N at once
    on the client libraries alone with every write group-committed, in a
    process of its own on a fresh database; N × its CPU per request ÷ the
    processes (1 SQLite, ``--workers`` PostgreSQL) ÷ one request's wall: the
    ratio CPU alone implies on this machine (INFO; FAIL if it could not be
    taken, the other rows unaffected)."""
    res = Result()
    n = 100 if ctx.quick else 500
    raise_fd_limit()
    stores: list[tuple[str, str | None]] = [("SQLite", None)]
    if ctx.pg:
        why = await pg_reachable(ctx.pg)
        if why is None:
            stores.append(("PostgreSQL", ctx.pg))
        else:
            res.add(
                7,
                "concurrency errors",
                "PostgreSQL",
                "skipped",
                "0",
                "SKIP",
                note=f"PostgreSQL not reachable ({why})",
            )
    shape = SHAPE_BY_NAME["single"]
    async with ctx.fakes as fakes:
        for label, url in stores:
            async with _store(url) as db_url:
                tmp = ctx.tmp / label
                tmp.mkdir()
                workers = 1 if url is None else max(1, ctx.workers)
                settings = bench_settings(tmp, ctx.urls, db_url)
                async with open_bot(settings) as agent:  # also brings the schema to head
                    adapter = BenchAdapter(agent)
                    await fakes.reset()
                    await fakes.script(shape)
                    reps = 1 if ctx.quick else 3
                    for i in range(reps):
                        await timed_job(adapter, request(conversation("cw", i), f"w{i}", shape))
                    await fakes.reset(llm_delay=0.2, model_delay=0.1)
                    await fakes.script(shape)
                    singles = []
                    for i in range(reps):
                        run = await timed_job(
                            adapter, request(conversation("c1", i), f"s{i}", shape)
                        )
                        singles.append(run.wall)
                    one = median(singles)
                    inflight = agent.config.max_inflight_requests
                    say(f"concurrency: {n} simultaneous requests on {label}, {workers} process(es)")
                    if workers == 1:
                        reqs = [
                            request(conversation(f"cc{label}", i), f"u{i}", shape) for i in range(n)
                        ]
                        before = snapshot()
                        c0, t0 = time.process_time(), time.perf_counter()
                        runs: list[Run] = await asyncio.gather(
                            *(timed_job(adapter, r, within=240) for r in reqs)
                        )
                        total, cpu = time.perf_counter() - t0, time.process_time() - c0
                        machine = spent(before, snapshot(), {os.getpid()}, total)
                        walls = sorted(r.wall for r in runs)
                        kinds = error_kinds(runs)
                    # the floor's recording: this bot, warm, at zero latency
                    await fakes.reset()
                    await fakes.script(shape)
                    recorded = await _floor_record(ctx, agent, adapter, fakes, settings)
                    if workers > 1:  # the workers' burst at section 7's latencies
                        await fakes.reset(llm_delay=0.2, model_delay=0.1)
                        await fakes.script(shape)
                if workers > 1:  # the bot above is closed: only the workers hold jobs
                    total, walls, kinds, cpu, machine = await _workers(
                        ctx, db_url or "", tmp, n, workers
                    )
                failed = sum(kinds.values())
                ratio = total / one
                case = f"{label}, {n} requests, {workers} process{'es' if workers > 1 else ''}"
                res.add(
                    7,
                    "concurrency errors",
                    case,
                    f"{failed}",
                    "0",
                    verdict(not failed),
                    value=failed,
                    unit="errors",
                    note="; ".join(f"{c}× {k}" for k, c in kinds.items())[:300],
                )
                res.add(
                    7,
                    "total wall ÷ one request",
                    case,
                    f"{ratio:.1f}",
                    "≤ 6",
                    verdict(ratio <= 6 and not failed),
                    value=ratio,
                    unit="ratio",
                    note=f"total {total:.1f} s, one request {one:.2f} s; per-request "
                    f"p50 {percentile(walls, 0.5):.1f} s, max {walls[-1]:.1f} s; bot CPU "
                    f"{cpu / n * 1000:.0f} ms per request ({cpu:.1f} s in all); at most "
                    f"{inflight} requests at once per process (MAX_INFLIGHT_REQUESTS)"
                    + (f"; {machine.line()}" if machine is not None else ""),
                )
                res.details.setdefault("concurrency", {})[label] = {
                    "requests": n,
                    "workers": workers,
                    "total": total,
                    "single": singles,
                    "errors": kinds,
                    "cpu_s": cpu,
                    "max_inflight_requests": inflight,
                    "p50": percentile(walls, 0.5),
                    "p95": percentile(walls, 0.95),
                    "max": walls[-1],
                    "machine_cpu_s": None
                    if machine is None
                    else {
                        "bot": machine.bot,
                        "fakes": machine.fakes,
                        "postgres": machine.postgres,
                        "rest": machine.rest,
                        "cores": machine.cores,
                    },
                }
                await fakes.reset()  # the replay at zero latency, as recorded
                await fakes.script(shape)
                floor = await _floor_replay(recorded, tmp, n, url)
                _floor_row(res, label, case, n, workers, one, cpu, floor, machine)
    return res


FLOOR_PART = request_floor.GROUPED[1]  # what section 7 replays: "all, writes grouped"


async def _floor_record(
    ctx: Ctx, agent: Any, adapter: BenchAdapter, fakes: Fakes, settings: Any
) -> request_floor.Recording | str:
    """One request recorded through the bot (``request_floor.record``), or why not."""
    try:
        return await asyncio.wait_for(
            request_floor.record(ctx.urls, agent, adapter, fakes, settings), 60
        )
    except Exception as e:
        return f"the recording failed: {type(e).__name__}: {e}"


async def _floor_replay(
    recorded: request_floor.Recording | str, tmp: Path, n: int, pg: str | None
) -> dict[str, Any]:
    """The recorded request's calls replayed ``n`` at once, every write
    group-committed, in a process of its own on a fresh database (SQLite: a
    file under ``tmp``; PostgreSQL: a throw-away database on ``pg``):
    ``request_floor.replay``'s output, or ``{"error": why}``."""
    if isinstance(recorded, str):
        return {"error": recorded}

    async def on(url: str) -> dict[str, Any]:
        await request_floor.fresh_schema(url)
        return await asyncio.to_thread(
            request_floor.replay_in_child,
            recorded,
            url,
            tmp,
            0,  # no sequential loop
            n,
            False,
            parts=(FLOOR_PART,),
            timeout=180,
        )

    try:
        if pg is None:
            out = await on(f"sqlite+aiosqlite:///{tmp / 'floor.db'}")
        else:
            async with temp_pg_database(pg) as url:
                out = await on(url)
    except Exception as e:
        lines = [x for x in str(e).splitlines() if x.strip()]
        return {"error": f"the replay failed: {type(e).__name__}: {lines[-1] if lines else ''}"}
    if FLOOR_PART not in out.get("burst", {}) or out.get("errors"):
        bad = out.get("errors") or {"no figure": 1}
        return {"error": "the replay failed: " + "; ".join(f"{c}× {k}" for k, c in bad.items())}
    out["recording"] = recorded.describe()
    return out


def _floor_row(
    res: Result,
    label: str,
    case: str,
    n: int,
    cores: int,
    one: float,
    bot_cpu: float,
    floor: dict[str, Any],
    machine: Spent | None = None,
) -> None:
    """Section 7's floor row: n × the floor's CPU per request ÷ cores ÷ one."""
    details = res.details["concurrency"][label]
    if "error" in floor:
        res.add(
            7,
            "floor: wall ÷ one request",
            case,
            "error",
            "",
            "FAIL",
            note=str(floor["error"])[:300],
        )
        details["floor"] = {"error": floor["error"]}
        return
    cpu, wall = floor["burst"][FLOOR_PART], floor["burst_wall"][FLOOR_PART]
    implied = n * cpu / cores / one
    # Several bot processes share the machine's cores with the database
    # server and the fakes: their CPU in the bot's burst, on the same cores.
    others = 0.0
    if cores > 1 and machine is not None:
        others = machine.fakes + machine.postgres + machine.rest
    shared = (n * cpu + others) / min(cores, machine.cores if machine else cores) / one
    res.add(
        7,
        "floor: wall ÷ one request",
        case,
        f"{implied:.1f}",
        "",
        "INFO",
        value=implied,
        unit="ratio",
        note=f"the client libraries alone replaying this request's calls (benchmarks."
        f"request_floor), every write group-committed, {n} at once in one process: {n} × "
        f"{cpu * 1000:.2f} ms CPU ÷ {cores} core{'s' if cores > 1 else ''} ÷ one request's "
        f"{one:.2f} s (the replay's wall {wall:.1f} s); the bot: {bot_cpu / n * 1000:.1f} ms "
        f"CPU per request in the burst"
        + (
            f"; with the CPU the database server and the fakes spent in the bot's burst "
            f"({others:.1f} s) on the same cores: {shared:.1f}"
            if others
            else ""
        ),
    )
    details["floor"] = {
        "part": FLOOR_PART,
        "requests": n,
        "cores": cores,
        "cpu_per_request_s": cpu,
        "burst_wall_s": wall,
        "one_s": one,
        "ratio": implied,
        "ratio_with_server_and_fakes": shared,
        "bot_cpu_per_request_s": bot_cpu / n,
        "recording": floor.get("recording"),
        "project_modules": floor.get("project_modules", []),
    }


async def _workers(
    ctx: Ctx, db_url: str, tmp: Path, n: int, k: int
) -> tuple[float, list[float], dict[str, int], float, Spent | None]:
    """``k`` bot processes (``benchmarks.concurrency_worker``) on ``db_url``,
    each sending its share of ``n`` requests at once when told to, all at the
    same moment: (total wall, every request's wall, error kinds, their CPU,
    the machine's CPU from "go" to the last worker's answer)."""
    shares = [n // k + (1 if i < n % k else 0) for i in range(k)]
    procs: list[asyncio.subprocess.Process] = []
    try:
        for i, m in enumerate(shares):
            d = tmp / f"worker{i}"
            d.mkdir()
            procs.append(
                await asyncio.create_subprocess_exec(
                    sys.executable,
                    "-m",
                    "benchmarks.concurrency_worker",
                    "--fakes",
                    ctx.fakes_json,
                    "--db",
                    db_url,
                    "--tmp",
                    str(d),
                    "--requests",
                    str(m),
                    "--tag",
                    f"cw{i}-",
                    cwd=ROOT,
                    stdin=asyncio.subprocess.PIPE,
                    stdout=asyncio.subprocess.PIPE,
                )
            )
        for p in procs:
            assert p.stdout is not None
            line = (await asyncio.wait_for(p.stdout.readline(), 120)).decode().strip()
            if line != "ready":
                raise RuntimeError(f"a worker did not start: {line or 'no output'}")
        before, t0 = snapshot(), time.perf_counter()
        for p in procs:
            assert p.stdin is not None
            p.stdin.write(b"go\n")
            await p.stdin.drain()
        outs = []
        for p in procs:
            assert p.stdout is not None
            outs.append(json.loads(await asyncio.wait_for(p.stdout.readline(), 300)))
        machine = spent(before, snapshot(), {p.pid for p in procs}, time.perf_counter() - t0)
        for p in procs:  # now they may close their database connections
            assert p.stdin is not None
            p.stdin.write(b"close\n")
            await p.stdin.drain()
    finally:
        for p in procs:
            if p.stdin is not None and not p.stdin.is_closing():
                p.stdin.close()  # a worker waiting for its next line ends
            if p.returncode is None:
                try:
                    await asyncio.wait_for(p.wait(), 15)
                except TimeoutError:
                    p.kill()
                    await p.wait()
    total = max(o["t1"] for o in outs) - min(o["t0"] for o in outs)
    walls = sorted(w for o in outs for w in o["walls"])
    kinds: dict[str, int] = {}
    for o in outs:
        for key, c in o["errors"].items():
            kinds[key] = kinds.get(key, 0) + c
    return total, walls, kinds, sum(o["cpu"] for o in outs), machine


# -------------------------------------------------------------------- 8. reuse


async def m_reuse(ctx: Ctx) -> Result:
    """The same model on the same input bytes asked again in one conversation:
    model calls each repeat made (by handle, and re-uploaded), and the result
    cache's hit rate over the whole scenario."""
    res = Result()
    photo = sample_png(96, 96)
    task = "image-classification"
    async with ctx.fakes as fakes, open_bot(bench_settings(ctx.tmp, ctx.urls)) as agent:
        await fakes.reset()
        cases = [
            ("same handle", "photo.png", ()),
            ("same bytes re-uploaded", "copy.png", (Attachment("copy.png", "image/png", photo),)),
        ]
        key = conversation("reuse", 0)
        first = Shape(
            "reuse",
            "What is in photo.png?",
            ({"task": task, "id": 0, "dep": [-1], "args": {"image": "photo.png"}},),
            (Attachment("photo.png", "image/png", photo),),
        )
        await fakes.script(first)
        h0 = await fakes.hf_count()
        run1 = await timed(agent, request(key, "u1", first))
        calls1 = await fakes.hf_calls(h0)
        if not run1.ok:
            res.add(
                8,
                "model calls on the repeat",
                "first request",
                "error",
                "0",
                "FAIL",
                note=run1.why()[:300],
            )
            return res
        for label, handle, files in cases:
            again = Shape(
                "reuse",
                f"Classify {handle} again, please.",
                ({"task": task, "id": 0, "dep": [-1], "args": {"image": handle}},),
                files,
            )
            await fakes.script(again)
            h = await fakes.hf_count()
            run = await timed(agent, Request(key, "u1", again.text, files))
            calls = await fakes.hf_calls(h)
            same = [c for c in calls if c["sha256"] in {x["sha256"] for x in calls1}]
            if not run.ok:
                res.add(
                    8,
                    "model calls on the repeat",
                    label,
                    "error",
                    "0",
                    "FAIL",
                    note=run.why()[:300],
                )
                continue
            hit = 1.0 - len(calls) / max(1, len(calls1))
            res.add(
                8,
                "model calls on the repeat",
                label,
                f"{len(calls)} of {len(calls1)}",
                "0 (not run twice)",
                verdict(len(calls) == 0),
                value=len(calls),
                unit="calls",
                note=f"hit rate {hit:.0%}; {len(same)} call(s) with the same bytes to "
                f"{', '.join(sorted({c['model'] for c in calls})) or 'no model'}",
            )
            res.details.setdefault("reuse", {})[label] = {
                "first_calls": len(calls1),
                "second_calls": len(calls),
                "same_bytes": len(same),
            }
        cache = getattr(getattr(agent, "executor", None), "cache", None)
        if cache is not None:
            st = cache.stats()
            asked = st.hits + st.misses
            res.add(
                8,
                "result cache hit rate",
                f"repeated question ({1 + len(cases)} asks)",
                f"{st.hit_rate:.0%}",
                "",
                "INFO",
                value=st.hit_rate,
                unit="ratio",
                note=f"{st.hits} of {asked} model calls answered from the cache (the first "
                f"ask runs the model); {st.entries} entries, {st.bytes / 1024:.0f} KiB held",
            )
            res.details["result_cache"] = {
                "hits": st.hits,
                "misses": st.misses,
                "entries": st.entries,
                "bytes": st.bytes,
            }
    return res


async def m_userpath(ctx: Ctx) -> Result:
    """Measurements 1 and 2 on the user's path: each request the first of a
    fresh ``python -m bot ask`` / ``run slack`` / ``run discord`` process
    (:mod:`benchmarks.user_path`)."""
    return await measure_user_path(ctx.urls, ctx.tmp, quick=ctx.quick)


MEASUREMENTS: dict[str, Callable[[Ctx], Coroutine[Any, Any, Result]]] = {
    "makespan": m_makespan,
    "latency": m_latency,
    "cpu": m_cpu,
    "cli": m_cli,
    "concurrency": m_concurrency,
    "reuse": m_reuse,
    "userpath": m_userpath,
}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("names", help=f"comma list of {', '.join(MEASUREMENTS)}, run in turn")
    ap.add_argument("--fakes", required=True, help="the fakes server's JSON line")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--pg", default="none", help="PostgreSQL URL, or none")
    ap.add_argument("--profile", default=None, help="cpu: also profile the loop to this file")
    ap.add_argument(
        "--workers", type=int, default=os.cpu_count() or 1, help="concurrency: bot processes (PG)"
    )
    args = ap.parse_args()
    names = [n for n in args.names.split(",") if n]
    unknown = [n for n in names if n not in MEASUREMENTS]
    if unknown:
        ap.error(f"unknown measurement(s): {', '.join(unknown)}")
    for name in names:  # each with its own store, media and log
        with tempfile.TemporaryDirectory(prefix="hgbench-") as tmp:
            log_to_file(Path(tmp) / "bot.log")
            # on the loop `python -m bot` runs on
            result = event_loop.run(MEASUREMENTS[name](Ctx(args, Path(tmp))))
            result.details.setdefault("log_warnings", _warnings(Path(tmp) / "bot.log"))
        print(result.to_json(name), flush=True)
    return 0


def _warnings(path: Path) -> list[str]:
    """The first distinct WARNING/ERROR lines the bot logged (for diagnosis)."""
    if not path.is_file():
        return []
    seen: dict[str, int] = {}
    for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
        if " WARNING " in line or " ERROR " in line:
            key = line.split(" ", 2)[-1][:200]
            seen[key] = seen.get(key, 0) + 1
    return [f"{c}× {k}" for k, c in list(seen.items())[:10]]


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    sys.exit(main())
