"""The user's path: the figures of measurements 1 and 2 taken on fresh processes.

The warm measurements run every shape once before timing, in one process:
whatever a process does the first time it meets a kind of output or task
(an import, a codec starting) is never on their clock.  A user meets it on
every ``python -m bot ask`` and on the first requests of every ``run``
process.  Here each request is the first of a process of its own:

* ``ask`` – ``python -m bot ask TEXT --json --file photo.png`` (remote mode,
  no ``serve`` worker), one process per request;
* ``run slack`` / ``run discord`` – a freshly started ``python -m bot run``
  process (Slack in HTTP mode, Discord over the gateway, each against its
  loopback fake, here in this process), sent its first request (a mention
  with photo.png / ``/ask``, without a file: the bot takes files only from
  Discord's CDN hosts) the moment it is connected, then the same request
  again (the process now warm: what the platform itself costs), then stopped.

Two conditions, per plan shape (those of :data:`benchmarks.harness.SHAPES`,
scripted into the fake LLM):

1. models 0.2 s, LLM 0 s, ``MODEL_SELECTION=downloads``: model makespan (the
   model fake's first call start to its last call end, its own clock) ÷
   critical path;
2. models 0.2 s, LLM 0.5 s per call, ``MODEL_SELECTION=llm``: the request's
   time ÷ (planning call + critical path + answer call).  For ``ask`` the
   request's time is the agent's own (``timings.total`` of the JSON reply:
   what the warm figure measures); for ``run`` it is what the person waits:
   the event or interaction sent → the answer posted.

And the cold ``ask`` itself (benchmarks.cold_ask): without a worker, and
with the worker started on first use.  Processes run with compiled
bytecode, as an installed bot has it (``benchmarks.__main__`` compiles the
checkout).

The bot's processes run without quotas, as the warm measurements do (every
request here is one person's, in a store each mode's processes share).
A ``run`` sample counts only what its own process does: Slack events are
sent once the bot's log says it listens on the port it was given (any
process may take a free port first: the bot is then started on another),
Discord interactions on the gateway session that identified with the
sample's token, once the bot's log says that session is connected (it has
read READY).  A request the bot answers with ❌ ends the sample at once
(``Refused``); every failure names its step, the fake's last calls and the
tail of that process's log (``--workdir`` keeps the logs and stores), and
says when the bot's sources changed during the run (a shared checkout).

Each figure is the median of ``reps`` requests (3; ``--quick`` 1).  The hop
gaps – for every model call after the first wave, its start minus the last
end before it – show where a process still does something on the critical
path the first time (the largest is in each row's note).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import sys
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp

from benchmarks.cold_ask import COLD_ASK_TARGET, cold_ask, cold_rows
from benchmarks.harness import (
    ANSWER,
    MODEL_LATENCY,
    ROOT,
    SHAPES,
    Fakes,
    FakeURLs,
    Result,
    Shape,
    bench_env,
    median,
    settings_env_names,
    verdict,
)
from tests.fakes.samples import sample_png

LLM_LATENCY = 0.5
PHOTO = "photo.png"
MODES = ("ask", "run slack", "run discord")
MAKESPAN_TARGET = 1.05
AGENT_TARGET = 1.10
# The quotas' settings (0: off), as harness.bench_settings turns them off.
QUOTAS = (
    "REQUESTS_PER_USER_PER_MINUTE",
    "REQUESTS_PER_USER_PER_DAY",
    "LLM_TOKENS_PER_USER_PER_DAY",
    "REQUESTS_PER_SERVER_PER_MINUTE",
    "REQUESTS_PER_SERVER_PER_DAY",
    "LLM_TOKENS_PER_SERVER_PER_DAY",
)
# A call starting within this long of the first one belongs to the first wave.
FIRST_WAVE = 0.005


def say(msg: str) -> None:
    print(f"  [{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


# What every fresh process imports: a file changed while the run goes on (the
# checkout is shared; someone is editing it) is met by the processes started
# after the change, and a half-made edit fails their requests.
SOURCES = ("bot", "core", "adapters")


def source_stamps(root: Path = ROOT) -> dict[str, tuple[int, int]]:
    """Each of the bot's source files: (modification time, size)."""
    stamps: dict[str, tuple[int, int]] = {}
    for top in SOURCES:
        for path in (root / top).rglob("*.py"):
            with contextlib.suppress(OSError):
                st = path.stat()
                stamps[str(path.relative_to(root))] = (st.st_mtime_ns, st.st_size)
    return stamps


