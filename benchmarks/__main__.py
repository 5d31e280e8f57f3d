"""Measure the performance targets against loopback fakes.

    python -m benchmarks [--quick] [--json out.json] [--only makespan,cpu,…]
                         [--pg postgresql+asyncpg://postgres@127.0.0.1:5432/test | none]
                         [--profile cpu-profile.txt] [--workers N] [--user-path]

The LLM fake and the model fake run in a process of their own
(``benchmarks.fakes_server``) and the bot is pointed at them by URL, so the
fakes never share the bot's CPU.  Each measurement runs in a fresh process
(``benchmarks.measure``; with ``--quick`` all but the CLI share one, to save
start-ups) on the bot's public entry point (``bot.app.open_agent`` and
``Agent.handle``, or ``python -m bot`` itself).  Ratios are taken within
one run.  Prints one table (each figure next to its target, PASS/FAIL) and
writes the same figures as JSON.  Only 127.0.0.1 is contacted; every loop is
bounded in count and time.  ``--quick`` runs fewer repetitions and 100
instead of 500 simultaneous requests.

What each figure is:

1. makespan ÷ critical path – plans scripted per shape (single, chain 3,
   dag 4, wide 6, a seeded 10-node DAG), models 0.2 s, LLM 0 s; makespan is
   the first task's ``started`` to the last task's ``ended`` in the Reply;
   critical path = tasks on the longest dependency chain × 0.2 s.
2. wall ÷ (planning call + critical path + answer call) – LLM 0.5 s per call
   with LLM model selection (the default), models 0.2 s; the selection call
   runs alongside the tasks (each starts on its most downloaded candidate).
3. prompt tokens per request – every LLM request body the fake recorded for
   one request in a fresh conversation (run 2), cl100k_base when tiktoken is
   installed, else chars/4; compared with JARVIS's figures from the issue.
4. time to first answer words – whether the answer call streams (from its
   request body); while it does not, the time to the whole answer.
5. CPU per request – ``time.process_time()`` of the bot process ÷ requests,
   sequential, warm, zero latency, single-task plans, on SQLite and PostgreSQL;
   p50 wall per request (everything is overhead at zero latency).
6. CLI – wall of a whole ``python -m bot ask`` (median of 3) and ``--help``,
   with each one's CPU and, from one ``python -X importtime`` run, the
   seconds ``ask`` spends importing, by package.
7. concurrency – N simultaneous requests in N conversations (LLM 0.2 s,
   models 0.1 s, single-task plans), taken as the adapters take them
   (accepted as durable jobs, run under MAX_INFLIGHT_REQUESTS): failed
   requests, total wall ÷ one request.  SQLite in one process; PostgreSQL in
   ``--workers`` bot processes (default one per CPU) sharing the database.
   Beside it, per store, the floor (``benchmarks.request_floor``, INFO): one
   request recorded through that bot, its calls replayed N at once on the
   client libraries alone, every write group-committed; N × that CPU per
   request ÷ the processes ÷ one request's wall, the ratio CPU alone implies.
8. reuse – a repeated question in one conversation: the same model on the
   same image asked again, by its handle and re-uploaded under another name;
   model calls each repeat made (target 0), and the result cache's hit rate
   over the whole scenario.

userpath – figures 1 and 2 on the user's path (``benchmarks.user_path``):
each request the first of a fresh process – ``python -m bot ask … --json
--file photo.png`` without a worker, and a freshly started ``run slack`` /
``run discord`` against the Slack and Discord fakes (their second request
too, warm) – with the largest gap between a model call's end and the next
call's start; printed in sections 1 and 2 and, after the table, side by side
with the warm figures; and the cold ``ask`` (section 6): without a worker,
and with the CLI worker started on first use (the first ask, the later
ones).  ``--user-path`` runs only what that comparison needs (makespan,
latency, userpath, cli).

The bot's processes run compiled bytecode, as an installed bot does: the
checkout is compiled first and PYTHONDONTWRITEBYTECODE is dropped for them;
``CLI_WORKER_START=never`` unless a measurement starts a worker itself.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
ORDER = ("makespan", "latency", "userpath", "cpu", "cli", "concurrency", "reuse")
# --user-path: the user's path beside the warm figures it is read against
USER_PATH = ("makespan", "latency", "userpath", "cli")
PG_URL = "postgresql+asyncpg://postgres@127.0.0.1:5432/test"
# Seconds each measurement process may take before it is stopped (quick, full).
LIMITS = {
    "makespan": (90, 180),
    "latency": (120, 240),
    "cpu": (120, 300),
    "cli": (120, 180),
    "concurrency": (180, 480),
    "reuse": (60, 120),
    "userpath": (600, 1800),
}


def groups(wanted: list[str], quick: bool) -> list[list[str]]:
    """One process per measurement; with --quick, one for the CLI (which starts
    its own) and one for the rest, to save the interpreter and import start-ups."""
    names = [n for n in ORDER if n in wanted]
    if not quick:
        return [[n] for n in names]
    alone = ("cli", "userpath")  # each starts processes of its own
    rest = [n for n in names if n not in alone]
    return [g for g in (rest, *([n] for n in alone if n in names)) if g]


def child_env() -> dict[str, str]:
    """This environment without anything the bot's settings would read."""
    sys.path.insert(0, str(ROOT))
    from benchmarks.harness import settings_env_names

    names = settings_env_names()
    env = {k: v for k, v in os.environ.items() if k not in names}
    env["PYTHONPATH"] = str(ROOT) + (
        os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else ""
    )
    env.setdefault("PYTHONUNBUFFERED", "1")
    # The bot's processes read compiled bytecode, as an installed bot does (pip
    # compiles at install; a checkout writes __pycache__ on first run): a shell
    # with PYTHONDONTWRITEBYTECODE would have every process compile the
    # project's modules again (about 0.15 s of each cold start). compile_checkout.
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    # No CLI worker starts on first use unless a measurement asks for one
    # (benchmarks.user_path.cold_ask): each `ask` measured cold stays cold.
    env["CLI_WORKER_START"] = "never"
    return env


