"""The planner against a real language model: issue 18's Targets table.  Not CI.

    python -m benchmarks.real_llm [--model qwen|smol] [--eval-limit N] [--ask-limit N]
                                  [--json out.json] [--server-url URL] [--workdir DIR]

Starts ``llama-server`` (built by ``../shared/real-llm/setup.sh``) with the
chosen model, 2 threads, one slot (``-np 1``), and waits for ``/health`` —
or uses the server at ``--server-url``.  Starts the loopback Hugging Face
service (``benchmarks.fakes_server``, model calls 0.2 s) in a process of its
own.  Then, one request at a time (the server has one slot):

* **eval** – ``python -m bot eval plans DEV --report R.json --limit N
  --concurrency 1`` with the bot's LLM at the server; from the report: the
  valid-plan share, node-F1 / edge-F1 as ``eval plans`` reports them, seconds
  per plan, LLM timeouts.
* **ask** – the first N requests of ``taskbench_hf_requests.jsonl``, each as
  ``python -m bot ask TEXT --json --file F…`` in a fresh process with a fresh
  ``DATA_DIR``, ``MODEL_SELECTION=llm``, remote inference against the
  loopback service and the LLM at the server; every file the request names
  is attached (a small valid sample, :mod:`benchmarks.sample_media`).  A
  request still running after ``--ask-timeout`` seconds is stopped and
  counted as a hang.

Prints the table (measure, value, target) with the definitions it uses, and
writes every request's details to ``--json`` (and the eval report, every
prediction in it, next to it).  ``--fake-llm`` runs the whole pipeline
against the OpenAI fake instead (to check this script, not the planner).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import re
import shutil
import signal
import socket
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections import Counter
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks.sample_media import (  # noqa: E402
    looks_like_file,
    named_files,
    write_sample,
)

MODELS = {"qwen": "qwen2.5-coder-0.5b-instruct", "smol": "SmolLM2-135M-Instruct.Q4_1"}
DATA_NAMES = {"dev": "taskbench_hf_gold_dev.jsonl", "requests": "taskbench_hf_requests.jsonl"}
MODEL_DELAY = 0.2  # seconds per call of the loopback Hugging Face service
SLOW = 60.0  # a request over this many seconds is "over 60 s"
TIMEOUT_MARK = "did not answer within"  # the bot's words for an LLM timeout
# A request "asks for media" (so an answer without any model invents results).
MEDIA_WORDS = (
    "image", "picture", "photo", "video", "audio", "speech", "sound", "voice", "spoken",
    "aloud", "draw", "paint", "illustrat", "generate", "transcri", "segment", "detect",
)  # fmt: skip
# A canned plan for --fake-llm (one model on example.jpg).
FAKE_PLAN = json.dumps([
    {"task": "image-classification", "id": 0, "dep": [-1], "args": {"image": "example.jpg"}}
])  # fmt: skip

DEFINITIONS = {
    "fits": "the plan fits the request: at least one task ran OK, every file the request "
    "names is an argument of some task of the plan, and no task has a file argument the "
    "request did not name (a file argument: an image/audio/video/text argument, or any "
    "argument that is a bare file name)",
    "invented": "invented results: status 'answered' with no task run OK, while the request "
    "names a file or asks for media or a model's work (every TaskBench request needs a tool)",
    "hang": "hang: no answer within the per-request limit (the process is stopped)",
    "over_60": f"over {SLOW:g} s: the whole `python -m bot ask` process, start to exit",
    "llm_timeout": f"LLM timeout: the bot's answer or log says '{TIMEOUT_MARK}'",
}


# ------------------------------------------------------------------ helpers


class Interrupted(Exception):
    """SIGTERM (or Ctrl-C): stop the children, report what was measured so far."""


def _on_sigterm(signum: int, frame: object) -> None:
    raise Interrupted(f"signal {signum}")


def log(msg: str) -> None:
    print(f"[real_llm {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def http_json(url: str, body: Any = None, timeout: float = 10.0) -> Any:
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, method="GET" if body is None else "POST")
    if data is not None:
        req.add_header("Content-Type", "application/json")
    with urllib.request.urlopen(req, timeout=timeout) as r:
        raw = r.read()
    return json.loads(raw) if raw else None


def port_in_use(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


def stop_process(proc: subprocess.Popen[Any], grace: float = 10.0) -> None:
    """SIGTERM the process's group, then SIGKILL after ``grace`` seconds."""
    if proc.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(grace)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(5)


def data_path(given: Path | None, key: str) -> Path:
    """``given``, else ``../shared/data/NAME`` next to the repository, else tests/data."""
    if given is not None:
        return given
    name = DATA_NAMES[key]
    for candidate in (ROOT.parent / "shared" / "data" / name, ROOT / "tests" / "data" / name):
        if candidate.is_file():
            return candidate
    raise SystemExit(f"error: {name} is not in ../shared/data or tests/data; pass --{key} PATH")


