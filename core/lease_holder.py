"""Who holds a job's lease, and whether that process is provably gone.

A lease owner (``turn_jobs.lease_owner``) names its process:
``host:pid:random``, and on Linux ``/boot.pidns.start`` after it — the
kernel's boot id (12 hex digits), the inode of the process's PID namespace,
and the process's start time (clock ticks after boot, field 22 of
``/proc/<pid>/stat``).  Another process can then prove the holder dead
without waiting for its lease to run out (:func:`gone`), when it runs on the
same kernel (boot id) in the same PID namespace (so the pid means the same
process to both) and that pid now names no process, a zombie, or a process
that started at another time (the pid was reused).  Anything else — another
host or container, an owner in the older ``host:pid:random`` form, a process
this one may not look at — proves nothing, and the lease stands.
"""

from __future__ import annotations

import functools
import os
import re
import socket
import uuid
from dataclasses import dataclass
from pathlib import Path

PROC = Path("/proc")
OWNER_CHARS = 128  # turn_jobs.lease_owner is String(128)
HOST_CHARS = 48

_OWNER = re.compile(
    r"^[^:/]*:(?P<pid>[0-9]{1,10}):[0-9a-f]+"
    r"/(?P<boot>[0-9a-f]{12})\.(?P<pidns>[0-9]{1,20})\.(?P<start>[0-9]{1,20})$"
)


@dataclass(frozen=True, slots=True)
class Holder:
    """The process a lease owner names."""

    pid: int
    boot: str
    pidns: int
    start: int


def _boot_id(proc: Path) -> str | None:
    try:
        raw = (proc / "sys/kernel/random/boot_id").read_text(encoding="ascii")
    except (OSError, UnicodeDecodeError):
        return None
    boot = raw.strip().replace("-", "").lower()[:12]
    return boot if re.fullmatch(r"[0-9a-f]{12}", boot) else None


def _pidns(proc: Path) -> int | None:
    try:
        link = os.readlink(proc / "self/ns/pid")  # "pid:[4026531836]"
    except OSError:
        return None
    found = re.fullmatch(r"pid:\[([0-9]+)\]", link)
    return int(found.group(1)) if found else None


def _stat(proc: Path, pid: int) -> tuple[str, int] | None:
    """(state, start time) of process ``pid``, or None if it cannot be read."""
    try:
        raw = (proc / str(pid) / "stat").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None
    # "pid (comm) S ppid …": comm may hold spaces and parentheses; the rest
    # follows the last ')'.  Field 3 is the state, field 22 the start time.
    fields = raw[raw.rfind(")") + 1 :].split()
    if len(fields) < 20 or not fields[19].isdigit():
        return None
    return fields[0], int(fields[19])


@functools.cache
def _here(proc: Path = PROC) -> tuple[str, int] | None:
    """This process's (boot id, PID namespace), or None where /proc lacks them."""
    boot, pidns = _boot_id(proc), _pidns(proc)
    return (boot, pidns) if boot is not None and pidns is not None else None


def owner_name(*, proc: Path = PROC) -> str:
    """A new lease owner name for this process (unique per call)."""
    host = re.sub(r"[:/]", "-", socket.gethostname())[:HOST_CHARS]
    pid = os.getpid()
    name = f"{host}:{pid}:{uuid.uuid4().hex[:8]}"
    here, stat = _here(proc), _stat(proc, pid)
    if here is None or stat is None:
        return name
    proof = f"{name}/{here[0]}.{here[1]}.{stat[1]}"
    return proof if len(proof) <= OWNER_CHARS else name


def holder(owner: str) -> Holder | None:
    """The process ``owner`` names, if it says enough to be checked."""
    found = _OWNER.fullmatch(owner)
    if found is None:
        return None
    return Holder(int(found["pid"]), found["boot"], int(found["pidns"]), int(found["start"]))


def gone(owner: str, *, proc: Path = PROC) -> bool:
    """True only when the process ``owner`` names has provably ended (see the
    module's doc); False when it runs or nothing can be proved."""
    h = holder(owner)
    if h is None or h.pid <= 0 or _here(proc) != (h.boot, h.pidns):
        return False
    try:
        os.kill(h.pid, 0)
    except ProcessLookupError:
        return True  # no such process in our (its) namespace
    except PermissionError:
        pass  # a process of another user: its start time tells
    except (OSError, OverflowError):
        return False
    stat = _stat(proc, h.pid)
    if stat is None:  # hidden from us (hidepid), or it ended just now: not proved
        return False
    state, start = stat
    if start != h.start:
        return True  # the pid names another process now
    return state in ("Z", "X")  # ended, not yet reaped by its parent
