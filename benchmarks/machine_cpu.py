"""The machine's CPU over a stretch of a benchmark, by who spent it.

A burst of requests on a 2-core machine shares those cores with what it
talks to: the fakes' process (the LLM, the Hub and the providers), the
PostgreSQL server's backends.  Its wall can be no shorter than all of their
CPU over the cores, whatever the bot does; section 7 prints that split so
its ratio can be read against it.

Read from Linux's ``/proc`` (no library): each process's user + system time
(``/proc/PID/stat``, its threads included) and the machine's busy time
(``/proc/stat``).  Grouped as: the bot (the pids given), the fakes (a process
running ``benchmarks.fakes_server``), PostgreSQL (processes named
``postgres``) and the rest (every other process, the kernel's own work, and
processes that ended within the stretch).  Elsewhere than Linux, a snapshot
is empty and :func:`spent` says so.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

PROC = Path("/proc")
FAKES_MARK = b"benchmarks.fakes_server"


@dataclass(frozen=True, slots=True)
class Snapshot:
    busy: float | None  # the machine's busy seconds (all cores) since boot; None: no /proc
    cpu: dict[int, float] = field(default_factory=dict)  # pid → user + system seconds
    group: dict[int, str] = field(default_factory=dict)  # pid → "fakes" / "PostgreSQL"


def _tick() -> float:
    try:
        return float(os.sysconf("SC_CLK_TCK"))
    except (ValueError, OSError, AttributeError):
        return 100.0


def _busy(tick: float) -> float | None:
    try:
        first = (PROC / "stat").read_text().splitlines()[0].split()
    except OSError:
        return None
    values = [int(v) for v in first[1:]]
    # user nice system idle iowait irq softirq steal (guest time is within user)
    idle = values[3] + (values[4] if len(values) > 4 else 0)
    return (sum(values[:8]) - idle) / tick


def _process(pid: int, tick: float) -> tuple[float, str | None] | None:
    try:
        stat = (PROC / str(pid) / "stat").read_bytes()
        name = stat[stat.index(b"(") + 1 : stat.rindex(b")")]
        fields = stat[stat.rindex(b")") + 2 :].split()
        cpu = (int(fields[11]) + int(fields[12])) / tick  # utime, stime
        group = None
        if name == b"postgres":
            group = "PostgreSQL"
        elif (
            name.startswith(b"python") and FAKES_MARK in (PROC / str(pid) / "cmdline").read_bytes()
        ):
            group = "fakes"
        return cpu, group
    except (OSError, ValueError, IndexError):
        return None  # gone meanwhile, or not ours to read


def snapshot() -> Snapshot:
    """Every process's CPU so far, and the machine's busy time."""
    tick = _tick()
    busy = _busy(tick)
    if busy is None:
        return Snapshot(None)
    cpu: dict[int, float] = {}
    group: dict[int, str] = {}
    for entry in PROC.iterdir():
        if not entry.name.isdigit():
            continue
        pid = int(entry.name)
        got = _process(pid, tick)
        if got is None:
            continue
        cpu[pid] = got[0]
        if got[1] is not None:
            group[pid] = got[1]
    return Snapshot(busy, cpu, group)


@dataclass(frozen=True, slots=True)
class Spent:
    """CPU seconds between two snapshots, by who spent them."""

    bot: float
    fakes: float
    postgres: float
    rest: float
    wall: float
    cores: int

    @property
    def busy(self) -> float:
        return self.bot + self.fakes + self.postgres + self.rest

    def line(self) -> str:
        share = self.busy / (self.cores * self.wall) if self.wall > 0 else 0.0
        return (
            f"machine CPU in it {self.busy:.1f} s of {self.cores} cores × {self.wall:.1f} s "
            f"({share:.0%} busy): bot {self.bot:.1f}, fakes {self.fakes:.1f}, "
            f"PostgreSQL {self.postgres:.1f}, the rest {self.rest:.1f}"
        )


def spent(before: Snapshot, after: Snapshot, bot: set[int], wall: float) -> Spent | None:
    """What the stretch between ``before`` and ``after`` (``wall`` seconds)
    cost, ``bot`` being the bot's pids; None without ``/proc``."""
    if before.busy is None or after.busy is None:
        return None
    sums = {"bot": 0.0, "fakes": 0.0, "PostgreSQL": 0.0}
    for pid, cpu in after.cpu.items():
        delta = cpu - before.cpu.get(pid, 0.0)  # a process started within: all of it
        key = "bot" if pid in bot else after.group.get(pid)
        if key is not None and delta > 0:
            sums[key] += delta
    rest = max(0.0, (after.busy - before.busy) - sum(sums.values()))
    return Spent(sums["bot"], sums["fakes"], sums["PostgreSQL"], rest, wall, os.cpu_count() or 1)