# --------------------------------------------------------------- the server


class LlamaServer:
    """llama-server on 127.0.0.1:PORT with one model; or a server already running."""

    def __init__(self, args: argparse.Namespace, workdir: Path) -> None:
        self.args = args
        self.proc: subprocess.Popen[bytes] | None = None
        self.log_path = workdir / "llama-server.log"
        if args.server_url:
            self.base = str(args.server_url).rstrip("/").removesuffix("/v1")
        else:
            self.base = f"http://127.0.0.1:{args.port}"
        self.model = args.llm_model or MODELS[args.model]
        self.props: dict[str, Any] = {}

    @property
    def v1(self) -> str:
        return self.base + "/v1"

    def start(self) -> None:
        if self.args.server_url:
            self._wait_ready(self.args.server_timeout, health=False)
            return
        d = self.args.real_llm_dir
        binary = d / "build" / "bin" / "llama-server"
        gguf = d / "models" / f"{MODELS[self.args.model]}.gguf"
        for needed in (binary, gguf):
            if not needed.is_file():
                raise SystemExit(
                    f"error: {needed} is missing; build it with bash ../shared/real-llm/setup.sh"
                )
        if port_in_use(self.args.port):
            raise SystemExit(
                f"error: 127.0.0.1:{self.args.port} is taken; stop that server or pass "
                f"--port N (or --server-url to use it)"
            )
        cmd = [
            str(binary), "-m", str(gguf), "--alias", self.model, "--host", "127.0.0.1",
            "--port", str(self.args.port), "-t", str(self.args.threads), "-c", str(self.args.ctx),
            "-np", "1", "--jinja",
        ]  # fmt: skip
        log(f"starting {' '.join(cmd)}")
        with self.log_path.open("wb") as out:
            self.proc = subprocess.Popen(
                cmd, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                start_new_session=True,
            )  # fmt: skip
        self._wait_ready(self.args.server_timeout, health=True)

    def _wait_ready(self, within: float, health: bool) -> None:
        deadline = time.monotonic() + within
        last = ""
        while time.monotonic() < deadline:
            if self.proc is not None and self.proc.poll() is not None:
                tail = self.log_path.read_text(errors="replace")[-800:]
                raise SystemExit(f"error: llama-server exited ({self.proc.returncode}):\n{tail}")
            try:
                if health:
                    http_json(self.base + "/health", timeout=5)
                models = http_json(self.v1 + "/models", timeout=5)
                ids = [m.get("id") for m in (models or {}).get("data", [])]
                if not self.args.llm_model and ids and self.args.server_url:
                    self.model = str(ids[0])
                break
            except (urllib.error.URLError, OSError, ValueError) as e:
                last = str(e)
                time.sleep(0.5)
        else:
            self.stop()
            raise SystemExit(
                f"error: the LLM server at {self.base} not ready in {within:g} s: {last}"
            )
        with contextlib.suppress(urllib.error.URLError, OSError, ValueError):
            props = http_json(self.base + "/props", timeout=5)
            self.props = props if isinstance(props, dict) else {}
        log(f"LLM server ready at {self.v1}, model {self.model}")

    def wait_idle(self, within: float = 300.0) -> float:
        """Wait until no slot is busy (a stopped client's generation may still run);
        the seconds waited (0 when the server has no /slots)."""
        t0 = time.monotonic()
        while time.monotonic() - t0 < within:
            try:
                slots = http_json(self.base + "/slots", timeout=5)
            except (urllib.error.URLError, OSError, ValueError):
                return 0.0
            if not isinstance(slots, list) or not any(
                isinstance(s, dict) and s.get("is_processing") for s in slots
            ):
                return time.monotonic() - t0
            time.sleep(1.0)
        return time.monotonic() - t0

    def info(self) -> dict[str, Any]:
        settings = self.props.get("default_generation_settings") or {}
        return {
            "url": self.v1,
            "model": self.model,
            "started_here": self.proc is not None,
            "threads": None if self.args.server_url else self.args.threads,
            "n_ctx": settings.get("n_ctx") or self.props.get("n_ctx"),
            "build_info": self.props.get("build_info"),
            "model_path": self.props.get("model_path"),
        }

    def cancelled(self) -> int | None:
        """Generations the server cancelled because the client went away (a timeout)."""
        if not self.log_path.is_file():
            return None
        return self.log_path.read_text(errors="replace").count("cancel task")

    def speed(self) -> dict[str, Any] | None:
        """Tokens per second the server reported (its log; None: not started here)."""
        if self.proc is None and not self.log_path.is_file():
            return None
        return server_speed(self.log_path.read_text(errors="replace"))

    def stop(self) -> None:
        if self.proc is not None:
            stop_process(self.proc)
            log("llama-server stopped")
            self.proc = None


