"""A crash costs no lease (SQLite and PostgreSQL): a job held by a process
that has provably ended — on this host, in this PID namespace, its pid gone,
a zombie, or reused by another process — is taken over at once, not when
its lease runs out.  Real processes: a child takes a job and is killed with
SIGKILL; this process's queue runs on a clock that stands still, so the
dead job's lease never runs out: the job can only be claimed by the proof.
A holder nothing can be proved of (another host, another PID namespace, an
owner in the older form, a live process) keeps its lease."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import datetime, timedelta
from pathlib import Path

import pytest

from core import lease_holder
from core.errors import RunFailed
from core.jobs import JobQueue
from core.lease_holder import gone, holder, owner_name
from core.store import Database, MediaStore, Repo
from core.store.jobs import DONE, RUNNING, JobStore
from core.types import ConversationKey, Job, Notice, QueuePosition, new_request_id
from tests.fakes.clock import FakeClock

ROOT = Path(__file__).resolve().parents[2]
KIND = "held"
KEY = ConversationKey("cli", "local", "crash", None)

# The child: accepts a job, runs it (printing its id and owner), hangs there.
CHILD = """
import asyncio, sys
from pathlib import Path
from core.jobs import JobQueue
from core.store import Database, MediaStore, Repo
from core.store.jobs import JobStore
from core.types import ConversationKey, new_request_id

class Hang:
    async def run(self, job):
        print("running", job.id, job.owner, flush=True)
        await asyncio.Event().wait()
    async def notify(self, job, notice): pass
    async def give_up(self, job, failure): pass

async def main(url, media):
    queue = JobQueue(JobStore(Repo(Database(url), MediaStore(Path(media)))), poll=0.05)
    queue.register("held", Hang())
    key = ConversationKey("cli", "local", "crash", None)
    accepted = await queue.accept("held", key, {}, request_id=new_request_id())
    await queue.process(accepted.job.id)

asyncio.run(main(sys.argv[1], sys.argv[2]))
"""


class Recorder:
    def __init__(self) -> None:
        self.ran: list[tuple[int, bool]] = []  # (job id, resumed)
        self.notices: list[tuple[int, Notice]] = []
        self.changed = asyncio.Condition()

    async def run(self, job: Job) -> None:
        self.ran.append((job.id, job.resumed))

    async def notify(self, job: Job, notice: Notice) -> None:
        async with self.changed:
            self.notices.append((job.id, notice))
            self.changed.notify_all()

    async def told(self, job: int, notice: Notice, within: float = 20.0) -> None:
        async with self.changed:
            await asyncio.wait_for(
                self.changed.wait_for(lambda: (job, notice) in self.notices), within
            )

    async def give_up(self, job: Job, failure: RunFailed) -> None:
        raise AssertionError(str(failure))


class Child:
    """``python -c CHILD`` holding one running job."""

    def __init__(self, proc: asyncio.subprocess.Process, job: int, owner: str) -> None:
        self.proc = proc
        self.job = job
        self.owner = owner

    def kill(self) -> None:
        self.proc.send_signal(signal.SIGKILL)


@asynccontextmanager
async def child_holding_a_job(url: str, tmp_path: Path) -> AsyncIterator[Child]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-c", CHILD, url, str(tmp_path / "media"),
        env=env, cwd=ROOT, stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    try:
        assert proc.stdout is not None
        line = await asyncio.wait_for(proc.stdout.readline(), 60)
        if not line:
            assert proc.stderr is not None
            raise AssertionError((await proc.stderr.read()).decode())
        _, job, owner = line.decode().split()
        yield Child(proc, int(job), owner)
    finally:
        if proc.returncode is None:
            proc.kill()
        await proc.wait()


@asynccontextmanager
async def store_at(url: str, tmp_path: Path) -> AsyncIterator[JobStore]:
    db = Database(url)
    try:
        await db.upgrade()
        yield JobStore(Repo(db, MediaStore(tmp_path / "media")))
    finally:
        await db.aclose()


def still_clock(at: datetime) -> FakeClock:
    """Wall time that does not move (a lease never runs out on it); the
    queue's intervals are real."""
    return FakeClock(at.timestamp(), real_monotonic=True)


async def held_row(store: JobStore, job: int) -> tuple[str | None, datetime]:
    row = (await store.get([job]))[job]
    assert row.state == RUNNING and row.lease_expires is not None
    return row.lease_owner, row.lease_expires


async def until_done(store: JobStore, job: int, within: float = 20.0) -> None:
    """Wait for ``job`` to be done (``within``: a bound for a failing test)."""
    async with asyncio.timeout(within):
        while True:
            if (await store.get([job]))[job].state == DONE:
                return
            await asyncio.sleep(0.02)


# --- with real processes -----------------------------------------------------------


