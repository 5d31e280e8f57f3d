"""One bot process of the concurrency measurement (``benchmarks.measure``
starts one per worker, all on the same PostgreSQL database).

    python -m benchmarks.concurrency_worker --fakes JSON --db URL --tmp DIR
                                            --requests N --tag T

Opens the bot the way ``python -m bot run`` does (``bot.app.open_agent``),
takes requests the way every adapter does (:class:`BenchAdapter`: accept as a
durable job, then process; the job runner runs it), runs one request to warm
up, prints ``ready`` and waits for ``go`` on stdin; then sends its N
single-task requests at once, each in a conversation of its own, and prints
one JSON line: ``{"t0", "t1", "walls", "errors", "cpu"}`` (``t0``/``t1`` on
``time.monotonic()``, the same clock in every process on Linux); it closes
the bot on the next line (or the end) of stdin.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from pathlib import Path
from typing import Any

from benchmarks.harness import (
    ROOT,
    SHAPE_BY_NAME,
    FakeURLs,
    Run,
    bench_settings,
    conversation,
    log_to_file,
    open_bot,
    raise_fd_limit,
    request,
)
from bot import event_loop
from core.types import AgentAPI, Reply, Request


class BenchAdapter:
    """What an adapter does with a request (``core.jobs``): record it as a
    durable job, ask the queue to process it (it waits for its turn under the
    process's admission limit, MAX_INFLIGHT_REQUESTS), and run it when the
    queue hands it to this runner."""

    KIND = "bench"

    def __init__(self, agent: AgentAPI) -> None:
        self.agent = agent
        self._requests: dict[int, Request] = {}
        self._replies: dict[int, Reply] = {}
        agent.register_runner(self.KIND, self)

    async def answer(self, req: Request) -> Reply | None:
        accepted = await self.agent.accept(
            self.KIND, req.conversation, {"text": req.text}, request_id=req.request_id
        )
        job_id = accepted.job.id
        self._requests[job_id] = req
        try:
            await self.agent.process(job_id)
        finally:
            self._requests.pop(job_id, None)
        return self._replies.pop(job_id, None)

    async def run(self, job: Any) -> None:
        req = self._requests.get(job.id)
        if req is not None:
            self._replies[job.id] = await self.agent.handle(req, job=job)

    async def notify(self, job: Any, notice: Any) -> None:
        return None

    async def give_up(self, job: Any, failure: Any) -> None:
        return None


async def timed_job(adapter: BenchAdapter, req: Request, within: float = 60.0) -> Run:
    """:func:`benchmarks.harness.timed` through the job path."""
    t0 = time.perf_counter()
    try:
        reply = await asyncio.wait_for(adapter.answer(req), within)
    except TimeoutError:
        return Run(None, time.perf_counter() - t0, f"no reply within {within:g} s")
    except Exception as e:  # an escape is a defect; count it, don't stop the run
        return Run(None, time.perf_counter() - t0, f"raised {type(e).__name__}: {e}")
    if reply is None:
        return Run(None, time.perf_counter() - t0, "the job was not answered here")
    return Run(reply, time.perf_counter() - t0)


def error_kinds(runs: list[Run]) -> dict[str, int]:
    kinds: dict[str, int] = {}
    for r in runs:
        if not r.ok:
            key = r.why()[:100]
            kinds[key] = kinds.get(key, 0) + 1
    return kinds


async def _main(args: argparse.Namespace) -> None:
    raise_fd_limit()
    urls = FakeURLs.from_json(args.fakes)
    shape = SHAPE_BY_NAME["single"]
    async with open_bot(bench_settings(Path(args.tmp), urls, args.db)) as agent:
        adapter = BenchAdapter(agent)
        warm = await timed_job(adapter, request(conversation(f"{args.tag}w", 0), "w", shape))
        print("ready" if warm.ok else f"warm-up failed: {warm.why()}", flush=True)
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(None, sys.stdin.readline)  # "go"
        reqs = [request(conversation(args.tag, i), f"u{i}", shape) for i in range(args.requests)]
        c0, t0 = time.process_time(), time.monotonic()
        runs = await asyncio.gather(*(timed_job(adapter, r, within=240) for r in reqs))
        t1, cpu = time.monotonic(), time.process_time() - c0
        out = {
            "t0": t0,
            "t1": t1,
            "walls": [r.wall for r in runs],
            "errors": error_kinds(runs),
            "cpu": cpu,
        }
        print(json.dumps(out), flush=True)
        # open until told (or stdin closes): the database's connections to
        # this process are alive when the parent reads the machine's CPU
        await loop.run_in_executor(None, sys.stdin.readline)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--fakes", required=True)
    ap.add_argument("--db", required=True)
    ap.add_argument("--tmp", required=True)
    ap.add_argument("--requests", type=int, required=True)
    ap.add_argument("--tag", required=True)
    args = ap.parse_args()
    log_to_file(Path(args.tmp) / "bot.log")
    event_loop.run(_main(args))  # the loop `python -m bot run` runs on
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    sys.exit(main())