def compile_checkout(env: dict[str, str]) -> str:
    """Compile the checkout's modules (``__pycache__``, git-ignored), as an
    installed bot has them; what was done, for the header."""
    dirs = [
        d
        for d in ("bot", "core", "adapters", "migrations", "benchmarks", "tests")
        if (ROOT / d).is_dir()
    ]
    p = subprocess.run(
        [sys.executable, "-m", "compileall", "-q", *dirs],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        timeout=300,
    )
    how = "compiled" if p.returncode == 0 else f"compileall exit {p.returncode}"
    if os.environ.get("PYTHONDONTWRITEBYTECODE"):
        how += " (PYTHONDONTWRITEBYTECODE is set here: dropped for the bot's processes)"
    return how


class FakesProcess:
    """``benchmarks.fakes_server`` in a child process; it exits when we close its stdin."""

    def __init__(self, env: dict[str, str]) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "benchmarks.fakes_server", "--max-seconds", "1200"],
            cwd=ROOT,
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        line: list[str] = []
        reader = threading.Thread(
            target=lambda: line.append(self.proc.stdout.readline() if self.proc.stdout else ""),
            daemon=True,
        )
        reader.start()
        reader.join(30)
        if not line or not line[0].strip():
            self.close()
            raise SystemExit("the fakes server did not start within 30 s")
        self.urls = line[0].strip()

    def close(self) -> None:
        if self.proc.stdin:
            self.proc.stdin.close()
        try:
            self.proc.wait(5)
        except subprocess.TimeoutExpired:
            self.proc.terminate()
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()


def run_group(
    names: list[str], urls: str, env: dict[str, str], args: argparse.Namespace
) -> dict[str, dict[str, Any]]:
    """Run ``names`` in turn in one fresh process; their results by name."""
    cmd = [sys.executable, "-m", "benchmarks.measure", ",".join(names), "--fakes", urls]
    cmd += ["--pg", args.pg]
    if args.quick:
        cmd.append("--quick")
    if args.profile and "cpu" in names:
        cmd += ["--profile", str(Path(args.profile).resolve())]
    if args.workers:
        cmd += ["--workers", str(args.workers)]
    limit = sum(LIMITS[n][0 if args.quick else 1] for n in names)
    t0 = time.perf_counter()
    out: dict[str, dict[str, Any]] = {}
    why = ""
    try:
        p = subprocess.run(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, text=True, timeout=limit)
        stdout, why = p.stdout or "", f"exit {p.returncode}" if p.returncode else ""
    except subprocess.TimeoutExpired as e:
        stdout = e.stdout.decode() if isinstance(e.stdout, bytes) else (e.stdout or "")
        why = f"stopped after {limit} s"
    took = time.perf_counter() - t0
    for line in stdout.splitlines():
        try:
            result = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(result, dict) and result.get("name") in names:
            out[result["name"]] = result
    for name in names:
        if name not in out:
            out[name] = _failed(name, why or "no result line", took)
        out[name]["process"] = {"measurements": names, "seconds": round(took, 1)}
    return out


def _failed(name: str, why: str, took: float) -> dict[str, Any]:
    section = {
        "makespan": 1,
        "latency": 2,
        "userpath": 1,
        "cpu": 5,
        "cli": 6,
        "concurrency": 7,
        "reuse": 8,
    }[name]
    row = {
        "section": section,
        "measure": name,
        "case": "-",
        "figure": "did not run",
        "target": "",
        "status": "FAIL",
        "value": None,
        "unit": "",
        "note": f"the {name} measurement failed ({why}); see its stderr above",
    }
    return {"rows": [row], "details": {}, "error": why}


