"""The chaos benchmark's LLM and model fakes, in a process of their own.

    python -m benchmarks.chaos_fakes [--fault-rate 0.05] [--llm-delay 0.5]
                                     [--model-delay 1.0] [--hang 60] [--seed 1]

Starts the OpenAI fake (``tests/fakes/openai_fake.py``) and the Hugging Face
task-API fake (``tests/fakes/hf_fake.py``) on 127.0.0.1 and prints one JSON
line: ``{"llm": URL, "hf": URL, "stats": URL}``.  Exits when its stdin closes
(the parent went away), on SIGTERM/SIGINT, or after ``--max-seconds``.

Both are slow (``--llm-delay`` per chat call, ``--model-delay`` per model
call) and answer ``--fault-rate`` of their calls with a fault instead, picked
at random among: a 5xx error, no answer at all for ``--hang`` seconds (the
client's timeout ends it), and garbage with status 200 (an HTML page, JSON
cut off mid-way).  ``GET {stats}`` counts the calls and faults.

What the fakes answer is a function of the request, so a benchmark can tell
which request an answer belongs to: the user's text carries a marker
(``chaos-c<conversation>-t<turn>``); the planner plans a summary of the text
(and, on odd turns, a picture), the summarization models echo their input,
and the answer names the marker.  The answer stage's fallback (when its call
fails) lists the summary, so it carries the marker too.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import os
import random
import re
import signal
import stat
import sys
import threading
from collections import Counter
from pathlib import Path
from typing import Any

from aiohttp import web

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from tests.fakes.agent_fixture import REMOTE_TASKS, model_a, model_b  # noqa: E402
from tests.fakes.hf_fake import FakeHF, HFCall  # noqa: E402
from tests.fakes.loopback import serve  # noqa: E402
from tests.fakes.openai_fake import FakeLLM, _text  # noqa: E402

MARKER = re.compile(r"chaos-c\d+-t(\d+)")
HTML_PAGE = "<!DOCTYPE html><html><head><title>Gateway</title></head><body>Proxy</body></html>"
CUT_JSON = '{"id": "chatcmpl-1", "choices": [{"message": {"content": "trunc'


def marker_of(body: dict[str, Any]) -> str | None:
    """The marker of the request a chat call is about: the one in the last
    ``<request>`` block (earlier turns, in ``<chat_log>``, come before it)."""
    for message in reversed(body.get("messages") or []):
        text = _text(message.get("content"))
        start = text.rfind("<request>")
        if start >= 0:
            match = MARKER.search(text[start:])
            return match.group(0) if match else None
    return None


def chaos_plan(marker: str | None) -> str:
    if marker is None:
        return "[]"
    tasks: list[dict[str, Any]] = [
        {"task": "summarization", "id": 0, "dep": [-1], "args": {"text": f"{marker} notes"}}
    ]
    turn = int(MARKER.search(marker).group(1))  # type: ignore[union-attr]
    if turn % 2:
        tasks.append(
            {
                "task": "text-to-image",
                "id": 1,
                "dep": [-1],
                "args": {"text": f"a lighthouse {marker}"},
            }
        )
    return json.dumps(tasks)


class ChaosLLM(FakeLLM):
    """The OpenAI fake, answering every stage from the request's marker."""

    async def _content_for(self, stage: str, body: dict[str, Any]) -> str | None:
        marker = marker_of(body)
        if stage == "plan":
            return chaos_plan(marker)
        if stage == "answer":
            return f"Answer to {marker or 'an unmarked request'}: the summary is ready."
        return await super()._content_for(stage, body)


def summary(call: HFCall) -> Any:
    """A summarization model that echoes its input (so results carry the marker)."""
    inputs = call.json.get("inputs") if isinstance(call.json, dict) else None
    return [{"summary_text": f"summary of {inputs}"}]


