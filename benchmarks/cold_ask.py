"""The cold ``ask`` on the user's path (benchmarks.user_path runs it): whole
``python -m bot ask TEXT --json`` processes at zero latency, one-task plan.

* without a worker (``CLI_WORKER_START=never``): every ask imports the SDKs;
  its wall and its CPU (user + system, which the machine's load changes
  little: the floor without a worker);
* with the worker started on first use (``CLI_WORKER_START=always``, as a
  terminal's ``auto`` does): the first ask (it runs here, then starts the
  worker), how long after it the worker listens, and the asks handed to it.

Each against ``COLD_ASK_TARGET`` (0.8 s), the bare interpreter's start beside
them (docs/speed.md).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import resource
import signal
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from benchmarks.harness import SHAPES, Fakes, Result, median, verdict

if TYPE_CHECKING:
    from benchmarks.user_path import Env

COLD_ASK_TARGET = 0.8  # seconds, a whole `python -m bot ask` at zero latency
COLD_REPS = 3  # cold asks of each kind (also with --quick: each is about a second)


async def _ask_wall(env: dict[str, str], cwd: Path, text: str) -> tuple[float, str | None]:
    """One whole ``python -m bot ask TEXT --json`` process: its wall, or why it failed."""
    t0 = time.perf_counter()
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "bot", "ask", text, "--json",
        env=env, cwd=cwd, stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    try:
        out, err = await asyncio.wait_for(proc.communicate(), 120)
    except TimeoutError:
        proc.kill()
        await proc.wait()
        return 0.0, "did not finish within 120 s"
    took = time.perf_counter() - t0
    if proc.returncode != 0 or '"status": "answered"' not in out.decode():
        return took, f"exit {proc.returncode}: {(err or out).decode()[-200:]}"
    return took, None


async def _listening(path: Path, within: float) -> bool:
    """Whether a worker accepts connections at ``path`` within ``within`` seconds."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        try:
            _reader, writer = await asyncio.open_unix_connection(str(path))
        except OSError:
            await asyncio.sleep(0.05)
            continue
        writer.close()
        with contextlib.suppress(OSError):
            await writer.wait_closed()
        return True
    return False


def _stop_worker(sock: Path) -> None:
    """SIGTERM the worker whose pid its lock file holds (started by this benchmark)."""
    lock = sock.with_name(sock.name + ".lock")
    with contextlib.suppress(OSError, ValueError):
        os.kill(int(lock.read_text().strip()), signal.SIGTERM)


async def cold_ask(env: Env, fakes: Fakes) -> dict[str, Any]:
    """Whole ``ask`` processes at zero latency: without a worker, then with the
    worker started on first use (the first ask, the worker's start-up, the
    asks handed to it); the bare interpreter's start beside them."""
    shape = SHAPES[0]
    await fakes.reset()
    await fakes.script(shape)
    out: dict[str, Any] = {"errors": []}
    never = env.bot_env("cold", "downloads")
    await _ask_wall(never, env.tmp, shape.text)  # creates the database, untimed
    walls, cpu = [], []
    for _ in range(COLD_REPS):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        took, err = await _ask_wall(never, env.tmp, shape.text)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        if err is not None:
            out["errors"].append(f"no worker: {err}")
            continue
        walls.append(took)
        cpu.append(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)
    out["no_worker"], out["no_worker_cpu"] = walls, cpu
    sock = env.tmp / "auto.sock"
    auto = {**never, "CLI_WORKER_START": "always", "CLI_SOCKET": str(sock)}
    try:
        took, err = await _ask_wall(auto, env.tmp, shape.text)
        out["first"] = [took] if err is None else []
        if err is not None:
            out["errors"].append(f"first ask: {err}")
        t0 = time.perf_counter()
        if await _listening(sock, 60):
            out["worker_ready_after"] = time.perf_counter() - t0
            await _ask_wall(auto, env.tmp, shape.text)  # the worker's first request: untimed
            later = []
            for _ in range(COLD_REPS):
                took, err = await _ask_wall(auto, env.tmp, shape.text)
                later.append(took) if err is None else out["errors"].append(f"worker: {err}")
            out["later"] = later
        else:
            out["errors"].append("the first ask started no worker listening within 60 s")
    finally:
        _stop_worker(sock)
    bare = []
    for _ in range(COLD_REPS):
        t0 = time.perf_counter()
        proc = await asyncio.create_subprocess_exec(sys.executable, "-c", "pass")
        await proc.wait()
        bare.append(time.perf_counter() - t0)
    out["python"] = bare
    return out


def cold_rows(res: Result, cold: dict[str, Any]) -> None:
    errors = cold.get("errors") or []
    bare = f"; python -c pass {median(cold['python']):.3f} s" if cold.get("python") else ""
    for key, case, note in (
        ("no_worker", "ask, no worker", "every ask imports the SDKs (CLI_WORKER_START=never)"),
        ("first", "ask, first (starts the worker)", "runs here, then starts the worker"),
        ("later", "ask, worker started on first use", "handed to the worker the first ask started"),
    ):
        walls = cold.get(key) or []
        if not walls:
            res.add(6, "cold ask wall (user's path)", case, "error", f"≤ {COLD_ASK_TARGET} s",
                    "FAIL", note="; ".join(errors)[:300])  # fmt: skip
            continue
        t = median(walls)
        ready = cold.get("worker_ready_after")
        cpu = cold.get("no_worker_cpu") if key == "no_worker" else None
        res.add(
            6,
            "cold ask wall (user's path)",
            case,
            f"{t:.2f} s",
            f"≤ {COLD_ASK_TARGET} s",
            verdict(t <= COLD_ASK_TARGET and not errors),
            value=t,
            unit="s",
            note=f"{note}; zero latency, one task, --json; median of {len(walls)}{bare}"
            + (f"; CPU {median(cpu):.2f} s" if cpu else "")
            + (
                f"; the worker listened {ready:.2f} s after the first ask ended"
                if key == "first" and ready is not None
                else ""
            )
            + (f"; {len(errors)} failed: {errors[0][:150]}" if errors else ""),
        )
