"""Chaos: is every accepted Slack request answered once, and stored once,
while the bot's processes are killed under it?

    python -m benchmarks.chaos [--quick] [--json out.json] [--keep DIR]
                               [--conversations 200] [--turns 5] [--kill-every 20]

Two real ``python -m bot run slack`` processes (HTTP mode) share one
PostgreSQL database, created for the run on the shared server
(``CREATE DATABASE chaos_<pid>``; dropped at the end) and migrated by both
at start.  They talk to the loopback Slack fake (here, in this process) and
to the LLM and model fakes (``benchmarks.chaos_fakes``, a process of their
own: slow, 5 % of calls faulted: 5xx, hangs past the timeouts, garbage).

This process plays Slack: ``--conversations`` conversations (a channel each,
the turns in the first message's thread) send ``--turns`` mentions each, a
turn after the previous one's answer or after ``--turn-wait`` seconds.  An
event goes to one of the two processes (a load balancer); one that is not
acknowledged with a 200 within 3 s (the process is dead, or slow) is
redelivered, as Slack does, with ``X-Slack-Retry-Num``, up to 3 times (to
the other process when it is up).  Every ``--kill-every`` seconds one of the
processes (in turn) is SIGKILLed and started again at once.  When every
conversation is through, the killing stops and the run waits until no job is
left unfinished (bounded).  Everything is on 127.0.0.1; the whole run is
bounded by ``--max-seconds``.

Figures (per turn, by the marker ``chaos-c<i>-t<j>`` its text carries,
which the fakes' answers repeat; an answer without it counts for the
earliest turn of its conversation still without one):

* accepted – events acknowledged with a 200 (first delivery or a retry);
* answered once / twice or more / unanswered – answers (``chat.postMessage``
  of the answer text) in the turn's thread;
* stored – turns whose user message is in the database exactly once
  (``stored twice`` counts the others);
* error answers – answers that say the request failed (a faulted stage);
  still one answer each.

The goal: answered once == accepted == stored, nothing twice, nothing lost.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import random
import re
import shutil
import signal
import sys
import tempfile
import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import sqlalchemy as sa
from sqlalchemy.engine import make_url
from sqlalchemy.ext.asyncio import create_async_engine

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from tests.fakes.agent_fixture import write_test_catalog  # noqa: E402
from tests.fakes.slack_fake import (  # noqa: E402
    BOT_TOKEN,
    SIGNING_SECRET,
    Call,
    FakeSlack,
    event_body,
    make_slack_fake,
    mention_event,
    signed_headers,
)

PG_URL = "postgresql+asyncpg://postgres@127.0.0.1:5432/test"
MARKER = re.compile(r"chaos-c(\d+)-t(\d+)")
ACK_TIMEOUT = 3.0  # Slack's: an event not acknowledged in 3 s is redelivered
REDELIVERY_WAITS = (0.5, 2.0, 5.0)  # Slack waits ~0 s, 1 min, 5 min; compressed here
FAILED = "❌"  # how a status message ends when its request failed (nothing else is posted)


@dataclass
class TallySlack(FakeSlack):
    """The Slack fake, keeping the answer posts per channel as they arrive."""

    answers: dict[str, list[Call]] = field(default_factory=lambda: defaultdict(list))
    # Status messages whose last edit says the request failed (❌), per channel.
    failed: dict[str, set[str]] = field(default_factory=lambda: defaultdict(set))
    arrived: dict[str, asyncio.Event] = field(default_factory=dict)

    def event_for(self, channel: str) -> asyncio.Event:
        return self.arrived.setdefault(channel, asyncio.Event())

    def endings(self, channel: str) -> int:
        return len(self.answers.get(channel, ())) + len(self.failed.get(channel, ()))

    async def _record(self, call: Call) -> None:
        await super()._record(call)
        if not call.result.get("ok"):
            return
        channel = str(call.args.get("channel"))
        if call.method == "chat.postMessage" and "mrkdwn" in call.args:
            self.answers[channel].append(call)
            self.event_for(channel).set()
        elif call.method == "chat.update":
            ts = str(call.args.get("ts"))
            if str(call.args.get("text", "")).startswith(FAILED):
                self.failed[channel].add(ts)
                self.event_for(channel).set()
            else:
                self.failed[channel].discard(ts)


@dataclass
class Slot:
    """One bot process's place: its port and log; restarted after a kill."""

    index: int
    port: int
    env: dict[str, str]
    log: Path
    cwd: Path
    proc: asyncio.subprocess.Process | None = None
    ready: bool = False
    starts: int = 0

    async def start(self) -> None:
        self.ready = False
        self.starts += 1
        with self.log.open("ab") as err:
            err.write(f"\n=== start {self.starts} at {time.time():.1f} ===\n".encode())
            err.flush()
            self.proc = await asyncio.create_subprocess_exec(
                sys.executable, "-m", "bot", "run", "slack",
                env=self.env, cwd=self.cwd, stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.DEVNULL, stderr=err,
            )  # fmt: skip
        asyncio.get_running_loop().create_task(self._until_listening(self.proc))

    async def _until_listening(self, proc: asyncio.subprocess.Process) -> None:
        deadline = time.monotonic() + 60
        while proc.returncode is None and time.monotonic() < deadline and proc is self.proc:
            try:
                _, writer = await asyncio.open_connection("127.0.0.1", self.port)
            except OSError:
                await asyncio.sleep(0.1)  # the port is in another process: poll
                continue
            writer.close()
            with contextlib.suppress(OSError):
                await writer.wait_closed()
            self.ready = proc is self.proc
            return

    async def kill(self) -> None:
        self.ready = False
        if self.proc is not None and self.proc.returncode is None:
            self.proc.send_signal(signal.SIGKILL)
            await self.proc.wait()

    async def stop(self) -> None:
        self.ready = False
        if self.proc is None or self.proc.returncode is not None:
            return
        self.proc.send_signal(signal.SIGTERM)
        try:
            await asyncio.wait_for(self.proc.wait(), 30)
        except TimeoutError:
            self.proc.kill()
            await self.proc.wait()