def table(rows: list[dict[str, Any]]) -> str:
    head = ("#", "measure", "case", "figure", "target", "result")
    data = [
        (str(r["section"]), r["measure"], r["case"], r["figure"], r["target"], r["status"])
        for r in rows
    ]
    widths = [max(len(x[i]) for x in [head, *data]) for i in range(len(head))]

    def fmt(cells: tuple[str, ...]) -> str:
        return "  ".join(c.ljust(w) for c, w in zip(cells, widths, strict=True)).rstrip()

    out = [fmt(head), "  ".join("-" * w for w in widths)]
    last = None
    for r, cells in zip(rows, data, strict=True):
        if last is not None and r["section"] != last:
            out.append("")
        last = r["section"]
        out.append(fmt(cells))
    notes = [f"  {r['section']} {r['case']}: {r['note']}" for r in rows if r.get("note")]
    return "\n".join([*out, "", "notes:", *notes])


def main() -> int:
    ap = argparse.ArgumentParser(
        prog="python -m benchmarks", description="Measure the performance targets."
    )
    ap.add_argument("--quick", action="store_true", help="fewer repetitions (about a minute)")
    ap.add_argument("--json", default=None, metavar="PATH", help="also write the figures here")
    ap.add_argument("--only", default=None, help=f"comma list of {', '.join(ORDER)}")
    ap.add_argument(
        "--user-path",
        action="store_true",
        help=f"the user's path beside the warm figures (--only {','.join(USER_PATH)})",
    )
    ap.add_argument("--pg", default=PG_URL, help="PostgreSQL server for 5 and 7, or 'none'")
    ap.add_argument(
        "--profile",
        default=None,
        metavar="PATH",
        help="cpu: profile the request loop with pyinstrument into PATH (+ .html)",
    )
    ap.add_argument(
        "--workers",
        type=int,
        default=None,
        metavar="N",
        help="concurrency: bot processes sharing the PostgreSQL store (default: one per CPU)",
    )
    args = ap.parse_args()
    only = args.only or ",".join(USER_PATH if args.user_path else ORDER)
    wanted = [n.strip() for n in only.split(",") if n.strip()]
    unknown = [n for n in wanted if n not in ORDER]
    if unknown:
        ap.error(f"unknown measurement(s): {', '.join(unknown)}")

    env = child_env()
    bytecode = compile_checkout(env)
    started = time.time()
    load_before = os.getloadavg()
    t0 = time.perf_counter()
    fakes = FakesProcess(env)
    results: dict[str, dict[str, Any]] = {}
    try:
        for group in groups(wanted, args.quick):
            print(f"[{', '.join(group)}] running…", file=sys.stderr, flush=True)
            t = time.perf_counter()
            results.update(run_group(group, fakes.urls, env, args))
            took = time.perf_counter() - t
            print(f"[{', '.join(group)}] {took:.1f} s", file=sys.stderr, flush=True)
    finally:
        fakes.close()
    total = time.perf_counter() - t0
    load_after = os.getloadavg()

    rows = [r for name in ORDER if name in results for r in results[name]["rows"]]
    rows.sort(key=lambda r: r["section"])  # stable: keeps each measurement's order
    mode = "quick" if args.quick else "full"
    print()
    print(
        f"python -m benchmarks ({mode}): {os.cpu_count()} CPUs, Python "
        f"{platform.python_version()}, fakes in pid {fakes.proc.pid}, {total:.0f} s; "
        f"bytecode {bytecode}"
    )
    print(
        f"load average (1 min) {load_before[0]:.2f} before, {load_after[0]:.2f} after"
        + (
            " – other work on this machine skews the wall-clock figures"
            if max(load_before[0], load_after[0]) > 1.5
            else ""
        )
    )
    print(table(rows))
    if "userpath" in results:
        from benchmarks.user_path import side_by_side

        print()
        print(side_by_side(results))
    fails = sum(r["status"] == "FAIL" for r in rows)
    print(
        f"\n{sum(r['status'] == 'PASS' for r in rows)} PASS, {fails} FAIL, "
        f"{sum(r['status'] == 'SKIP' for r in rows)} SKIP"
    )
    if args.json:
        payload = {
            "mode": mode,
            "started": time.strftime("%Y-%m-%dT%H:%M:%S%z", time.localtime(started)),
            "seconds": round(total, 1),
            "machine": {
                "cpus": os.cpu_count(),
                "python": platform.python_version(),
                "platform": platform.platform(),
                "loadavg_before": load_before,
                "loadavg_after": load_after,
            },
            "rows": rows,
            "measurements": {
                name: {k: v for k, v in res.items() if k != "rows"} for name, res in results.items()
            },
        }
        Path(args.json).write_text(json.dumps(payload, indent=2, default=str) + "\n", "utf-8")
        print(f"wrote {args.json}")
    crashed = [n for n, r in results.items() if r.get("error")]
    return 1 if crashed else 0


if __name__ == "__main__":
    sys.exit(main())