class Faults:
    """Answers ``rate`` of the calls it sees with a fault, counting them."""

    def __init__(self, rate: float, hang: float, seed: int) -> None:
        self.rate = rate
        self.hang = hang
        self.rng = random.Random(seed)
        self.counts: Counter[str] = Counter()
        self.stopping = asyncio.Event()

    def middleware(self, name: str, paths: tuple[str, ...]) -> Any:
        @web.middleware
        async def inject(request: web.Request, handler: Any) -> web.StreamResponse:
            if request.method != "POST" or not request.path.startswith(paths):
                return await handler(request)
            self.counts[f"{name}_calls"] += 1
            if self.rng.random() >= self.rate:
                return await handler(request)
            await request.read()
            kind = self.rng.choice(("5xx", "timeout", "garbage"))
            self.counts[f"{name}_{kind}"] += 1
            if kind == "5xx":
                status = self.rng.choice((500, 502))
                return web.json_response(
                    {"error": f"injected fault (HTTP {status})"}, status=status
                )
            if kind == "timeout":
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self.stopping.wait(), self.hang)
                return web.json_response({"error": "injected hang"}, status=504)
            if self.rng.random() < 0.5 or name == "hf":
                return web.Response(text=HTML_PAGE, content_type="text/html")
            return web.Response(text=CUT_JSON, content_type="application/json")

        return inject


async def _stdin_closed() -> None:
    loop = asyncio.get_running_loop()
    closed = asyncio.Event()

    def read() -> None:
        sys.stdin.buffer.read()
        loop.call_soon_threadsafe(closed.set)

    threading.Thread(target=read, name="stdin-watch", daemon=True).start()
    await closed.wait()


async def main(args: argparse.Namespace) -> None:
    # A client killed mid-call leaves aiohttp a connection to reset: expected here.
    logging.getLogger("aiohttp").setLevel(logging.CRITICAL)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    faults = Faults(args.fault_rate, args.hang, args.seed)

    llm = ChaosLLM()
    llm.delay = args.llm_delay
    llm_app = web.Application(middlewares=[faults.middleware("llm", ("/v1/chat",))])
    llm_app.router.add_post("/v1/chat/completions", llm.handle_chat)
    llm_app.router.add_get("/v1/models", llm.handle_models)

    hf = FakeHF()
    for task in REMOTE_TASKS:
        response = summary if task == "summarization" else None
        hf.serve(model_a(task), task, response, delay=args.model_delay)
        hf.serve(model_b(task), task, response, delay=args.model_delay)
    hf_app = web.Application(
        client_max_size=64 * 1024 * 1024, middlewares=[faults.middleware("hf", ("/models/",))]
    )
    hf_app.router.add_post("/{tail:.+}", hf.handle_inference)

    async def stats(request: web.Request) -> web.Response:
        return web.json_response(dict(faults.counts))

    stats_app = web.Application()
    stats_app.router.add_get("/stats", stats)

    async with serve(llm_app) as llm_url, serve(hf_app) as hf_url, serve(stats_app) as stats_url:
        hf.base_url = hf_url
        print(
            json.dumps({"llm": f"{llm_url}/v1", "hf": hf_url, "stats": f"{stats_url}/stats"}),
            flush=True,
        )
        watchers: list[asyncio.Future[Any]] = [asyncio.ensure_future(stop.wait())]
        if stat.S_ISFIFO(os.fstat(sys.stdin.fileno()).st_mode):
            watchers.append(asyncio.ensure_future(_stdin_closed()))
        await asyncio.wait(watchers, timeout=args.max_seconds, return_when=asyncio.FIRST_COMPLETED)
        for w in watchers:
            w.cancel()
        faults.stopping.set()
        llm._stopping.set()
        hf.calls.clear()


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--fault-rate", type=float, default=0.05)
    ap.add_argument("--llm-delay", type=float, default=0.5, help="seconds per chat call")
    ap.add_argument("--model-delay", type=float, default=1.0, help="seconds per model call")
    ap.add_argument("--hang", type=float, default=60.0, help="seconds a 'timeout' fault hangs")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--max-seconds", type=float, default=3600.0, help="exit after this long")
    return ap.parse_args(argv)


if __name__ == "__main__":
    asyncio.run(main(parse()))