@dataclass
class Turn:
    conversation: int
    index: int
    event_id: str
    accepted: bool = False
    deliveries: int = 0
    sent_at: float = 0.0

    @property
    def marker(self) -> str:
        return f"chaos-c{self.conversation:03d}-t{self.index}"


@dataclass
class Run:
    args: argparse.Namespace
    slack: TallySlack
    slots: list[Slot]
    http: aiohttp.ClientSession
    turns: dict[str, Turn] = field(default_factory=dict)  # by marker
    kills: int = 0
    rng: random.Random = field(default_factory=lambda: random.Random(7))
    sending_done: asyncio.Event = field(default_factory=asyncio.Event)

    # -- Slack's side ----------------------------------------------------

    async def deliver(self, body: dict[str, Any], turn: Turn) -> bool:
        """Post an event to a live process; redeliver as Slack does.  True once acknowledged."""
        raw = json.dumps(body)
        last: Slot | None = None
        for attempt in range(len(REDELIVERY_WAITS) + 1):
            ready = [s for s in self.slots if s.ready]
            choices = [s for s in ready if s is not last] or ready or self.slots
            slot = self.rng.choice(choices)
            last = slot
            headers = signed_headers(raw, retry_num=attempt or None)
            turn.deliveries += 1
            try:
                async with self.http.post(
                    f"http://127.0.0.1:{slot.port}/slack/events",
                    data=raw,
                    headers=headers,
                    timeout=aiohttp.ClientTimeout(total=ACK_TIMEOUT),
                ) as response:
                    await response.read()
                    if response.status == 200:
                        return True
            except (aiohttp.ClientError, TimeoutError):
                pass
            if attempt < len(REDELIVERY_WAITS):
                await asyncio.sleep(REDELIVERY_WAITS[attempt])
        return False

    def answered(self, channel: str, turn: Turn, accepted_so_far: int) -> bool:
        posts = self.slack.answers.get(channel, [])
        if any(turn.marker in str(c.args.get("text")) for c in posts):
            return True
        # an answer without the marker, or a failure shown in the status message
        return self.slack.endings(channel) >= accepted_so_far

    async def conversation(self, c: int) -> None:
        await asyncio.sleep(c * self.args.ramp / max(1, self.args.conversations))
        channel = f"C{c:04d}"
        root: str | None = None
        accepted = 0
        for t in range(self.args.turns):
            if time.monotonic() > self.args.send_until:
                return
            ts = f"{1_700_000_000 + c}.{t:06d}"
            text = f"chaos-c{c:03d}-t{t} please summarise my notes"
            event = mention_event(text, channel=channel, ts=ts, thread_ts=root)
            body = event_body(event, event_id=f"Ev{c:04d}{t:02d}")
            turn = Turn(c, t, body["event_id"], sent_at=time.monotonic())
            self.turns[turn.marker] = turn
            turn.accepted = await self.deliver(body, turn)
            root = root or ts
            if not turn.accepted:
                continue
            accepted += 1
            arrived = self.slack.event_for(channel)
            deadline = time.monotonic() + self.args.turn_wait
            while not self.answered(channel, turn, accepted):
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                arrived.clear()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(arrived.wait(), left)

    async def killer(self) -> None:
        k = 0
        while not self.sending_done.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.sending_done.wait(), self.args.kill_every)
            if self.sending_done.is_set():
                return
            slot = self.slots[k % len(self.slots)]
            k += 1
            await slot.kill()
            self.kills += 1
            await slot.start()