async def test_a_restarted_process_takes_a_killed_ones_job_at_once(
    shared_db_url: str, tmp_path: Path
) -> None:
    async with store_at(shared_db_url, tmp_path) as store:
        async with child_holding_a_job(shared_db_url, tmp_path) as child:
            owner, expires = await held_row(store, child.job)
            assert owner == child.owner and holder(owner) is not None
            assert not gone(owner)  # alive: nothing proved
            child.kill()
            await child.proc.wait()
        assert gone(owner)
        clock = still_clock(expires - timedelta(seconds=30))  # half way through its lease
        queue = JobQueue(store, poll=0.05, clock=clock)
        runner = Recorder()
        queue.register(KIND, runner)  # its first round finds the job
        try:
            await until_done(store, child.job)
        finally:
            await queue.aclose()
    assert runner.ran == [(child.job, True)]  # resumed
    assert clock.utc() < expires  # its lease had not run out


async def test_a_request_waiting_behind_a_killed_process_goes_on_at_once(
    shared_db_url: str, tmp_path: Path
) -> None:
    async with (
        store_at(shared_db_url, tmp_path) as store,
        child_holding_a_job(shared_db_url, tmp_path) as child,
    ):
        _, expires = await held_row(store, child.job)
        clock = still_clock(expires - timedelta(seconds=30))
        queue = JobQueue(store, poll=0.05, clock=clock)
        runner = Recorder()
        queue.register(KIND, runner)
        try:
            mine = await queue.accept(KIND, KEY, {}, request_id=new_request_id())
            outcome = asyncio.create_task(queue.process(mine.job.id))
            await runner.told(mine.job.id, QueuePosition(0, conversation_busy=True))
            assert runner.ran == [] and not outcome.done()  # behind the live child
            child.kill()  # a zombie until it is reaped, then no such pid: gone either way
            assert await asyncio.wait_for(outcome, 20) == "done"
        finally:
            await queue.aclose()
    assert runner.ran == [(child.job, True), (mine.job.id, False)]  # in order
    assert clock.utc() < expires


# --- what proves a process gone, and what does not -----------------------------------


def test_a_live_process_and_this_one_are_not_gone() -> None:
    assert not gone(owner_name())
    with subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"]) as p:
        try:
            assert not gone(swap(owner_name(), pid=p.pid, start=start_of(p.pid)))
        finally:
            p.kill()
            p.wait()


def test_a_zombie_an_ended_process_and_a_reused_pid_are_gone() -> None:
    p = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    owner = swap(owner_name(), pid=p.pid, start=start_of(p.pid))
    p.kill()
    try:
        while state_of(p.pid) != "Z":  # ended, not yet waited for
            time.sleep(0.001)
        assert gone(owner)
    finally:
        p.wait()
    assert gone(owner)  # reaped: no such pid
    h = holder(owner_name())
    assert h is not None
    assert gone(swap(owner_name(), start=h.start + 1))  # our pid, another process's start


@pytest.mark.parametrize(
    "owner",
    [
        "vm:1234:abcd1234",  # the older form: nothing to check
        "dead-0",
        "",
        "host:0:abcd1234/0123456789ab.1.2",
    ],
)
def test_an_owner_that_proves_nothing_is_not_gone(owner: str) -> None:
    assert not gone(owner)


def test_another_boot_or_pid_namespace_proves_nothing() -> None:
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()  # an ended pid (reused only by chance, which the start time would tell)
    ours = swap(owner_name(), pid=p.pid)
    h = holder(ours)
    assert h is not None and gone(ours)
    assert not gone(swap(ours, boot="f" * 12 if h.boot != "f" * 12 else "e" * 12))
    assert not gone(swap(ours, pidns=h.pidns + 1))


def test_an_owner_fits_the_column() -> None:
    assert len(owner_name()) <= 128
    assert lease_holder.OWNER_CHARS == 128


# --- helpers -------------------------------------------------------------------------


def stat_fields(pid: int) -> list[str]:
    raw = Path(f"/proc/{pid}/stat").read_text()
    return raw[raw.rfind(")") + 1 :].split()


def start_of(pid: int) -> int:
    return int(stat_fields(pid)[19])


def state_of(pid: int) -> str:
    return stat_fields(pid)[0]


def swap(
    owner: str,
    *,
    pid: int | None = None,
    boot: str | None = None,
    pidns: int | None = None,
    start: int | None = None,
) -> str:
    """``owner`` naming another process (or kernel, or namespace)."""
    h = holder(owner)
    assert h is not None, "this test needs Linux's /proc"
    name = owner.split("/")[0]
    host, _, rand = name.split(":")
    return (
        f"{host}:{pid if pid is not None else h.pid}:{rand}"
        f"/{boot or h.boot}.{pidns if pidns is not None else h.pidns}"
        f".{start if start is not None else h.start}"
    )
