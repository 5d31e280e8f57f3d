"""The cold ``ask`` on the user's path: whole ``python -m bot ask TEXT --json
--file photo.png`` processes at zero latency, one-task plan.

    python -m benchmarks.cold_ask [--reps 5] [--against DIR] [--json PATH]

runs it alone (its own fakes process; ``benchmarks.user_path`` runs it as
part of ``python -m benchmarks --user-path``).  Each round, in turn:

* an ask without a worker (``CLI_WORKER_START=never``): every ask imports the
  SDKs; its wall, when its answer was printed, and its CPU (user + system,
  which the machine's load changes less: the floor without a worker);
* with ``--against DIR`` (another checkout, e.g. ``git worktree add DIR
  HEAD~1``), the same ask run from that code, right after (before it in
  every other round): before/after in one run, pair by pair, as the
  machine's speed drifts;
* the first ask with the worker started on first use
  (``CLI_WORKER_START=always``, as a terminal's ``auto`` does): it runs here
  and starts the worker once it has answered; then how long after it the
  worker listens, and one ask handed to that worker (after an untimed one).
  The worker is stopped before the next round.

Each ask is in a conversation of its own (no history to read).  Medians
over the rounds, each against ``COLD_ASK_TARGET`` (0.8 s), the bare
interpreter's start beside them (docs/speed.md).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import os
import resource
import signal
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from benchmarks.harness import SHAPES, Fakes, Result, median, verdict

if TYPE_CHECKING:
    from benchmarks.user_path import Env

COLD_ASK_TARGET = 0.8  # seconds, a whole `python -m bot ask` at zero latency
COLD_REPS = 5  # rounds (also with --quick: each ask is about a second)
PHOTO = "photo.png"  # the file each ask sends (written into the run's directory)


@dataclass(frozen=True, slots=True)
class Ask:
    """One whole ``ask`` process: start to exit, start to its answer on
    stdout, its CPU; or why it failed."""

    wall: float
    printed: float = 0.0
    cpu: float = 0.0
    error: str | None = None


_asked = itertools.count()


async def _ask(env: dict[str, str], cwd: Path, text: str) -> Ask:
    """One whole ``python -m bot ask TEXT --json [--file photo.png]`` process,
    in a conversation of its own (every ask reads the same history: none)."""
    files = ["--file", PHOTO] if (cwd / PHOTO).is_file() else []
    files += ["--conversation", f"cold-{next(_asked)}"]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "bot", "ask", text, "--json", *files,
        env=env, cwd=cwd, stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    assert proc.stdout is not None and proc.stderr is not None
    try:
        line = await asyncio.wait_for(proc.stdout.readline(), 120)  # the one JSON line
        printed = time.perf_counter() - t0
        rest, err = await asyncio.wait_for(
            asyncio.gather(proc.stdout.read(), proc.stderr.read()), 60
        )
        await proc.wait()
    except TimeoutError:
        proc.kill()
        await proc.wait()
        return Ask(time.perf_counter() - t0, error="did not finish within 120 s")
    took = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime
    out = (line + rest).decode()
    if proc.returncode != 0 or '"status": "answered"' not in out:
        return Ask(took, error=f"exit {proc.returncode}: {(err or out.encode()).decode()[-200:]}")
    return Ask(took, printed, cpu)


async def _listening(path: Path, within: float) -> bool:
    """Whether a worker accepts connections at ``path`` within ``within`` seconds."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        try:
            _reader, writer = await asyncio.open_unix_connection(str(path))
        except OSError:
            await asyncio.sleep(0.02)
            continue
        writer.close()
        with contextlib.suppress(OSError):
            await writer.wait_closed()
        return True
    return False


def _worker_pid(sock: Path) -> int | None:
    """The pid the worker's lock file holds (the worker a first ask started)."""
    lock = sock.with_name(sock.name + ".lock")
    try:
        return int(lock.read_text().strip())
    except (OSError, ValueError):
        return None


