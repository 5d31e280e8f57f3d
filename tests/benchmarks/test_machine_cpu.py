"""benchmarks.machine_cpu: the machine's CPU over a stretch, by who spent it
(section 7 prints it beside its 500-at-once ratio)."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from benchmarks.machine_cpu import snapshot, spent

# Burns ``seconds`` of its own CPU, says so, and stays until its stdin closes
# (a process that ended before the second snapshot is the rest's, not its group's).
BURN = """
import sys, time
while time.process_time() < float(sys.argv[1]):
    pass
print("burnt", flush=True)
sys.stdin.read()
"""

pytestmark = pytest.mark.skipif(not Path("/proc/stat").exists(), reason="reads Linux's /proc")


def _burner(seconds: float, *extra: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c", BURN, str(seconds), *extra],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )


def test_cpu_is_filed_under_the_bot_and_the_fakes_by_pid_and_command_line() -> None:
    before = snapshot()
    t0 = time.perf_counter()
    bot = _burner(0.3)
    fakes = _burner(0.2, "benchmarks.fakes_server")  # how the fakes' process is told apart
    try:
        for p in (bot, fakes):
            assert p.stdout is not None and p.stdout.readline().strip() == "burnt"
        after = snapshot()
    finally:
        for p in (bot, fakes):
            assert p.stdin is not None
            p.stdin.close()
            p.wait(10)
    got = spent(before, after, {bot.pid}, time.perf_counter() - t0)
    assert got is not None
    assert got.bot >= 0.28  # its own 0.3 s (clock ticks: 10 ms)
    assert got.bot < 0.3 + 0.5  # not the fakes' too (the interpreter's start is in it)
    assert got.fakes >= 0.18
    assert got.fakes < 0.2 + 0.5
    assert after.busy is not None and before.busy is not None
    assert after.busy - before.busy >= got.bot + got.fakes - 0.05  # the machine saw it
    assert "bot 0." in got.line() and "fakes 0." in got.line()


def test_a_process_that_ended_within_the_stretch_is_the_rests() -> None:
    before = snapshot()
    t0 = time.perf_counter()
    gone = _burner(0.2)
    assert gone.stdout is not None and gone.stdout.readline().strip() == "burnt"
    assert gone.stdin is not None
    gone.stdin.close()
    gone.wait(10)
    got = spent(before, snapshot(), {gone.pid}, time.perf_counter() - t0)
    assert got is not None
    assert got.bot == 0.0
    assert got.rest >= 0.18