_TIMING = re.compile(r"(prompt eval|\beval) time =\s*([\d.]+) ms /\s*(\d+) tokens")


def server_speed(text: str) -> dict[str, Any]:
    """Calls, and prompt / generated tokens per second (median of calls, and overall),
    from llama-server's ``print_timing`` lines."""
    calls: dict[str, list[tuple[float, int]]] = {"prompt eval": [], "eval": []}
    for m in _TIMING.finditer(text):
        calls[m.group(1)].append((float(m.group(2)) / 1000, int(m.group(3))))

    def rates(xs: list[tuple[float, int]]) -> dict[str, Any]:
        per = [n / t for t, n in xs if t > 0]
        total_t = sum(t for t, _ in xs)
        return {
            "tokens": sum(n for _, n in xs),
            "seconds": round(total_t, 1),
            "median_per_s": round(statistics.median(per), 1) if per else None,
            "overall_per_s": round(sum(n for _, n in xs) / total_t, 1) if total_t else None,
        }

    return {
        "calls": len(calls["eval"]),
        "prompt": rates(calls["prompt eval"]),
        "generated": rates(calls["eval"]),
    }


# ---------------------------------------------------------------- the fakes


class HFService:
    """``benchmarks.fakes_server`` in a child process (the Hugging Face service
    and the OpenAI fake); it exits when we close its stdin."""

    def __init__(self, env: dict[str, str], fake_llm: bool) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "benchmarks.fakes_server", "--max-seconds", "86400"],
            cwd=ROOT, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
            start_new_session=True,
        )  # fmt: skip
        line: list[str] = []
        reader = threading.Thread(
            target=lambda: line.append(self.proc.stdout.readline() if self.proc.stdout else ""),
            daemon=True,
        )
        reader.start()
        reader.join(60)
        if not line or not line[0].strip():
            self.close()
            raise SystemExit("error: the loopback Hugging Face service did not start in 60 s")
        urls = json.loads(line[0])
        self.control, self.llm, self.hf = str(urls["control"]), str(urls["llm"]), str(urls["hf"])
        http_json(self.control + "/reset", {"llm_delay": 0.0, "model_delay": MODEL_DELAY})
        if fake_llm:
            http_json(self.control + "/llm/default", {"stage": "plan", "reply": FAKE_PLAN})

    def calls(self) -> int:
        return int(http_json(self.control + "/hf/calls?since=1000000000")["count"])

    def close(self) -> None:
        if self.proc.stdin:
            with contextlib.suppress(OSError):
                self.proc.stdin.close()
        try:
            self.proc.wait(5)
        except subprocess.TimeoutExpired:
            stop_process(self.proc)


# ---------------------------------------------------------------- the bot


def bot_env(server: LlamaServer, hf: HFService, data_dir: Path) -> dict[str, str]:
    """The environment of ``python -m bot``: nothing the settings read from ours."""
    from bot.settings import env_names

    names = set(env_names())
    env = {k: v for k, v in os.environ.items() if k not in names}
    env.update(
        OPENAI_BASE_URL=server.v1,
        OPENAI_API_KEY="sk-real-llm-bench-not-a-secret",
        LLM_MODEL=server.model,
        HF_TOKEN="hf_real_llm_bench_not_a_secret",
        HF_INFERENCE_URL=hf.hf,
        HF_ENDPOINT=hf.hf,
        HF_ROUTER_URL=hf.hf,
        INFERENCE_MODE="remote",
        MODEL_SELECTION="llm",
        DATA_DIR=str(data_dir),
        PYTHONPATH=str(ROOT) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else ""),
        PYTHONUNBUFFERED="1",
    )
    env.update(BOT_SETTINGS)  # --set NAME=VALUE
    return env


BOT_SETTINGS: dict[str, str] = {}  # bot settings given on the command line (--set)


