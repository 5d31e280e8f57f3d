"""Another request's work beside long provider polls, in one process.

``python -m benchmarks.provider_polls [--reps N] [--jobs J] [--polls P] [--hub-delay S]``

The real ``RemoteExpert`` (huggingface_hub's AsyncInferenceClient) against
the loopback emulation of the 2026 service (``tests/fakes/hf_service.py``).
``J`` fal-ai image-to-image jobs (the queue protocol: the client polls every
0.5 s with ``time.sleep``, in a thread of the loop's default executor) stay
in progress for ``P`` status polls (``P`` × 0.5 s).  Once every job has
polled, another request runs, its parts at once, each timed from that
moment:

* ``upload``: ``Turn.put_uploads`` of a 640×480 PNG (decode, media store);
* ``output``: ``check_output_async`` of a text-to-speech WAV (decoded);
* ``first call``: a summarization on a model not yet looked up (hf-inference:
  the Hub look-ups, the client's session, the call), a fresh expert per
  sample, the client's caches cleared;
* ``fal t2i``: a fal-ai text-to-image call (the client downloads its output
  in a thread of the default executor).

Variants, alternated sample by sample:

* ``alone``: the same request with no job running;
* ``shared``: the bot before core.threads: its own work on the loop's default
  executor, of Python's size (``min(32, cores + 4)``);
* ``own pools``: the bot as it is (``core.threads.work``, and the default
  executor ``bot.app.open_agent`` sets, ``WAITING_THREADS``).

Printed: medians in ms per part and variant, and the jobs' own wall time.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from core import threads  # noqa: E402
from core.catalog import ModelInfo  # noqa: E402
from core.experts.providers import configure  # noqa: E402
from core.experts.remote import RemoteExpert  # noqa: E402
from core.outputs import check_output_async  # noqa: E402
from core.results import Blob, TaskInputs, TaskResult  # noqa: E402
from core.store.media import MediaStore  # noqa: E402
from core.tasks import TaskTimeouts  # noqa: E402
from core.turn import Turn  # noqa: E402
from core.types import Attachment, ConversationKey, Request  # noqa: E402
from tests.fakes.hf_service import (  # noqa: E402
    FakeHFService,
    clear_client_caches,
    make_hf_service,
)
from tests.fakes.samples import sample_png, sample_wav  # noqa: E402

TOKEN = "hf_test_token"
EDITOR = ModelInfo("org/editor", "image-to-image", providers=("fal-ai",))
PAINTER = ModelInfo("org/painter", "text-to-image", providers=("fal-ai",))
VARIANTS = ("alone", "shared", "own pools")
PARTS = ("upload", "output", "first call", "fal t2i")
OLD_DEFAULT = min(32, (os.cpu_count() or 1) + 4)


def polled(svc: FakeHFService) -> int:
    return len({c.path for c in svc.calls if c.kind == "poll" and c.path.endswith("/status")})


async def timed(start: float, part: Awaitable[Any]) -> float:
    await part
    return (time.perf_counter() - start) * 1000


async def sample(
    svc: FakeHFService, variant: str, n: int, jobs: int, polls: int, tmp: Path
) -> tuple[dict[str, float], float]:
    loop = asyncio.get_running_loop()
    if variant == "shared":  # one pool of Python's default size for everything
        pool = ThreadPoolExecutor(max_workers=OLD_DEFAULT)
        threads.WORK_THREADS = pool
    else:
        pool = ThreadPoolExecutor(max_workers=threads.WAITING_THREADS, thread_name_prefix="waiting")
        threads.WORK_THREADS = OWN_WORK
    loop.set_default_executor(pool)
    for old in POOLS:  # the previous sample's, idle by now
        old.shutdown(wait=False)
    POOLS[:] = [pool]
    clear_client_caches()
    summer = ModelInfo(f"org/summer-{n}", "summarization", providers=("hf-inference",))
    svc.add_model(
        summer.id, "summarization", mappings={"hf-inference": (summer.id, "summarization")}
    )
    expert = RemoteExpert(token=TOKEN, timeouts=TaskTimeouts(120, 120, 120))
    svc.calls.clear()
    svc.pending_polls = polls
    edit = TaskInputs(text="make it blue", image=Blob("image", "image/png", sample_png(64, 64)))
    began = time.perf_counter()
    running = [] if variant == "alone" else [
        asyncio.create_task(expert.run("image-to-image", EDITOR, edit)) for _ in range(jobs)
    ]  # fmt: skip
    while running:  # the fake records the polls on its own loop: look again
        if polled(svc) >= min(jobs, OLD_DEFAULT):  # as many as can poll at once
            break
        await asyncio.sleep(0.005)
    turn = Turn(
        Request(
            ConversationKey("cli", "local", f"c{n}"),
            "u1",
            "what is this?",
            attachments=(Attachment("photo.png", "image/png", sample_png(640, 480)),),
        )
    )
    speech = TaskResult(media=(Blob("audio", "audio/wav", sample_wav(2.0)),))
    parts: dict[str, Callable[[], Awaitable[Any]]] = {
        "upload": lambda: turn.put_uploads(MediaStore(tmp), max_bytes=10**8, max_pixels=10**8),
        "output": lambda: check_output_async("text-to-speech", "org/speaker", speech),
        "first call": lambda: expert.run("summarization", summer, TaskInputs(text="a long text")),
        "fal t2i": lambda: expert.run("text-to-image", PAINTER, TaskInputs(text="a fox")),
    }
    start = time.perf_counter()
    took = await asyncio.gather(*(timed(start, make()) for make in parts.values()))
    await asyncio.gather(*running)
    jobs_wall = (time.perf_counter() - began) * 1000 if running else 0.0
    await expert.aclose()
    return dict(zip(parts, took, strict=True)), jobs_wall


OWN_WORK = threads.WORK_THREADS
POOLS: list[ThreadPoolExecutor] = []


async def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--jobs", type=int, default=6)
    ap.add_argument("--polls", type=int, default=8, help="status polls in progress (× 0.5 s)")
    ap.add_argument("--hub-delay", type=float, default=0.1)
    args = ap.parse_args()
    figures: dict[str, dict[str, list[float]]] = {v: {p: [] for p in PARTS} for v in VARIANTS}
    walls: dict[str, list[float]] = {v: [] for v in VARIANTS}
    async with make_hf_service(facts=True) as svc:
        svc.hub_delay = args.hub_delay
        for mid, task in ((EDITOR.id, "image-to-image"), (PAINTER.id, "text-to-image")):
            svc.add_model(mid, task, mappings={"fal-ai": (f"fal-ai/{mid[4:]}", task)})
        with svc.configure_client(), tempfile.TemporaryDirectory() as tmp:
            configure(router_url=svc.router_url, hub_url=svc.hub_url)
            n = 1
            await sample(svc, "own pools", n, args.jobs, 1, Path(tmp))  # warm-up, not counted
            for rep in range(args.reps):
                order = VARIANTS if rep % 2 == 0 else tuple(reversed(VARIANTS))
                for variant in order:
                    n += 1
                    took, wall = await sample(svc, variant, n, args.jobs, args.polls, Path(tmp))
                    for part, ms in took.items():
                        figures[variant][part].append(ms)
                    walls[variant].append(wall)
    print(
        f"{args.jobs} fal-ai image-to-image jobs, {args.polls} polls in progress each, "
        f"Hub {args.hub_delay * 1000:.0f} ms; default executor before: {OLD_DEFAULT} threads; "
        f"medians of {args.reps}, ms; load {os.getloadavg()[0]:.1f}"
    )
    print(f"| variant | {' | '.join(PARTS)} | jobs' wall |")
    print("|---|" + "---|" * (len(PARTS) + 1))
    for v in VARIANTS:
        cells = [f"{statistics.median(figures[v][p]):.0f}" for p in PARTS]
        shown = f"{statistics.median(walls[v]):.0f}" if v != "alone" else "—"
        print(f"| {v} | {' | '.join(cells)} | {shown} |")


if __name__ == "__main__":
    asyncio.run(main())