def changed_sources(before: dict[str, tuple[int, int]], root: Path = ROOT) -> list[str]:
    """The source files added, removed or changed since ``before``."""
    now = source_stamps(root)
    return sorted(k for k in before.keys() | now.keys() if before.get(k) != now.get(k))


# ------------------------------------------------------------ the figures


def span(calls: list[dict[str, Any]]) -> float | None:
    """First call start → last call end, on the model fake's clock."""
    if not calls:
        return None
    return float(max(c["t_end"] for c in calls) - min(c["t_start"] for c in calls))


def hop_gaps(calls: list[dict[str, Any]]) -> list[float]:
    """For each call after the first wave: its start minus the last end before
    it (what the bot spent between a result and the call it let start)."""
    if not calls:
        return []
    first = min(c["t_start"] for c in calls)
    gaps = []
    for c in sorted(calls, key=lambda c: c["t_start"]):
        if c["t_start"] - first <= FIRST_WAVE:
            continue
        ends = [d["t_end"] for d in calls if d["t_end"] <= c["t_start"]]
        if ends:
            gaps.append(c["t_start"] - max(ends))
    return gaps


@dataclass
class Sample:
    """One first request: its model calls and the time it took (None: failed)."""

    calls: list[dict[str, Any]] = field(default_factory=list)
    took: float | None = None  # the request's time (see the module doc)
    took2: float | None = None  # run: the same request again in the same process (warm)
    wall: float | None = None  # the whole process, start to exit (ask only)
    error: str | None = None
    log: Path | None = None  # run: the bot process's stderr (its own file)

    def makespan_ratio(self, shape: Shape) -> float | None:
        s = span(self.calls)
        return None if s is None else s / shape.critical_path()

    def max_gap(self) -> float:
        return max(hop_gaps(self.calls), default=0.0)


@dataclass
class Env:
    """What every process of the run shares."""

    urls: FakeURLs
    tmp: Path
    base: dict[str, str]
    reps: int
    processes: int = 0  # run processes started so far (each logs to its own file)
    sources: dict[str, tuple[int, int]] = field(default_factory=source_stamps)

    def log_file(self, mode: str) -> Path:
        """A fresh stderr file for the next ``run`` process of ``mode``."""
        self.processes += 1
        return self.tmp / f"{mode.replace(' ', '-')}-{self.processes:03d}.log"

    def bot_env(self, name: str, selection: str, **extra: str) -> dict[str, str]:
        """``python -m bot``'s environment: the fakes, remote mode, the store
        (one per mode, created by its first process), no CLI worker."""
        env = bench_env(self.tmp, self.urls, self.base)
        env.update(
            DATABASE_URL=f"sqlite+aiosqlite:///{self.tmp / f'{name}.db'}",
            MEDIA_DIR=str(self.tmp / f"{name}-media"),
            DATA_DIR=str(self.tmp / f"{name}-data"),
            CLI_SOCKET=str(self.tmp / "no-worker.sock"),  # nothing listens: runs here
            CLI_WORKER_START="never",  # every ask a fresh process (cold_ask measures both)
            INFERENCE_MODE="remote",
            MODEL_SELECTION=selection,
        )
        # Every request here is one person's (the fakes' U0USER, Discord's
        # user) in one workspace or server, and the quotas are kept in the
        # store, which each mode's processes share: left on, the 21st
        # request within a minute was refused with its ❌ ("You have used
        # your 20 requests this minute"), which a run whose samples came
        # quickly (a quiet machine) met.  The warm measurements turn them
        # off too (harness.bench_settings); the terminal is exempt anyway.
        env.update(dict.fromkeys(QUOTAS, "0"))
        env.update(extra)
        return env