def code_info(env: dict[str, str], cwd: Path) -> dict[str, Any]:
    """Which bot the children import, and the checkout's commit."""
    p = subprocess.run(
        [sys.executable, "-c", "import bot, core; print(bot.__file__); print(core.__file__)"],
        env=env, cwd=cwd, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    head = subprocess.run(
        ["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True, text=True
    ).stdout.strip()
    dirty = subprocess.run(
        ["git", "-C", str(ROOT), "status", "--porcelain", "--", "core", "bot", "adapters"],
        capture_output=True, text=True,
    ).stdout.strip()  # fmt: skip
    return {
        "root": str(ROOT),
        "commit": head or None,
        "core_bot_adapters_modified": bool(dirty),
        "bot_imported_from": p.stdout.split("\n")[0] if p.returncode == 0 else p.stderr[-300:],
    }


# -------------------------------------------------------------------- eval


F1 = tuple[float | None, float | None, int | None]  # node F1 %, edge F1 %, requests scored


@dataclass
class EvalRun:
    requests: int = 0
    valid: int | None = None
    valid_rate: float | None = None
    exact: F1 | None = None  # TaskBench's evaluate.py figures
    ours: F1 | None = None  # the project's view (aliases, our task table)
    seconds_per_plan: float | None = None
    llm_errors: int | None = None
    llm_timeouts: int = 0
    wall: float = 0.0
    exit_code: int | None = None
    table: str = ""
    report: str = ""
    error: str | None = None
    interrupted: bool = False
    done: int | None = None  # requests finished (from its progress lines)
    server_cancelled: int | None = None  # generations the server saw the client give up


EVAL_PROGRESS = re.compile(r"(\d+)/(\d+)[^\n\r]*?valid (\d+)/(\d+)")


def _dig(data: Any, *path: str) -> Any:
    for key in path:
        if not isinstance(data, dict) or key not in data:
            return None
        data = data[key]
    return data


def f1_figures(report: dict[str, Any]) -> tuple[F1 | None, F1 | None]:
    """(TaskBench's exact figures, the project's own view) from an ``eval plans``
    report; None where the report has no such table (before issue 18, only our view)."""
    exact: F1 | None = None
    block = report.get("taskbench")
    if isinstance(block, dict):
        overall = block.get("overall", block.get("all"))
        overall = overall if isinstance(overall, dict) else {}
        exact = (*_f1_pair(overall), overall.get("requests"))
    ours: F1 | None = None
    block = _dig(report, "gold", "by_shape", "all")
    if isinstance(block, dict):
        ours = (*_f1_pair(block), block.get("requests"))
    return exact, ours


def _f1_pair(block: dict[str, Any]) -> tuple[float | None, float | None]:
    def pct(v: Any) -> float | None:
        return None if v is None else 100.0 * float(v) if float(v) <= 1.0 else float(v)

    return pct(block.get("node_f1")), pct(block.get("edge_f1"))


def run_eval(
    args: argparse.Namespace, server: LlamaServer, hf: HFService, workdir: Path, report: Path
) -> EvalRun:
    dev = data_path(args.dev, "dev")
    n = args.eval_limit
    env = bot_env(server, hf, workdir / "eval-data")
    cmd = [
        sys.executable, "-m", "bot", "eval", "plans", str(dev), "--report", str(report),
        "--limit", str(n), "--concurrency", str(args.eval_concurrency),
    ]  # fmt: skip
    budget = n * (2 * args.llm_timeout + 30) + 300
    log(f"eval plans: the first {n} requests of {dev} (stopped after {budget:g} s at most)")
    run = EvalRun(requests=n, report=str(report))
    server.wait_idle()
    cancelled = server.cancelled()
    t0 = time.perf_counter()
    err_path = workdir / "eval-stderr.log"
    with err_path.open("w") as err:
        proc = subprocess.Popen(
            cmd, env=env, cwd=workdir, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
            stderr=err, text=True, start_new_session=True,
        )  # fmt: skip
        try:
            run.table, _ = proc.communicate(timeout=budget)
        except subprocess.TimeoutExpired:
            run.error = f"eval plans still running after {budget:g} s; stopped"
            stop_process(proc)
        except (Interrupted, KeyboardInterrupt):
            run.interrupted = True
            stop_process(proc)
        run.exit_code = proc.returncode
    run.wall = time.perf_counter() - t0
    after = server.cancelled()
    if cancelled is not None and after is not None:
        run.server_cancelled = after - cancelled
    progress = EVAL_PROGRESS.findall(err_path.read_text(errors="replace"))
    if progress:
        run.done, run.valid = int(progress[-1][0]), int(progress[-1][2])
    if not report.is_file():
        if run.interrupted:
            run.error = f"interrupted after {run.done} of {n} requests: no report, no F1"
        else:
            lines = err_path.read_text(errors="replace").strip().splitlines()
            last = lines[-1].split("\r")[-1][:300] if lines else ""
            run.error = run.error or f"eval plans wrote no report (exit {run.exit_code}): {last}"
        log(run.error)
        return run
    data = json.loads(report.read_text(encoding="utf-8"))
    planning = _dig(data, "planning", "all") or {}
    counts = planning.get("counts") or {}
    rows = data.get("requests") or []
    run.requests = run.done = planning.get("requests") or len(rows) or n
    run.valid = counts.get("valid")
    run.valid_rate = planning.get("valid_rate")
    run.seconds_per_plan = planning.get("mean_latency_s")
    run.llm_errors = counts.get("llm_errors")
    run.llm_timeouts = sum(TIMEOUT_MARK in str(r.get("llm_error") or "") for r in rows)
    run.exact, run.ours = f1_figures(data)
    log(f"eval done in {run.wall:.0f} s: valid {run.valid}/{run.requests}")
    return run


# --------------------------------------------------------------------- ask


@dataclass
class AskRun:
    index: int
    id: str
    request: str
    files: list[str]  # the names the request mentions (attached)
    status: str | None = None
    exit_code: int | None = None
    wall: float = 0.0
    hung: bool = False
    tasks: list[dict[str, Any]] = field(default_factory=list)
    tasks_ok: int = 0
    files_used: list[str] = field(default_factory=list)
    files_unused: list[str] = field(default_factory=list)
    foreign_files: list[str] = field(default_factory=list)  # file arguments not named
    fits: bool = False
    invented: bool = False
    llm_timeout: bool = False
    llm_calls: int | None = None
    tokens: int | None = None
    answer: str = ""
    error: str | None = None
    stderr_tail: str = ""
    waited_for_server: float = 0.0


def needs_models(text: str, files: list[str]) -> bool:
    low = text.lower()
    return bool(files) or any(w in low for w in MEDIA_WORDS)


def plan_rows(db: Path) -> list[dict[str, Any]]:
    """The stored task runs (with the plan's arguments) of the one turn in ``db``."""
    if not db.is_file():
        return []
    try:
        with contextlib.closing(sqlite3.connect(f"file:{db}?mode=ro", uri=True)) as conn:
            cur = conn.execute(
                "SELECT task_index, task, model, status, args FROM task_runs ORDER BY id"
            )
            out = []
            for index, task, model, status, args in cur.fetchall():
                try:
                    parsed = json.loads(args) if isinstance(args, str) else (args or {})
                except ValueError:
                    parsed = {"raw": args}
                out.append(
                    {"id": index, "task": task, "model": model, "status": status, "args": parsed}
                )
            return out
    except sqlite3.Error:
        return []


def file_arguments(args: Any) -> list[str]:
    """The arguments of a task that name a file: values of the media keys that
    are not another task's output, and any value that is a bare file name."""
    out: list[str] = []
    if not isinstance(args, dict):
        return out
    for key, value in args.items():
        for v in value if isinstance(value, list) else [value]:
            if not isinstance(v, str):
                continue
            s = v.strip()
            if "<resource>" in s or "<node-" in s:
                continue
            if looks_like_file(s) or (key in ("image", "audio", "video") and s):
                out.append(s)
    return out


def judge_fit(run: AskRun, rows: list[dict[str, Any]]) -> None:
    named = {f.lower(): f for f in run.files}
    used: set[str] = set()
    foreign: list[str] = []
    for row in rows:
        for value in file_arguments(row["args"]):
            if value.lower() in named:
                used.add(named[value.lower()])
            else:
                foreign.append(value)
    run.files_used = [f for f in run.files if f in used]
    run.files_unused = [f for f in run.files if f not in used]
    run.foreign_files = foreign
    run.fits = run.tasks_ok >= 1 and not run.files_unused and not foreign


def run_ask(
    i: int, item: dict[str, Any], args: argparse.Namespace, server: LlamaServer, hf: HFService,
    workdir: Path,
) -> AskRun:  # fmt: skip
    text = str(item.get("user_request") or item.get("instruction") or "")
    files = named_files(text)
    run = AskRun(i, str(item.get("id", i)), text, files)
    home = workdir / f"ask-{i:03d}"
    (home / "files").mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-m", "bot", "ask", text, "--json"]
    for name in files:
        path = home / "files" / name
        write_sample(path)
        cmd += ["--file", str(path)]
    env = bot_env(server, hf, home / "data")
    run.waited_for_server = server.wait_idle()
    err_path = home / "stderr.log"
    t0 = time.perf_counter()
    with err_path.open("w") as err:
        proc = subprocess.Popen(
            cmd, env=env, cwd=home, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=err,
            text=True, start_new_session=True,
        )  # fmt: skip
        try:
            out, _ = proc.communicate(timeout=args.ask_timeout)
        except subprocess.TimeoutExpired:
            run.hung = True
            stop_process(proc, grace=5)
            out = ""
        except (Interrupted, KeyboardInterrupt):
            stop_process(proc, grace=5)
            raise
    run.wall = time.perf_counter() - t0
    run.exit_code = proc.returncode
    stderr = err_path.read_text(errors="replace")
    run.stderr_tail = stderr[-600:]
    reply = None
    for line in reversed(out.splitlines()):
        with contextlib.suppress(ValueError):
            candidate = json.loads(line)
            if isinstance(candidate, dict) and "status" in candidate:
                reply = candidate
                break
    rows = plan_rows(home / "data" / "bot.db")
    if reply is not None:
        run.status = str(reply.get("status"))
        run.answer = str(reply.get("answer") or "")
        usage = reply.get("usage") or {}
        run.llm_calls = usage.get("llm_calls")
        run.tokens = (usage.get("prompt_tokens") or 0) + (usage.get("completion_tokens") or 0)
        args_by_id = {r["id"]: r["args"] for r in rows}
        run.tasks = [
            {
                "id": t.get("id"),
                "task": t.get("task"),
                "model": t.get("model"),
                "status": t.get("status"),
                "error": t.get("error"),
                "args": args_by_id.get(t.get("id")),
            }
            for t in reply.get("tasks") or []
        ]
        run.tasks_ok = sum(t.get("status") == "done" for t in reply.get("tasks") or [])
    elif not run.hung:
        run.error = f"no JSON reply (exit {run.exit_code}): {stderr[-300:]!r}"
    judge_fit(run, rows)
    run.llm_timeout = TIMEOUT_MARK in run.answer or TIMEOUT_MARK in stderr
    run.invented = run.status == "answered" and run.tasks_ok == 0 and needs_models(text, files)
    return run


def run_asks(
    args: argparse.Namespace, server: LlamaServer, hf: HFService, workdir: Path,
    runs: list[AskRun],
) -> bool:  # fmt: skip
    """Run the requests into ``runs``; False when interrupted before the last."""
    path = data_path(args.requests, "requests")
    items = []
    with path.open(encoding="utf-8") as f:
        for line in f:
            if line.strip():
                items.append(json.loads(line))
            if len(items) >= args.ask_limit:
                break
    log(f"ask: the first {len(items)} requests of {path}, one at a time")
    for i, item in enumerate(items):
        try:
            run = run_ask(i, item, args, server, hf, workdir)
        except (Interrupted, KeyboardInterrupt):
            log(f"ask interrupted during request {i + 1} of {len(items)}")
            return False
        runs.append(run)
        tasks = ",".join(f"{t['task']}:{t['status']}" for t in run.tasks) or "-"
        log(
            f"ask {i + 1}/{len(items)} {run.id}: {'HANG' if run.hung else run.status} "
            f"{run.wall:.1f} s, fits={run.fits}, tasks {tasks}"
            + (f", files unused {run.files_unused}" if run.files_unused else "")
            + (f", foreign {run.foreign_files}" if run.foreign_files else "")
        )
    return True


# ------------------------------------------------------------------- table


def _at_least(share: float, n: int) -> int:
    return math.ceil(share * n - 1e-9)


def table_rows(
    ev: EvalRun | None, asks: list[AskRun] | None, meta: dict[str, Any]
) -> list[tuple[str, str, str]]:
    rows: list[tuple[str, str, str]] = []
    if asks is not None:
        n = len(asks)
        fit = sum(a.fits for a in asks)
        walls = [a.wall for a in asks]
        slow = sum(w > SLOW for w in walls)
        hangs = sum(a.hung for a in asks)
        invented = sum(a.invented for a in asks)
        answered_slow = sum(a.wall > SLOW and not a.hung for a in asks)
        ran = sum(a.tasks_ok >= 1 for a in asks)
        statuses = Counter("hang" if a.hung else (a.status or "no reply") for a in asks)
        med = statistics.median(walls) if walls else 0.0
        rows += [
            (
                f"first {n} shared requests: ran ≥ 1 model with a plan that fits the request",
                f"{fit} / {n}",
                f"≥ {_at_least(2 / 3, n)} / {n}",
            ),
            ("same: ran ≥ 1 model (fitting or not)", f"{ran} / {n}", ""),
            (
                f"same: requests over {SLOW:g} s",
                f"{slow} (median {med:.0f} s, max {max(walls, default=0):.0f} s)",
                "0",
            ),
            (
                "same: hangs / invented results / answers over 60 s",
                f"{hangs} / {invented} / {answered_slow}",
                "0 / 0 / 0",
            ),
            (
                "same: LLM timeouts (the bot said so / the server saw the client leave)",
                f"{sum(a.llm_timeout for a in asks)} / {_or_dash(meta.get('ask_server_cancelled'))}",
                "",
            ),
            ("same: how they ended", ", ".join(f"{k} {v}" for k, v in statuses.most_common()), ""),
        ]
    if ev is not None:
        n = ev.requests
        if ev.valid_rate is not None:
            valid = f"{100 * ev.valid_rate:.1f} % ({ev.valid} / {n})"
        elif ev.done and ev.valid is not None:  # interrupted: its progress lines
            valid = f"{100 * ev.valid / ev.done:.1f} % ({ev.valid} / {ev.done}, interrupted)"
        else:
            valid = "—"
        if ev.seconds_per_plan is not None:
            spp = f"{ev.seconds_per_plan:.1f} s"
        elif ev.done:
            spp = f"{ev.wall / ev.done:.1f} s (wall ÷ requests done)"
        else:
            spp = "—"
        rows += [
            (f"`eval plans` on the dev set (first {n}): valid plan", valid, "≥ 85 %"),
            ("same: node-F1 / edge-F1, TaskBench exact", _f1_text(ev.exact), "first run + 20"),
        ]
        if ev.ours is not None:
            rows.append(
                ("same: node-F1 / edge-F1, our view (not TaskBench's)", _f1_text(ev.ours), "")
            )
        rows += [
            (
                "same: seconds per plan / LLM timeouts (report / the server saw the client leave)",
                f"{spp} / {ev.llm_timeouts if ev.valid_rate is not None else '—'}"
                f" / {_or_dash(ev.server_cancelled)}",
                "",
            ),
        ]
        if ev.error:
            rows.append(("same: eval error", ev.error, ""))
    return rows


def _or_dash(value: object) -> str:
    return "—" if value is None else str(value)


def _f1_text(f1: F1 | None) -> str:
    if f1 is None:
        return "— (this version's report has no such table)"
    node, edge, scored = f1
    fmt = "—" if node is None else f"{node:.1f}"
    return f"{fmt} / {'—' if edge is None else f'{edge:.1f}'} (on {scored})"


def render(rows: list[tuple[str, str, str]]) -> str:
    head = ("measure", "value", "target")
    lines = ["| " + " | ".join(head) + " |", "|---|---|---|"]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines)


# -------------------------------------------------------------------- main


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(
        prog="python -m benchmarks.real_llm", description=__doc__.splitlines()[0]
    )
    ap.add_argument("--model", choices=sorted(MODELS), default="qwen")
    ap.add_argument("--eval-limit", type=int, default=60, metavar="N", help="0: no eval")
    ap.add_argument("--ask-limit", type=int, default=30, metavar="N", help="0: no ask")
    ap.add_argument("--json", type=Path, metavar="OUT.json", help="every figure and request")
    ap.add_argument(
        "--eval-report", type=Path, metavar="R.json",
        help="where eval plans writes its report (default: OUT-eval.json next to --json)",
    )  # fmt: skip
    ap.add_argument("--server-url", help="use this OpenAI-compatible server instead")
    ap.add_argument("--llm-model", help="the model name to send (default: the server's)")
    ap.add_argument("--fake-llm", action="store_true", help="the OpenAI fake as the server")
    ap.add_argument("--dev", type=Path, help="../shared/data/taskbench_hf_gold_dev.jsonl")
    ap.add_argument("--requests", type=Path, help="../shared/data/taskbench_hf_requests.jsonl")
    ap.add_argument("--eval-concurrency", type=int, default=1, help="1: the server has one slot")
    ap.add_argument("--ask-timeout", type=float, default=180.0, help="seconds, then a hang")
    ap.add_argument("--llm-timeout", type=float, default=120.0, help="the bot's (for budgets)")
    ap.add_argument("--port", type=int, default=8080)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--ctx", type=int, default=8192)
    ap.add_argument("--server-timeout", type=float, default=300.0)
    ap.add_argument(
        "--real-llm-dir", type=Path,
        default=Path(os.environ.get("REAL_LLM_DIR", "~/.cache/real-llm")).expanduser(),
    )  # fmt: skip
    ap.add_argument("--workdir", type=Path, help="keep every log and data dir here")
    ap.add_argument(
        "--set", action="append", default=[], metavar="NAME=VALUE",
        help="a bot setting for every run (e.g. --set LLM_TEMPERATURE=0); repeatable",
    )  # fmt: skip
    args = ap.parse_args(argv)
    for item in args.set:
        name, eq, value = item.partition("=")
        if not eq or not name:
            ap.error(f"--set takes NAME=VALUE, not {item!r}")
        BOT_SETTINGS[name.upper()] = value
    return args


@contextlib.contextmanager
def working_dir(given: Path | None) -> Iterator[Path]:
    if given is not None:
        given.mkdir(parents=True, exist_ok=True)
        yield given.resolve()
        return
    tmp = Path(tempfile.mkdtemp(prefix="real-llm-"))
    try:
        yield tmp
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    signal.signal(signal.SIGTERM, _on_sigterm)
    started = time.perf_counter()
    with working_dir(args.workdir) as workdir:
        base_env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
        base_env["PYTHONPATH"] = str(ROOT)
        hf = HFService(base_env, fake_llm=args.fake_llm)
        if args.fake_llm:
            args.server_url = hf.llm
        server = LlamaServer(args, workdir)
        ev: EvalRun | None = None
        asks: list[AskRun] | None = None
        try:
            server.start()
            meta: dict[str, Any] = {
                "started": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
                "argv": sys.argv[1:],
                "model_key": None if args.server_url else args.model,
                "fake_llm": args.fake_llm,
                "server": server.info(),
                "code": code_info(bot_env(server, hf, workdir / "probe"), workdir),
                "model_delay_s": MODEL_DELAY,
                "ask_timeout_s": args.ask_timeout,
                "eval_concurrency": args.eval_concurrency,
                "workdir": str(workdir),
                "load_average_at_start": [round(x, 2) for x in os.getloadavg()],
            }
            report = args.eval_report or (
                args.json.with_name(args.json.stem + "-eval.json")
                if args.json
                else workdir / "eval-report.json"
            )
            report.parent.mkdir(parents=True, exist_ok=True)
            if args.json:
                args.json.parent.mkdir(parents=True, exist_ok=True)
            if args.eval_limit > 0:
                ev = run_eval(args, server, hf, workdir, report.resolve())
                if ev.interrupted:
                    meta["interrupted"] = "during eval"
            if args.ask_limit > 0 and not meta.get("interrupted"):
                t0 = time.perf_counter()
                cancelled = server.cancelled()
                asks = []
                if not run_asks(args, server, hf, workdir, asks):
                    meta["interrupted"] = f"during ask, after {len(asks)} requests"
                meta["ask_wall_s"] = round(time.perf_counter() - t0, 1)
                after = server.cancelled()
                if cancelled is not None and after is not None:
                    meta["ask_server_cancelled"] = after - cancelled
        finally:
            speed = server.speed()
            server.stop()
            hf.close()
        meta["server_speed"] = speed
        meta["total_wall_s"] = round(time.perf_counter() - started, 1)
        meta["bot_settings"] = dict(BOT_SETTINGS)
        meta["load_average_at_end"] = [round(x, 2) for x in os.getloadavg()]
        rows = table_rows(ev, asks, meta)
        server_info = meta["server"]
        print(
            f"Real LLM: {server_info['model']} at {server_info['url']} "
            f"({'llama-server started here, ' + str(args.threads) + ' threads, -np 1' if server_info['started_here'] else 'given server'}); "
            f"code {meta['code']['commit']} from {meta['code']['root']}"
            f"{' (core/bot/adapters modified)' if meta['code']['core_bot_adapters_modified'] else ''}"
        )
        if ev is not None:
            print(f"\n`python -m bot eval plans` printed ({ev.wall:.0f} s):\n")
            print(ev.table.rstrip())
        print()
        print(render(rows))
        print()
        for key, text in DEFINITIONS.items():
            if asks is not None or key not in ("fits", "invented", "hang", "over_60"):
                print(f"- {text}")
        took = [f"total {meta['total_wall_s']:.0f} s"]
        if ev is not None:
            took.append(f"eval {ev.wall:.0f} s")
        if asks is not None:
            took.append(f"ask {meta['ask_wall_s']:.0f} s")
        print(f"- took: {', '.join(took)}")
        if meta.get("interrupted"):
            print(f"- INTERRUPTED {meta['interrupted']}: the figures are of what finished")
        if speed is not None:
            gen, prompt = speed["generated"], speed["prompt"]
            print(
                f"- llama-server: {speed['calls']} calls, generated {gen['tokens']} tokens at "
                f"{gen['overall_per_s']} tokens/s (median call {gen['median_per_s']}), read "
                f"{prompt['tokens']} prompt tokens at {prompt['overall_per_s']} tokens/s"
            )
        load = meta.get("load_average_at_start"), meta["load_average_at_end"]
        print(f"- load average (1, 5, 15 min) at start {load[0]}, at end {load[1]}")
        if args.json:
            out = {
                "meta": meta,
                "definitions": DEFINITIONS,
                "table": [{"measure": m, "value": v, "target": t} for m, v, t in rows],
                "eval": None if ev is None else asdict(ev),
                "ask": None if asks is None else [asdict(a) for a in asks],
            }
            args.json.write_text(json.dumps(out, indent=1, ensure_ascii=False) + "\n", "utf-8")
            print(f"- details: {args.json}" + (f", eval report: {ev.report}" if ev else ""))
    return 1 if meta.get("interrupted") else 0


if __name__ == "__main__":
    sys.exit(main())