# -- the database ---------------------------------------------------------


async def admin(base: str, sql: str) -> None:
    engine = create_async_engine(base, isolation_level="AUTOCOMMIT")
    try:
        async with engine.connect() as conn:
            await conn.exec_driver_sql(sql)
    finally:
        await engine.dispose()


async def unfinished_jobs(url: str) -> int:
    engine = create_async_engine(url)
    try:
        async with engine.connect() as conn:
            return int(
                await conn.scalar(sa.text("SELECT count(*) FROM turn_jobs WHERE state <> 'done'"))
                or 0
            )
    except Exception:
        return -1  # not migrated yet
    finally:
        await engine.dispose()


async def database_figures(url: str) -> dict[str, Any]:
    engine = create_async_engine(url)
    try:
        async with engine.connect() as conn:
            users = (
                await conn.execute(sa.text("SELECT text FROM messages WHERE role = 'user'"))
            ).all()
            jobs = (
                await conn.execute(
                    sa.text("SELECT dedup_key, status_ref, state, attempts, error FROM turn_jobs")
                )
            ).all()
    finally:
        await engine.dispose()
    stored: Counter[str] = Counter()
    for (text,) in users:
        match = MARKER.search(text or "")
        if match:
            stored[match.group(0)] += 1
    status_ts: dict[str, str] = {}  # event id → its status message
    for j in jobs:
        ref = j.status_ref if isinstance(j.status_ref, dict) else json.loads(j.status_ref or "{}")
        if j.dedup_key and ref.get("ts"):
            status_ts[str(j.dedup_key).removeprefix("slack:")] = str(ref["ts"])
    return {
        "stored": stored,
        "status_ts": status_ts,
        "jobs": len(jobs),
        "jobs_by_state": dict(Counter(j.state for j in jobs)),
        "attempts": dict(sorted(Counter(int(j.attempts) for j in jobs).items())),
        "job_errors": dict(Counter(str(j.error) for j in jobs if j.error)),
    }


# -- the figures ----------------------------------------------------------