def _gone(pid: int) -> bool:
    """Whether ``pid`` has exited (a zombie nobody reaped counts as gone)."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as f:
            return f.read().rpartition(")")[2].split()[0] == "Z"
    except OSError:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        except PermissionError:
            return False
        return False


async def _stop_worker(sock: Path, within: float = 15.0) -> None:
    """SIGTERM the worker started for ``sock`` and wait until it has exited,
    so that it takes no CPU from the next round."""
    pid = _worker_pid(sock)
    if pid is None:
        return
    with contextlib.suppress(OSError):
        os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + within
    while time.monotonic() < deadline and not _gone(pid):  # noqa: ASYNC110 (another process)
        await asyncio.sleep(0.05)


def _record(out: dict[str, Any], key: str, got: Ask, label: str) -> None:
    if got.error is not None:
        out["errors"].append(f"{label}: {got.error}")
        return
    out.setdefault(key, []).append(got.wall)
    out.setdefault(f"{key}_cpu", []).append(got.cpu)
    out.setdefault(f"{key}_printed", []).append(got.printed)


async def cold_ask(
    env: Env, fakes: Fakes, *, reps: int = COLD_REPS, against: Path | None = None
) -> dict[str, Any]:
    """``reps`` rounds of whole ``ask`` processes at zero latency (see the
    module doc): without a worker (and from ``against``'s code when given),
    the first ask that starts the worker, the worker's start-up, an ask
    handed to it; the bare interpreter's start."""
    shape = SHAPES[0]
    await fakes.reset()
    await fakes.script(shape)
    if not (env.tmp / PHOTO).is_file():
        from tests.fakes.samples import sample_png

        (env.tmp / PHOTO).write_bytes(sample_png(96, 96))
    out: dict[str, Any] = {"errors": [], "reps": reps}
    never = env.bot_env("cold", "downloads")
    variants = [("no_worker", never)]
    if against is not None:
        other = {**env.bot_env("cold-against", "downloads"), "PYTHONPATH": str(against)}
        variants.append(("against", other))
        out["against_dir"] = str(against)
    for _key, variant in variants:  # each creates its database, untimed
        await _ask(variant, env.tmp, shape.text)
    for r in range(reps):
        for key, variant in variants if r % 2 == 0 else variants[::-1]:  # ABBA: no order bias
            _record(out, key, await _ask(variant, env.tmp, shape.text), key.replace("_", " "))
        sock = env.tmp / f"auto-{r}.sock"
        auto = {**never, "CLI_WORKER_START": "always", "CLI_SOCKET": str(sock)}
        try:
            first = await _ask(auto, env.tmp, shape.text)
            _record(out, "first", first, "first ask")
            t0 = time.perf_counter()
            if first.error is None and await _listening(sock, 60):
                out.setdefault("worker_ready", []).append(time.perf_counter() - t0)
                await _ask(auto, env.tmp, shape.text)  # the worker's first request: untimed
                _record(out, "later", await _ask(auto, env.tmp, shape.text), "handed over")
            elif first.error is None:
                out["errors"].append("the first ask started no worker listening within 60 s")
        finally:
            await _stop_worker(sock)
        t0 = time.perf_counter()
        proc = await asyncio.create_subprocess_exec(sys.executable, "-c", "pass")
        await proc.wait()
        out.setdefault("python", []).append(time.perf_counter() - t0)
    if out.get("worker_ready"):
        out["worker_ready_after"] = median(out["worker_ready"])
    return out


def cold_rows(res: Result, cold: dict[str, Any]) -> None:
    errors = cold.get("errors") or []
    bare = f"; python -c pass {median(cold['python']):.3f} s" if cold.get("python") else ""
    kinds = [
        ("no_worker", "ask, no worker", "every ask imports the SDKs (CLI_WORKER_START=never)"),
        ("first", "ask, first (starts the worker)", "runs here, then starts the worker"),
        ("later", "ask, worker started on first use", "handed to the worker the first ask started"),
    ]
    if cold.get("against_dir"):
        kinds.insert(
            1, ("against", "ask, no worker, --against", f"the code in {cold['against_dir']}")
        )
    for key, case, note in kinds:
        walls = cold.get(key) or []
        if not walls:
            res.add(6, "cold ask wall (user's path)", case, "error", f"≤ {COLD_ASK_TARGET} s",
                    "FAIL", note="; ".join(errors)[:300])  # fmt: skip
            continue
        t = median(walls)
        ready = cold.get("worker_ready_after")
        cpu = cold.get(f"{key}_cpu") if key in ("no_worker", "against", "first") else None
        printed = cold.get(f"{key}_printed") if key == "first" else None
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
            + (f"; its answer printed at {median(printed):.2f} s" if printed else "")
            + (
                f"; the worker listened {ready:.2f} s after the first ask ended"
                if key == "first" and ready is not None
                else ""
            )
            + (f"; {len(errors)} failed: {errors[0][:150]}" if errors else ""),
        )


async def _main(reps: int, against: Path | None) -> Result:  # pragma: no cover - manual
    import tempfile

    from benchmarks.__main__ import FakesProcess, child_env, compile_checkout
    from benchmarks.harness import FakeURLs, settings_env_names
    from benchmarks.user_path import Env

    env = child_env()
    say = f"bytecode {compile_checkout(env)}"
    fakes_proc = FakesProcess(env)
    res = Result()
    load = os.getloadavg()
    try:
        with tempfile.TemporaryDirectory(prefix="hgbench-cold-") as tmp:
            base = {k: v for k, v in env.items() if k not in settings_env_names()}
            urls = FakeURLs.from_json(fakes_proc.urls)
            async with Fakes(urls) as fakes:
                cold = await cold_ask(
                    Env(urls, Path(tmp), base, reps), fakes, reps=reps, against=against
                )
    finally:
        fakes_proc.close()
    cold["load"] = (load, os.getloadavg())
    res.details["cold_ask"] = cold
    res.details["header"] = say
    cold_rows(res, cold)
    return res


if __name__ == "__main__":  # pragma: no cover
    import argparse
    import subprocess

    from benchmarks.__main__ import table

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=COLD_REPS, help="rounds (medians over them)")
    ap.add_argument("--against", type=Path, default=None, metavar="DIR",
                    help="another checkout: its no-worker ask beside this one's, in turn")  # fmt: skip
    ap.add_argument("--json", default=None, metavar="PATH", help="also write the figures here")
    a = ap.parse_args()
    if a.against is not None:  # its bytecode too, as this checkout's (compile_checkout)
        subprocess.run(
            [sys.executable, "-m", "compileall", "-q", "bot", "core", "adapters", "migrations"],
            cwd=a.against,
            stdout=subprocess.DEVNULL,
            check=False,
        )
    result = asyncio.run(_main(a.reps, a.against.resolve() if a.against else None))
    cold = result.details["cold_ask"]
    (l0, l1) = cold["load"]
    print(f"cold ask, {a.reps} rounds; load {l0[0]:.1f} before, {l1[0]:.1f} after; "
          f"{result.details['header']}")  # fmt: skip
    print(table([r.as_dict() for r in result.rows]))
    if a.json:
        Path(a.json).write_text(result.to_json("coldask") + "\n", "utf-8")