# ------------------------------------------------------------------- ask


async def ask_once(env: Env, fakes: Fakes, shape: Shape, selection: str, tag: str) -> Sample:
    """One ``python -m bot ask … --json --file photo.png`` process."""
    since = await fakes.hf_count()
    cmd = [sys.executable, "-m", "bot", "ask", shape.text, "--json", "--file", PHOTO]
    cmd += ["--conversation", tag]
    t0 = time.perf_counter()
    proc = await asyncio.create_subprocess_exec(
        *cmd,
        env=env.bot_env("ask", selection),
        cwd=env.tmp,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        out, err = await asyncio.wait_for(proc.communicate(), 120)
    except TimeoutError:
        proc.kill()
        await proc.wait()
        return Sample(error="ask did not finish within 120 s")
    wall = time.perf_counter() - t0
    lines = [ln for ln in out.decode().splitlines() if ln.startswith("{")]
    try:
        reply = json.loads(lines[-1])
    except (IndexError, json.JSONDecodeError):
        return Sample(error=f"exit {proc.returncode}: {err.decode()[-300:]}")
    bad = [t for t in reply.get("tasks", []) if t.get("status") != "done"]
    if reply.get("status") != "answered" or reply.get("error") or bad:
        why = reply.get("message") or (bad and bad[0].get("error")) or reply.get("answer", "")
        return Sample(error=f"{reply.get('status')}: {str(why)[:200]}")
    total = (reply.get("timings") or {}).get("total")
    return Sample(
        took=float(total) if total is not None else None,
        wall=wall,
        calls=await fakes.hf_calls(since),
    )


# ------------------------------------------------------------- run slack


async def _stop(proc: asyncio.subprocess.Process) -> None:
    if proc.returncode is None:
        proc.send_signal(signal.SIGTERM)
        try:
            await asyncio.wait_for(proc.wait(), 30)
        except TimeoutError:
            proc.kill()
            await proc.wait()


async def _start(
    env: dict[str, str], cwd: Path, target: str, log: Path
) -> asyncio.subprocess.Process:
    with log.open("ab") as err:
        return await asyncio.create_subprocess_exec(
            sys.executable, "-m", "bot", "run", target,
            env=env, cwd=cwd, stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.DEVNULL, stderr=err,
        )  # fmt: skip


async def _while_running(proc: asyncio.subprocess.Process, waiting: Awaitable[Any]) -> Any:
    """``waiting``, unless the process exits first (then RuntimeError)."""
    job = asyncio.ensure_future(waiting)
    exited = asyncio.ensure_future(proc.wait())
    await asyncio.wait({job, exited}, return_when=asyncio.FIRST_COMPLETED)
    if job.done():
        exited.cancel()
        return job.result()
    job.cancel()
    raise RuntimeError(f"the bot exited with {proc.returncode}")


class Refused(Exception):
    """The bot answered a request with a failure (its ❌ message) instead of the answer."""


FAILED = "❌"  # adapters.chat.render.ERROR_ICON: how a failed request's message starts


def _slack_text(call: Any) -> str:
    return str(call.args.get("text") or "")


async def _said(proc: asyncio.subprocess.Process, log: Path, line: str, within: float) -> bool:
    """Whether the bot wrote ``line`` to its log (True) or exited first (False)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within
    while loop.time() < deadline:
        with contextlib.suppress(OSError):
            if line in log.read_text("utf-8", "replace"):
                return True
        if proc.returncode is not None:
            return False
        await asyncio.sleep(0.05)  # the log is a file another process writes
    raise AssertionError(f"the bot did not log {line!r} within {within:g} s")


async def _start_slack(
    env: Env, bot_env: Callable[[int], dict[str, str]]
) -> tuple[asyncio.subprocess.Process, int, Path]:
    """Start ``run slack`` on a free port and wait until it says it listens
    there.  A port is only free until someone binds it: any process on this
    machine may take it between :func:`free_port` and the bot's bind, and a
    harness that took "something accepts connections there" for "the bot
    listens" sent its events to that process (its 200 or 404 never became
    an answer).  The bot's own log line is the proof; a bot that could not
    bind (the port was taken) is started again on another."""
    from tests.fakes.loopback import free_port

    for _ in range(3):
        port = free_port()
        log = env.log_file("run slack")
        proc = await _start(bot_env(port), env.tmp, "slack", log)
        try:
            if await _said(proc, log, f":{port}/slack/events", within=90):
                return proc, port, log
        except BaseException:
            await _stop(proc)
            raise
        if "cannot listen on" not in log.read_text("utf-8", "replace"):
            raise RuntimeError(f"the bot exited with {proc.returncode} (log {log.name})")
    raise RuntimeError("three ports in a row were taken before the bot could listen")


async def slack_once(env: Env, fakes: Fakes, shape: Shape, selection: str, tag: str) -> Sample:
    """A fresh ``run slack`` process and its first mention (with photo.png),
    then a second one (warm), each in a thread of its own.  Only what the bot
    posts in those threads counts (another process on this machine may talk
    to this fake too)."""
    from tests.fakes.loopback import wait_listening
    from tests.fakes.slack_fake import (
        BOT_TOKEN,
        SIGNING_SECRET,
        Call,
        event_body,
        make_slack_fake,
        mention_event,
        signed_headers,
    )

    async with make_slack_fake() as slack:

        def bot_env(port: int) -> dict[str, str]:
            return env.bot_env(
                "slack",
                selection,
                SLACK_BOT_TOKEN=BOT_TOKEN,
                SLACK_SIGNING_SECRET=SIGNING_SECRET,
                SLACK_HTTP_PORT=str(port),
                SLACK_API_URL=slack.base_url,
            )

        photo = slack.add_file(PHOTO, sample_png(96, 96))
        threads: list[str] = []  # our mentions' ts: the threads the bot answers in

        def ours(c: Call) -> bool:
            """A post in one of our threads, or an edit of one."""
            posted = {str(d.result.get("ts")) for d in slack.calls_to("chat.postMessage")
                      if d.args.get("thread_ts") in threads}  # fmt: skip
            return c.args.get("thread_ts") in threads or (
                c.method == "chat.update" and str(c.args.get("ts")) in posted
            )

        def answers() -> list[Call]:
            return [
                c
                for c in slack.calls_to("chat.postMessage")
                if ANSWER[:20] in _slack_text(c) and ours(c)
            ]

        def failures() -> list[Call]:
            return [
                c
                for c in slack.calls
                if c.method in ("chat.postMessage", "chat.update")
                and _slack_text(c).startswith(FAILED)
                and ours(c)
            ]

        async def ask() -> float:
            """Post a mention in a new thread (its ``ts`` unique, as Slack's are); when."""
            ts = f"{time.time():.6f}"
            threads.append(ts)
            raw = json.dumps(event_body(mention_event(shape.text, ts=ts, files=[photo])))
            t0 = time.monotonic()
            url = f"http://127.0.0.1:{port}/slack/events"
            async with (
                aiohttp.ClientSession() as http,
                http.post(url, data=raw, headers=signed_headers(raw)) as resp,
            ):
                if resp.status != 200:
                    raise AssertionError(f"the event was answered {resp.status}")
            return t0

        async def answered(n: int) -> Call:
            """The ``n``-th answer; Refused at once if a request failed instead."""
            await _while_running(
                proc,
                slack.wait_until(lambda: len(answers()) >= n or bool(failures()), within=90),
            )
            if failed := failures():
                raise Refused(_slack_text(failed[0])[:200])
            return answers()[n - 1]

        step = "listening"
        proc: asyncio.subprocess.Process | None = None
        log: Path | None = None
        try:
            proc, port, log = await _start_slack(env, bot_env)
            await wait_listening(port, proc, within=10)
            step = "the first answer"
            since = await fakes.hf_count()
            t0 = await ask()
            first = await answered(1)
            sample = Sample(took=first.at - t0, calls=await fakes.hf_calls(since), log=log)
            step = "the second answer"
            # The same again in another thread of the now warm process: what
            # the platform itself costs (status, upload), to read the first against.
            t0 = await ask()
            sample.took2 = (await answered(2)).at - t0
            return sample
        except (TimeoutError, RuntimeError, AssertionError, Refused) as e:
            seen = "; ".join(f"{c.method} {_slack_text(c)[:60]!r}" for c in slack.calls[-4:])
            return Sample(
                error=f"run slack, {step}: {type(e).__name__}: {e}; last calls: {seen}"[:400],
                log=log,
            )
        finally:
            if proc is not None:
                await _stop(proc)


def _discord_text(call: Any) -> str:
    """What a call to the fake says: a message's content, or an interaction
    response's (``{"type": 4, "data": {"content": …}}``)."""
    body = call.json if isinstance(call.json, dict) else {}
    data = body.get("data") if isinstance(body.get("data"), dict) else {}
    return str(body.get("content") or data.get("content") or "")


async def discord_once(env: Env, fakes: Fakes, shape: Shape, selection: str, tag: str) -> Sample:
    """A fresh ``run discord`` process and its first ``/ask`` once it has
    connected (its log says so; no file: the bot takes files only from
    Discord's own CDN hosts, which the fake is not), then a second one (warm)
    in another channel.  Its token is its own, and
    the interactions go to the gateway session that identified with it (a
    bot of another process may find this fake too)."""
    from tests.fakes.discord_fake import APP_ID, GUILD_ID, DiscordCall, make_discord_fake
    from tests.fakes.discord_gateway import DISPATCH, GatewaySession

    async with make_discord_fake() as fake:
        bot_token = f"discord-bench-{os.getpid()}-{env.processes + 1}"
        bot_env = env.bot_env(
            "discord",
            selection,
            DISCORD_BOT_TOKEN=bot_token,
            DISCORD_API_BASE=fake.base_url,
            DISCORD_DEV_GUILD_IDS=str(GUILD_ID),
        )
        tokens: list[str] = []  # our interactions'

        def session() -> GatewaySession | None:
            """Our bot's ready session (it identified with our token)."""
            for s in fake.gateway.live():
                if str((s.identify or {}).get("token", "")).removeprefix("Bot ") == bot_token:
                    return s
            return None

        def failures() -> list[DiscordCall]:
            return [
                c
                for c in fake.calls
                if _discord_text(c).startswith(FAILED) and any(t in c.path for t in tokens)
            ]

        async def ask(channel: dict[str, Any] | None = None) -> tuple[str, float]:
            """Send ``/ask`` on our bot's session; its token, and when."""
            found = session()
            if found is None:
                raise AssertionError("our bot's gateway session is gone")
            payload = fake.interaction("ask", {"prompt": shape.text}, channel=channel)
            tokens.append(str(payload["token"]))
            t0 = time.monotonic()
            await found.send(DISPATCH, payload, "INTERACTION_CREATE")
            return tokens[-1], t0

        async def answered(token: str) -> DiscordCall:
            """The interaction's first follow-up (the answer); Refused at once
            if a request failed instead."""
            path = rf"^/webhooks/{APP_ID}/{token}$"
            await _while_running(
                proc,
                fake.wait_until(lambda: bool(fake.find("POST", path) or failures()), within=90),
            )
            if failed := failures():
                raise Refused(_discord_text(failed[0])[:200])
            return fake.find("POST", path)[0]

        log = env.log_file("run discord")
        proc = await _start(bot_env, env.tmp, "discord", log)
        step = "gateway ready"
        try:
            await _while_running(proc, fake.wait_until(lambda: session() is not None, within=90))
            # and the bot has read the session's READY, as a Slack process is
            # asked once it says it listens (the fake sends READY on IDENTIFY:
            # an interaction sent at once waited behind the bot's own start)
            if not await _said(proc, log, "has connected to Gateway", within=90):
                raise RuntimeError(f"the bot exited with {proc.returncode} (log {log.name})")
            step = "the first answer"
            since = await fakes.hf_count()
            token, t0 = await ask()
            first = await answered(token)
            sample = Sample(took=first.at - t0, calls=await fakes.hf_calls(since), log=log)
            step = "the second answer"
            # Again, warm, in another channel (another conversation: no history, no reuse).
            token, t0 = await ask(channel=fake.text_channel(fake.next_id()))
            sample.took2 = (await answered(token)).at - t0
            return sample
        except (TimeoutError, RuntimeError, AssertionError, Refused) as e:
            seen = "; ".join(
                f"{c.method} {c.path} {_discord_text(c)[:60]!r}" for c in fake.calls[-4:]
            )
            return Sample(
                error=f"run discord, {step}: {type(e).__name__}: {e}; last calls: {seen}"[:400],
                log=log,
            )
        finally:
            await _stop(proc)


RUNNERS: dict[str, Callable[[Env, Fakes, Shape, str, str], Awaitable[Sample]]] = {
    "ask": ask_once,
    "run slack": slack_once,
    "run discord": discord_once,
}


# ------------------------------------------------------------ the measurement


async def _sample(
    env: Env, fakes: Fakes, mode: str, shape: Shape, selection: str, tag: str
) -> Sample:
    sample = await RUNNERS[mode](env, fakes, shape, selection, tag)
    if sample.error:
        if changed := changed_sources(env.sources):
            # Not the bot as it was at the start: say so with the failure.
            sample.error = (
                f"the checkout changed during the run ({len(changed)} files: "
                f"{', '.join(changed[:3])}); {sample.error}"
            )
        say(f"user path: {mode} {tag} failed: {sample.error}")
        if sample.log is not None and sample.log.exists():
            tail = sample.log.read_text("utf-8", "replace").splitlines()[-15:]
            say(f"the last lines of its log ({sample.log}):\n      " + "\n      ".join(tail))
    return sample


async def measure_user_path(
    urls: FakeURLs,
    tmp: Path,
    *,
    quick: bool,
    modes: tuple[str, ...] = MODES,
    reps: int | None = None,
) -> Result:
    """Both conditions, every shape, each mode; rows for sections 1 and 2
    (``reps`` requests each: 3, ``quick`` 1)."""
    res = Result()
    reps = reps or (1 if quick else 3)
    base = {k: v for k, v in os.environ.items() if k not in settings_env_names()}
    env = Env(urls, tmp, base, reps)
    (tmp / PHOTO).write_bytes(sample_png(96, 96))
    details: dict[str, Any] = {"reps": reps, "load": os.getloadavg()}
    async with Fakes(urls) as fakes:
        # Each mode's store is created (migrated) by an untimed first process.
        await fakes.reset()
        await fakes.script(SHAPES[0])
        for mode in modes:
            first = await _sample(env, fakes, mode, SHAPES[0], "downloads", f"{mode}-setup")
            if first.error:
                say(f"user path: {mode}'s first process failed: {first.error}")
        if "ask" in modes:
            say("user path: cold ask, without a worker and with one started on first use")
            cold = await cold_ask(env, fakes)
            details["cold_ask"] = cold
            cold_rows(res, cold)
        for label, llm_delay, selection in (
            ("makespan", 0.0, "downloads"),
            ("agent", LLM_LATENCY, "llm"),
        ):
            for mode in modes:
                say(f"user path: {mode}, {label} (LLM {llm_delay:g} s, {selection} selection)")
                for shape in SHAPES:
                    await fakes.reset(llm_delay=llm_delay, model_delay=MODEL_LATENCY)
                    await fakes.script(shape)
                    samples = [
                        await _sample(
                            env, fakes, mode, shape, selection, f"up-{label}-{shape.name}-{r}"
                        )
                        for r in range(reps)
                    ]
                    _rows(res, details, mode, label, shape, samples)
    details["load_after"] = os.getloadavg()
    res.details["user_path"] = details
    return res


def _rows(
    res: Result,
    details: dict[str, Any],
    mode: str,
    label: str,
    shape: Shape,
    samples: list[Sample],
) -> None:
    ok = [s for s in samples if s.error is None]
    problems = [s.error for s in samples if s.error]
    spans = [r for s in ok if (r := s.makespan_ratio(shape)) is not None]
    gaps = [s.max_gap() for s in ok]
    cp = shape.critical_path()
    ideal = LLM_LATENCY + cp + LLM_LATENCY
    agent = [s.took / ideal for s in ok if s.took is not None]
    entry = details.setdefault(mode, {}).setdefault(label, {})
    entry[shape.name] = {
        "makespan_ratios": spans,
        "max_hop_gaps": gaps,
        "took": [s.took for s in ok],
        "walls": [s.wall for s in ok if s.wall is not None],
        "agent_ratios": agent if label == "agent" else [],
        "second_ratios": [s.took2 / ideal for s in ok if s.took2 is not None]
        if label == "agent"
        else [],
        "errors": problems,
    }
    failed = f"; {len(problems)} failed: {problems[0][:120]}" if problems else ""
    gap = f"largest hop gap {median(gaps) * 1000:.0f} ms" if gaps else "no hop"
    if label == "makespan":
        if not spans:
            res.add(1, f"makespan ÷ crit. path, {mode}", shape.name, "error",
                    f"≤ {MAKESPAN_TARGET}", "FAIL", note="; ".join(problems)[:300])  # fmt: skip
            return
        ratio = median(spans)
        walls = [s.wall for s in ok if s.wall is not None]
        res.add(
            1,
            f"makespan ÷ crit. path, {mode}",
            shape.name,
            f"{ratio:.3f}",
            f"≤ {MAKESPAN_TARGET}",
            verdict(ratio <= MAKESPAN_TARGET and not problems),
            value=ratio,
            unit="ratio",
            note=f"first request of a fresh process, LLM 0 s, downloads selection; "
            f"{gap}; median of {len(spans)}"
            + (f"; process wall {median(walls):.2f} s" if walls else "")
            + failed,
        )
        return
    if not agent:
        res.add(2, f"agent ÷ (plan+cp+answer), {mode}", shape.name, "error",
                f"≤ {AGENT_TARGET}", "FAIL", note="; ".join(problems)[:300])  # fmt: skip
        return
    ratio = median(agent)
    what = "agent timings.total" if mode == "ask" else "sent → answer posted"
    res.add(
        2,
        f"agent ÷ (plan+cp+answer), {mode}",
        shape.name,
        f"{ratio:.3f}",
        f"≤ {AGENT_TARGET}",
        verdict(ratio <= AGENT_TARGET and not problems),
        value=ratio,
        unit="ratio",
        note=f"{what} {median([s.took for s in ok if s.took]):.2f} s vs {ideal:.2f} s"
        + (
            f" (the same again in that process, warm: {median(second):.2f} s, "
            f"{median(second) / ideal:.3f})"
            if (second := [s.took2 for s in ok if s.took2 is not None])
            else ""
        )
        + "; LLM "
        f"{LLM_LATENCY:g} s, LLM selection; makespan ÷ cp "
        + (f"{median(spans):.3f}" if spans else "-")
        + f"; {gap}"
        + failed,
    )


# ------------------------------------------------------- side by side


def side_by_side(results: dict[str, dict[str, Any]]) -> str:
    """The user's path beside the warm figures: one line per mode and measure."""
    warm_ms = results.get("makespan", {}).get("details", {}).get("makespan", {})
    warm_lat = results.get("latency", {}).get("details", {}).get("selection_latency", {})
    user = results.get("userpath", {}).get("details", {}).get("user_path", {})
    names = [s.name for s in SHAPES]
    lines: list[tuple[str, ...]] = [("measure", "where", *names, "target")]

    def cell(xs: list[float] | None) -> str:
        return f"{median(xs):.2f}" if xs else "-"

    lines.append(
        ("makespan ÷ cp", "warm (in process)",
         *(cell((warm_ms.get(n) or {}).get("ratios")) for n in names), f"≤ {MAKESPAN_TARGET}")
    )  # fmt: skip
    for mode in MODES:
        got = (user.get(mode) or {}).get("makespan") or {}
        if got:
            lines.append(
                ("", f"{mode} (1st request)",
                 *(cell((got.get(n) or {}).get("makespan_ratios")) for n in names), "")
            )  # fmt: skip
    lines.append(
        ("agent ÷ ideal", "warm (in process)",
         *(cell([w / v["ideal"] for w in v["walls"]] if (v := warm_lat.get(n)) else None)
           for n in names), f"≤ {AGENT_TARGET}")
    )  # fmt: skip
    for mode in MODES:
        got = (user.get(mode) or {}).get("agent") or {}
        if got:
            lines.append(
                ("", f"{mode} (1st request)",
                 *(cell((got.get(n) or {}).get("agent_ratios")) for n in names), "")
            )  # fmt: skip
            if any((got.get(n) or {}).get("second_ratios") for n in names):
                lines.append(
                    ("", f"{mode} (2nd, warm)",
                     *(cell((got.get(n) or {}).get("second_ratios")) for n in names), "")
                )  # fmt: skip
    for mode in MODES:
        got = (user.get(mode) or {}).get("makespan") or {}
        if got:
            lines.append(
                ("largest hop gap ms", f"{mode}, LLM 0 s",
                 *(f"{median(g) * 1000:.0f}" if (g := (got.get(n) or {}).get("max_hop_gaps"))
                   else "-" for n in names), "")
            )  # fmt: skip
    cold = user.get("cold_ask") or {}
    for key, where in (
        ("no_worker", "ask, no worker"),
        ("first", "ask, 1st (starts worker)"),
        ("later", "ask, later (worker)"),
    ):
        if cold.get(key):
            lines.append(
                ("cold ask s", where, f"{median(cold[key]):.2f}", *([""] * (len(names) - 1)),
                 f"≤ {COLD_ASK_TARGET}")
            )  # fmt: skip
    widths = [max(len(row[i]) for row in lines) for i in range(len(lines[0]))]
    out = [
        "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in lines
    ]
    out.insert(1, "  ".join("-" * w for w in widths))
    load = user.get("load")
    head = "user's path vs warm (medians"
    if user.get("reps"):
        head += f" of {user['reps']}"
    if load:
        head += f"; load {load[0]:.1f} at the start of the user's path"
    return "\n".join([head + ")", *out])


async def _main() -> None:  # pragma: no cover - a manual entry point
    import argparse
    import tempfile

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--fakes", required=True)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--modes", default=",".join(MODES))
    ap.add_argument("--reps", type=int, default=None, help="requests per shape (3, quick 1)")
    ap.add_argument(
        "--workdir",
        default=None,
        help="keep the stores and every run process's log here (default: a temporary directory)",
    )
    a = ap.parse_args()
    with contextlib.ExitStack() as stack:
        if a.workdir:
            tmp = Path(a.workdir).resolve()
            tmp.mkdir(parents=True, exist_ok=True)
        else:
            tmp = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="hgbench-user-")))
        res = await measure_user_path(
            FakeURLs.from_json(a.fakes),
            tmp,
            quick=a.quick,
            modes=tuple(m for m in a.modes.split(",") if m),
            reps=a.reps,
        )
    print(res.to_json("userpath"))


if __name__ == "__main__":  # pragma: no cover
    sys.path.insert(0, str(ROOT))
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(_main())