def tally(run: Run, db: dict[str, Any]) -> dict[str, Any]:
    """Endings per turn: answer posts (by marker, else the earliest turn of
    the conversation still without an ending) and failures shown in the
    turn's status message (found through its job's ``status_ref``)."""
    posts: Counter[str] = Counter()
    failed: set[str] = set()
    extra = 0
    fallbacks = 0
    status_ts: dict[str, str] = db["status_ts"]
    for channel in set(run.slack.answers) | set(run.slack.failed):
        c = int(channel[1:])
        turns = sorted(
            (t for t in run.turns.values() if t.conversation == c), key=lambda t: t.index
        )
        failed_ts = run.slack.failed.get(channel, set())
        failed.update(t.marker for t in turns if status_ts.get(t.event_id) in failed_ts)
        anonymous = []
        for post in run.slack.answers.get(channel, []):
            text = str(post.args.get("text"))
            match = MARKER.search(text)
            if "Answer to chaos-" not in text:
                fallbacks += 1
            if match and match.group(0) in run.turns:
                posts[match.group(0)] += 1
            else:
                anonymous.append(post)
        for _ in anonymous:
            empty = [t for t in turns if posts[t.marker] == 0 and t.marker not in failed]
            if empty:
                posts[empty[0].marker] += 1
            else:
                extra += 1
    accepted = [t for t in run.turns.values() if t.accepted]
    refused = [t for t in run.turns.values() if not t.accepted]

    def endings(t: Turn) -> int:
        return posts[t.marker] or int(t.marker in failed)

    stored: Counter[str] = db["stored"]
    texts = run.slack.texts()
    # Each generated file has a handle of its own in its conversation: one
    # uploaded twice into a channel was posted twice.
    files = Counter((u.channel, u.filename) for u in run.slack.uploaded())
    return {
        "conversations": run.args.conversations,
        "turns_per_conversation": run.args.turns,
        "sent": len(run.turns),
        "accepted": len(accepted),
        "not_accepted": len(refused),
        "redelivered": sum(1 for t in run.turns.values() if t.deliveries > 1),
        "answered_once": sum(1 for t in accepted if endings(t) == 1),
        "answered_twice_or_more": sum(1 for t in accepted if endings(t) >= 2) + extra,
        "unanswered": sum(1 for t in accepted if endings(t) == 0),
        "answered_not_accepted": sum(1 for t in refused if endings(t) > 0),
        "failed_in_status": sum(1 for t in accepted if t.marker in failed and not posts[t.marker]),
        "fallback_answers": fallbacks,
        "files_uploaded": sum(files.values()),
        "files_uploaded_twice": sum(1 for n in files.values() if n > 1),
        "stored": sum(1 for t in accepted if stored[t.marker] == 1),
        "stored_twice_or_more": sum(1 for t in run.turns.values() if stored[t.marker] >= 2),
        "not_stored": sum(1 for t in accepted if stored[t.marker] == 0),
        "restarting_notices": sum(1 for t in texts if "restarting" in t.lower()),
        "gave_up_notices": sum(1 for t in texts if "could not finish this" in t),
        "cant_take_notices": sum(1 for t in texts if "can't take requests" in t),
        "kills": run.kills,
        "jobs": db["jobs"],
        "jobs_by_state": db["jobs_by_state"],
        "job_attempts": db["attempts"],
        "job_errors": db["job_errors"],
        "double": sorted(t.marker for t in accepted if endings(t) >= 2),
        "missing": sorted(t.marker for t in accepted if endings(t) == 0),
        "trouble": _trouble(run, [t for t in accepted if endings(t) != 1], status_ts),
    }


def _trouble(run: Run, turns: list[Turn], status_ts: dict[str, str]) -> dict[str, Any]:
    """What the channels of the turns answered other than once received (to debug)."""
    out: dict[str, Any] = {}
    for channel in sorted({f"C{t.conversation:04d}" for t in turns}):
        c = int(channel[1:])
        mine = [t for t in run.turns.values() if t.conversation == c]
        out[channel] = {
            "events": {t.event_id: status_ts.get(t.event_id) for t in mine},
            "answers": [
                (round(p.at, 3), str(p.args.get("text"))[:80]) for p in run.slack.answers[channel]
            ],
            "failed_status": sorted(run.slack.failed.get(channel, ())),
            "uploads": sum(1 for u in run.slack.uploaded() if u.channel == channel),
        }
    return out


def print_table(figures: dict[str, Any]) -> None:
    rows = [
        ("turns sent", figures["sent"]),
        ("accepted (acked 200)", figures["accepted"]),
        ("  redelivered at least once", figures["redelivered"]),
        ("not accepted", figures["not_accepted"]),
        ("answered once", figures["answered_once"]),
        ("answered twice or more", figures["answered_twice_or_more"]),
        ("unanswered", figures["unanswered"]),
        ("  of them: failure in the status message", figures["failed_in_status"]),
        ("  of them: fallback answer (LLM failed)", figures["fallback_answers"]),
        ("files uploaded", figures["files_uploaded"]),
        ("files uploaded twice", figures["files_uploaded_twice"]),
        ("stored once", figures["stored"]),
        ("stored twice or more", figures["stored_twice_or_more"]),
        ("not stored", figures["not_stored"]),
        ("processes SIGKILLed", figures["kills"]),
        ("'restarting' notices", figures["restarting_notices"]),
        ("gave-up notices", figures["gave_up_notices"]),
        ("seconds", figures["seconds"]),
    ]
    print(
        f"\nchaos: {figures['conversations']} conversations × "
        f"{figures['turns_per_conversation']} turns, kill every {figures['kill_every']} s, "
        f"{figures['fault_rate']:.0%} faults"
    )
    width = max(len(r[0]) for r in rows)
    for name, value in rows:
        print(f"  {name:<{width}}  {value}")
    print(f"  job attempts: {figures['job_attempts']}  faults injected: {figures['faults']}")
    if figures["double"] or figures["missing"]:
        print(f"  twice: {figures['double'][:20]}  missing: {figures['missing'][:20]}")
    ok = figures["goal_met"]
    print(f"  goal (answered once == stored == accepted, none twice): {'PASS' if ok else 'FAIL'}")


