"""Soak the agent with real user requests (TaskBench, Hugging Face domain).

The LLM fake answers each planning call with a plan drawn at random from
clean, chained, malformed and hostile shapes; the HF fake fails some models
and delays others.  The run checks that every request ends in a reply (none
raises, none hangs), that every turn is stored, and prints throughput and
latency figures.

    python benchmarks/agent_soak.py [--requests 300] [--concurrency 16] [--seed 7]
                                    [--database-url postgresql+asyncpg://postgres@127.0.0.1:5432/test]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from core.types import ConversationKey, Request  # noqa: E402
from tests.fakes.agent_fixture import REMOTE_TASKS, model_a, open_agent_env  # noqa: E402
from tests.fakes.hf_fake import make_hf_fake  # noqa: E402
from tests.fakes.openai_fake import make_llm_fake  # noqa: E402

REQUESTS = ROOT.parent / "shared" / "data" / "taskbench_hf_requests.jsonl"
TEXT_TASKS = ["summarization", "translation", "text-classification", "token-classification"]


def load_requests(n: int, rng: random.Random) -> list[str]:
    if REQUESTS.is_file():
        lines = REQUESTS.read_text(encoding="utf-8").splitlines()
        texts = [json.loads(x)["user_request"] for x in rng.sample(lines, min(n, len(lines)))]
    else:
        texts = []
    while len(texts) < n:
        texts.append(f"please summarize request number {len(texts)}")
    return texts


def random_plan(rng: random.Random) -> str:
    shape = rng.random()
    if shape < 0.15:
        return "[]"
    if shape < 0.25:
        return "I am not sure what you mean."  # malformed → re-ask
    if shape < 0.30:
        return '[{"task": "brew-coffee", "id": 0, "dep": [-1], "args": {"text": "x"}}]'
    if shape < 0.33:
        return "[" * 5000  # hostile nesting
    if shape < 0.36:
        return '[{"task": "image-classification", "id": 0, "dep": [-1], "args": {"image": "/etc/passwd"}}]'
    if shape < 0.65:
        task = rng.choice(TEXT_TASKS)
        return json.dumps([{"task": task, "id": 0, "dep": [-1], "args": {"text": "some text"}}])
    # a graph: text-to-image → classification, plus an independent text task
    return json.dumps(
        [
            {"task": "text-to-image", "id": 0, "dep": [-1], "args": {"text": "a fox"}},
            {
                "task": "image-classification",
                "id": 1,
                "dep": [0],
                "args": {"image": "<resource>-0"},
            },
            {"task": rng.choice(TEXT_TASKS), "id": 2, "dep": [-1], "args": {"text": "hello"}},
        ]
    )


async def main(n: int, concurrency: int, seed: int, database_url: str | None) -> int:
    rng = random.Random(seed)
    texts = load_requests(n, rng)
    run = uuid.uuid4().hex[:8]  # keeps this run's conversations apart in a shared database
    extra: dict[str, Any] = {"database_url": database_url} if database_url else {}
    with tempfile.TemporaryDirectory() as tmp:
        async with make_llm_fake() as llm, make_hf_fake() as hf:

            def plan_reply(_body: dict[str, Any]) -> str:
                return random_plan(rng)

            llm.reply("plan", *([plan_reply] * (n * 2)))
            async with open_agent_env(
                Path(tmp), llm, hf, max_concurrent_tasks=8, model_selection="downloads", **extra
            ) as env:
                for task in REMOTE_TASKS:
                    hf.serve(model_a(task), task, delay=rng.uniform(0.0, 0.02))
                hf.fail(model_a("translation"), 503, times=-1)  # always falls back to -b
                sem = asyncio.Semaphore(concurrency)
                latencies: list[float] = []
                outcomes = {"ok": 0, "error_reply": 0, "raised": 0}

                async def one(i: int, text: str) -> None:
                    key = ConversationKey("soak", run, f"c{i % 20}", None)
                    async with sem:
                        t = time.perf_counter()
                        try:
                            reply = await asyncio.wait_for(
                                env.agent.handle(Request(key, "u", text)), 60
                            )
                        except Exception as e:  # any escape is a defect
                            outcomes["raised"] += 1
                            print(f"request {i} raised {type(e).__name__}: {e}")
                            return
                        latencies.append(time.perf_counter() - t)
                        outcomes["error_reply" if reply.error else "ok"] += 1

                t0 = time.perf_counter()
                await asyncio.gather(*(one(i, t) for i, t in enumerate(texts)))
                wall = time.perf_counter() - t0
                stored = 0
                for c in range(20):
                    h = await env.agent.repo.load_history(
                        ConversationKey("soak", run, f"c{c}", None), turns=10_000
                    )
                    stored += len(h.turns)
    latencies.sort()
    p = lambda q: latencies[min(len(latencies) - 1, int(q * len(latencies)))]  # noqa: E731
    store = (database_url or "sqlite").split(":", 1)[0]
    print(f"requests           {n} (concurrency {concurrency}, seed {seed}, store {store})")
    print(f"answered           {outcomes['ok']} ok, {outcomes['error_reply']} with an error reply")
    print(f"raised / hung      {outcomes['raised']}")
    print(f"turns stored       {stored} of {2 * n} messages")
    print(f"throughput         {n / wall:.1f} requests/s")
    print(
        f"latency            p50 {p(0.5) * 1000:.0f} ms, p95 {p(0.95) * 1000:.0f} ms, "
        f"max {latencies[-1] * 1000:.0f} ms, mean {statistics.mean(latencies) * 1000:.0f} ms"
    )
    ok = outcomes["raised"] == 0 and stored == 2 * n
    print("result             " + ("PASS" if ok else "FAIL"))
    return 0 if ok else 1


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--requests", type=int, default=300)
    ap.add_argument("--concurrency", type=int, default=16)
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--database-url", default=None, help="default: SQLite in a temp dir")
    a = ap.parse_args()
    sys.exit(asyncio.run(main(a.requests, a.concurrency, a.seed, a.database_url)))