# -- the run --------------------------------------------------------------


def bot_env(
    args: argparse.Namespace, work: Path, fakes: dict[str, str], url: str
) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("OPENAI_", "HF_", "DISCORD", "SLACK", "DATABASE_"))
    }
    env.update(
        PYTHONPATH=str(ROOT),
        DATABASE_URL=url,
        MEDIA_DIR=str(work / "media"),
        MODEL_CATALOG=str(write_test_catalog(work / "catalog.jsonl")),
        MODEL_SELECTION="downloads",
        OPENAI_API_KEY="sk-chaos",
        OPENAI_BASE_URL=fakes["llm"],
        LLM_MODEL="fake-model",
        LLM_TIMEOUT=str(args.llm_timeout),
        HF_INFERENCE_URL=fakes["hf"],
        HF_TOKEN="hf_chaos",
        TASK_TIMEOUT=str(args.task_timeout),
        MEDIA_TASK_TIMEOUT=str(args.task_timeout),
        JOB_LEASE_SECONDS=str(args.lease),
        JOB_POLL_SECONDS="1",
        SHUTDOWN_GRACE="5",
        LOG_LEVEL="INFO",
        SLACK_BOT_TOKEN=BOT_TOKEN,
        SLACK_SIGNING_SECRET=SIGNING_SECRET,
        REQUESTS_PER_USER_PER_MINUTE="0",
        REQUESTS_PER_USER_PER_DAY="0",
        LLM_TOKENS_PER_USER_PER_DAY="0",
        REQUESTS_PER_SERVER_PER_MINUTE="0",
        REQUESTS_PER_SERVER_PER_DAY="0",
        LLM_TOKENS_PER_SERVER_PER_DAY="0",
    )
    if args.inflight:
        env["MAX_INFLIGHT_REQUESTS"] = str(args.inflight)
    return env


async def start_fakes(
    args: argparse.Namespace,
) -> tuple[asyncio.subprocess.Process, dict[str, str]]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "benchmarks.chaos_fakes",
        "--fault-rate", str(args.fault_rate), "--llm-delay", str(args.llm_delay),
        "--model-delay", str(args.model_delay), "--max-seconds", str(args.max_seconds + 300),
        cwd=ROOT, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
    )  # fmt: skip
    assert proc.stdout is not None
    line = await asyncio.wait_for(proc.stdout.readline(), 60)
    return proc, json.loads(line)


async def progress(run: Run, started: float) -> None:
    while True:
        await asyncio.sleep(15)
        accepted = sum(1 for t in run.turns.values() if t.accepted)
        answers = sum(
            run.slack.endings(ch) for ch in set(run.slack.answers) | set(run.slack.failed)
        )
        print(
            f"  [{time.monotonic() - started:5.0f} s] sent {len(run.turns)}, accepted {accepted}, "
            f"answers {answers}, kills {run.kills}",
            flush=True,
        )


async def settle(run: Run, url: str, within: float) -> None:
    """Until no job is unfinished and every accepted turn has an answer (bounded)."""
    deadline = time.monotonic() + within
    quiet = 0
    while time.monotonic() < deadline:
        left = await unfinished_jobs(url)
        answers = sum(
            run.slack.endings(ch) for ch in set(run.slack.answers) | set(run.slack.failed)
        )
        accepted = sum(1 for t in run.turns.values() if t.accepted)
        quiet = quiet + 1 if left == 0 and answers >= accepted else 0
        if quiet >= 3:  # a few rounds with nothing left: nothing more will be posted
            return
        await asyncio.sleep(2)


async def chaos(args: argparse.Namespace) -> dict[str, Any]:
    started = time.monotonic()
    args.send_until = started + args.max_seconds
    work = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="chaos-"))
    work.mkdir(parents=True, exist_ok=True)
    name = f"chaos_{os.getpid()}"
    base = make_url(args.pg)
    url = base.set(database=name).render_as_string(hide_password=False)
    await admin(args.pg, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    await admin(args.pg, f'CREATE DATABASE "{name}"')
    fakes_proc, fakes = await start_fakes(args)
    slots: list[Slot] = []
    try:
        async with (
            make_slack_fake(TallySlack()) as slack,
            aiohttp.ClientSession() as http,
        ):
            assert isinstance(slack, TallySlack)
            env = bot_env(args, work, fakes, url) | {"SLACK_API_URL": slack.base_url}
            for i in range(2):
                port = _free_port()
                slot_env = env | {"SLACK_HTTP_PORT": str(port)}
                slots.append(Slot(i, port, slot_env, work / f"bot{i}.log", work))
            for slot in slots:
                await slot.start()  # both at once: they migrate the new database together
            await _until(lambda: all(s.ready for s in slots), 90)
            run = Run(args, slack, slots, http)
            reporter = asyncio.create_task(progress(run, started))
            killer = asyncio.create_task(run.killer())
            try:
                await asyncio.gather(*(run.conversation(c) for c in range(args.conversations)))
            finally:
                run.sending_done.set()
                await killer
            for slot in slots:  # a process killed last may still be starting
                if slot.proc is None or slot.proc.returncode is not None:
                    await slot.start()
            await settle(run, url, args.lease + args.settle)
            reporter.cancel()
            for slot in slots:
                await slot.stop()
            db = await database_figures(url)
            figures = tally(run, db)
            async with http.get(fakes["stats"]) as response:
                figures["faults"] = await response.json()
    finally:
        for slot in slots:
            with contextlib.suppress(ProcessLookupError):
                await slot.stop()
        if fakes_proc.stdin is not None:
            fakes_proc.stdin.close()
        try:
            await asyncio.wait_for(fakes_proc.wait(), 10)
        except TimeoutError:
            fakes_proc.kill()
        await admin(args.pg, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    logs = "".join(s.log.read_text(errors="replace") for s in slots if s.log.exists())
    figures.update(
        seconds=round(time.monotonic() - started, 1),
        kill_every=args.kill_every,
        fault_rate=args.fault_rate,
        lease=args.lease,
        inflight=args.inflight or "default",
        tracebacks=logs.count("Traceback"),
        logs=str(work) if args.keep else None,
    )
    figures["goal_met"] = (
        figures["answered_once"] == figures["accepted"] == figures["stored"]
        and figures["answered_twice_or_more"] == 0
        and figures["files_uploaded_twice"] == 0
        and figures["stored_twice_or_more"] == 0
    )
    if not args.keep:
        shutil.rmtree(work, ignore_errors=True)
    return figures


async def _until(predicate: Any, within: float) -> None:
    deadline = time.monotonic() + within
    while not predicate():
        if time.monotonic() > deadline:
            raise RuntimeError("the bot processes did not start listening")
        await asyncio.sleep(0.2)


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "--quick", action="store_true", help="20 conversations × 3 turns, kill every 10 s"
    )
    ap.add_argument("--conversations", type=int)
    ap.add_argument("--turns", type=int)
    ap.add_argument("--kill-every", type=float)
    ap.add_argument("--turn-wait", type=float, default=120.0, help="longest wait for an answer")
    ap.add_argument("--ramp", type=float, help="seconds over which the conversations start")
    ap.add_argument("--fault-rate", type=float, default=0.05)
    ap.add_argument("--llm-delay", type=float, default=0.5)
    ap.add_argument("--model-delay", type=float, default=1.0)
    ap.add_argument("--llm-timeout", type=float, default=10.0, help="the bot's LLM_TIMEOUT")
    ap.add_argument("--task-timeout", type=float, default=8.0, help="the bot's TASK_TIMEOUT")
    ap.add_argument("--lease", type=float, default=15.0, help="the bot's JOB_LEASE_SECONDS")
    ap.add_argument(
        "--inflight", type=int, help="the bot's MAX_INFLIGHT_REQUESTS (default: its own)"
    )
    ap.add_argument("--settle", type=float, default=120.0, help="longest wait after the last turn")
    ap.add_argument("--max-seconds", type=float, help="stop sending new turns after this long")
    ap.add_argument("--pg", default=os.environ.get("TEST_DATABASE_URL") or PG_URL)
    ap.add_argument("--json", help="write the figures here")
    ap.add_argument("--keep", help="keep the bots' logs (and media) in this directory")
    args = ap.parse_args(argv)
    quick = {"conversations": 20, "turns": 3, "kill_every": 10.0, "ramp": 5.0, "max_seconds": 300.0}
    full = {
        "conversations": 200,
        "turns": 5,
        "kill_every": 20.0,
        "ramp": 30.0,
        "max_seconds": 1500.0,
    }
    for key, value in (quick if args.quick else full).items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    figures = asyncio.run(chaos(args))
    print_table(figures)
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=2, default=str) + "\n")
    return 0 if figures["goal_met"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
