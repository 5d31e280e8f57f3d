"""Peak memory of a ``run slack`` process under a burst of large uploads.

    python -m benchmarks.memory_admission [--requests 20] [--files 3] [--mb 20]
                                          [--inflight default] [--upload-mb default,0]
                                          [--json out.json]

The issue measured 20 concurrent requests, each with 3 × 20 MB files, taking
the process from 123 MB to 1.6 GB: nothing queued.  This sends the same burst
(20 mentions at once, in 20 channels, each sharing the same three ~20 MB PNG
photos of noise, ~6.7 megapixels each) to a real ``python -m bot run slack``
(HTTP mode, SQLite, the loopback Slack fake in this process, the LLM and
model fakes in a process of their own: ``benchmarks.fakes_server``), waits
until every request has its answer, and reads the process's resident memory
from ``/proc``: at rest before the burst (``VmRSS``) and its peak
(``VmHWM``).  Each request is planned as an image classification of its
first photo, so every one downloads, decodes, stores and sends on its files.

Admission: at most ``MAX_INFLIGHT_REQUESTS`` requests run at once, holding
at most ``MAX_INFLIGHT_UPLOAD_MB`` of uploads between them (the sizes Slack
declares for the files; 0: no byte budget, only the count).  Run once per
pair of ``--inflight`` and ``--upload-mb`` values; ``default`` leaves the
setting to the bot's own default.  ``--upload-mb default,0`` compares the
byte budget with the count alone (256 by default: the whole burst at once).
``--files 0``: text-only requests (each planned as one text-to-image call),
what the ``MAX_INFLIGHT_REQUESTS`` default is weighed by.  Everything is on
127.0.0.1.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import io
import json
import signal
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks.chaos import TallySlack, _free_port  # noqa: E402
from benchmarks.user_path import QUOTAS  # noqa: E402
from bot import settings  # noqa: E402
from tests.fakes.agent_fixture import write_test_catalog  # noqa: E402
from tests.fakes.process_env import clean_env  # noqa: E402
from tests.fakes.slack_fake import (  # noqa: E402
    BOT_TOKEN,
    SIGNING_SECRET,
    event_body,
    make_slack_fake,
    mention_event,
    signed_headers,
)


def noise_png(megabytes: float, seed: int) -> bytes:
    """A PNG of random pixels about ``megabytes`` large (noise does not compress)."""
    import numpy as np
    from PIL import Image

    side = int((megabytes * 1_000_000 / 3) ** 0.5)
    pixels = np.random.default_rng(seed).integers(0, 256, (side, side, 3), dtype=np.uint8)
    buf = io.BytesIO()
    Image.fromarray(pixels, "RGB").save(buf, format="PNG", compress_level=1)
    return buf.getvalue()


def memory_kb(pid: int) -> dict[str, int]:
    """VmRSS (now) and VmHWM (peak) of ``pid``, in kB."""
    out: dict[str, int] = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            out[key] = int(value.split()[0])
    return out


async def control(http: aiohttp.ClientSession, url: str, path: str, body: dict[str, Any]) -> None:
    async with http.post(f"{url}{path}", json=body) as response:
        response.raise_for_status()


def admission_env(inflight: int | None, upload_mb: float | None) -> dict[str, str]:
    """The admission settings of one run (None: the bot's default)."""
    env = {}
    if inflight is not None:
        env["MAX_INFLIGHT_REQUESTS"] = str(inflight)
    if upload_mb is not None:
        env["MAX_INFLIGHT_UPLOAD_MB"] = f"{upload_mb:g}"
    return env


async def one_run(
    args: argparse.Namespace,
    inflight: int | None,
    upload_mb: float | None,
    photos: list[bytes],
    fakes: dict[str, str],
) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="memory-") as tmp:
        work = Path(tmp)
        async with make_slack_fake(TallySlack()) as slack, aiohttp.ClientSession() as http:
            assert isinstance(slack, TallySlack)
            shared = [slack.add_file(f"photo{i + 1}.png", data) for i, data in enumerate(photos)]
            port = _free_port()
            env = (
                clean_env(work)
                | {
                    "OPENAI_API_KEY": "sk-memory",
                    "OPENAI_BASE_URL": fakes["llm"],
                    "LLM_MODEL": "fake-model",
                    "HF_INFERENCE_URL": fakes["hf"],
                    "MODEL_CATALOG": str(write_test_catalog(work / "catalog.jsonl")),
                    "MODEL_SELECTION": "downloads",
                    "SLACK_BOT_TOKEN": BOT_TOKEN,
                    "SLACK_SIGNING_SECRET": SIGNING_SECRET,
                    "SLACK_HTTP_PORT": str(port),
                    "SLACK_API_URL": slack.base_url,
                    "MAX_ATTACHMENT_BYTES": str(32 * 1024 * 1024),
                    **dict.fromkeys(QUOTAS, "0"),  # a burst of one user: no quotas
                    "LOG_LEVEL": "WARNING",
                }
                | admission_env(inflight, upload_mb)
            )
            log = work / "bot.log"
            with log.open("wb") as err:
                proc = await asyncio.create_subprocess_exec(
                    sys.executable, "-m", "bot", "run", "slack",
                    env=env, cwd=work, stdin=asyncio.subprocess.DEVNULL,
                    stdout=asyncio.subprocess.DEVNULL, stderr=err,
                )  # fmt: skip
            try:
                await _listening(port, proc)
                await asyncio.sleep(1.0)  # settled after start-up
                rest = memory_kb(proc.pid)["VmRSS"]
                peak_seen = rest
                started = time.monotonic()
                sends = [
                    _post(http, port, f"C{i:04d}", f"{1_700_000_000 + i}.000001", shared)
                    for i in range(args.requests)
                ]
                await asyncio.gather(*sends)
                channels = [f"C{i:04d}" for i in range(args.requests)]
                deadline = time.monotonic() + args.timeout
                while sum(1 for c in channels if slack.endings(c)) < len(channels):
                    if time.monotonic() > deadline or proc.returncode is not None:
                        break
                    peak_seen = max(peak_seen, memory_kb(proc.pid)["VmRSS"])
                    await asyncio.sleep(0.1)  # another process's memory: sample it
                wall = time.monotonic() - started
                mem = memory_kb(proc.pid)
            finally:
                if proc.returncode is None:
                    proc.send_signal(signal.SIGTERM)
                    try:
                        await asyncio.wait_for(proc.wait(), 30)
                    except TimeoutError:
                        proc.kill()
                        await proc.wait()
            answered = sum(1 for c in channels if slack.answers.get(c))
            failed = sum(1 for c in channels if slack.failed.get(c))
            queued = sum(1 for t in slack.texts() if "Queued" in t or "ahead of you" in t)
            tracebacks = log.read_text(errors="replace").count("Traceback")
    return {
        "inflight": settings.default("MAX_INFLIGHT_REQUESTS") if inflight is None else inflight,
        "upload_mb": settings.default("MAX_INFLIGHT_UPLOAD_MB") if upload_mb is None else upload_mb,
        "defaults": inflight is None and upload_mb is None,
        "requests": args.requests,
        "rss_at_rest_mb": round(rest / 1024),
        "peak_rss_mb": round(max(mem["VmHWM"], peak_seen) / 1024),
        "answered": answered,
        "failed": failed,
        "queue_notices": queued,
        "seconds": round(wall, 1),
        "tracebacks": tracebacks,
    }


async def _post(
    http: aiohttp.ClientSession, port: int, channel: str, ts: str, files: list[dict[str, Any]]
) -> None:
    event = mention_event("what is in these photos?", channel=channel, ts=ts, files=files)
    raw = json.dumps(event_body(event))
    url = f"http://127.0.0.1:{port}/slack/events"
    async with http.post(url, data=raw, headers=signed_headers(raw)) as response:
        await response.read()
        response.raise_for_status()


async def _listening(port: int, proc: asyncio.subprocess.Process) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if proc.returncode is not None:
            raise RuntimeError(f"the bot exited with {proc.returncode}")
        try:
            _, writer = await asyncio.open_connection("127.0.0.1", port)
        except OSError:
            await asyncio.sleep(0.1)  # the port is in another process: poll
            continue
        writer.close()
        with contextlib.suppress(OSError):
            await writer.wait_closed()
        return
    raise RuntimeError("the bot never started listening")


async def main_async(args: argparse.Namespace) -> list[dict[str, Any]]:
    photos = [noise_png(args.mb, seed) for seed in range(args.files)]
    fakes_proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "benchmarks.fakes_server", "--max-seconds", "1800",
        cwd=ROOT, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
    )  # fmt: skip
    assert fakes_proc.stdout is not None
    try:
        fakes = json.loads(await asyncio.wait_for(fakes_proc.stdout.readline(), 60))
        plan = [
            {"task": "image-classification", "id": 0, "dep": [-1], "args": {"image": "photo1.png"}}
            if photos  # with no files (--files 0), a text-only request: draw a picture
            else {"task": "text-to-image", "id": 0, "dep": [-1], "args": {"text": "a fox in snow"}}
        ]
        async with aiohttp.ClientSession() as http:
            await control(http, fakes["control"], "/reset", {"llm_delay": 0.5, "model_delay": 0.5})
            await control(
                http, fakes["control"], "/llm/default", {"stage": "plan", "reply": json.dumps(plan)}
            )
        return [
            await one_run(args, n, mb, photos, fakes)
            for n in args.inflight
            for mb in args.upload_mb
        ]
    finally:
        if fakes_proc.stdin is not None:
            fakes_proc.stdin.close()
        try:
            await asyncio.wait_for(fakes_proc.wait(), 10)
        except TimeoutError:
            fakes_proc.kill()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--requests", type=int, default=20)
    ap.add_argument("--files", type=int, default=3, help="files per request")
    ap.add_argument("--mb", type=float, default=20.0, help="size of each file")
    ap.add_argument(
        "--inflight", default="default", help="MAX_INFLIGHT_REQUESTS values to run (or default)"
    )
    ap.add_argument(
        "--upload-mb",
        default="default",
        help="MAX_INFLIGHT_UPLOAD_MB values to run (or default; 0: no byte budget)",
    )
    ap.add_argument("--timeout", type=float, default=600.0, help="longest wait for the answers")
    ap.add_argument("--json", help="write the figures here")
    args = ap.parse_args()
    args.inflight = _values(args.inflight, int)
    args.upload_mb = _values(args.upload_mb, float)
    results = asyncio.run(main_async(args))
    print(
        f"\n{args.requests} concurrent Slack requests, each with {args.files} × "
        f"{args.mb:g} MB photos, one `run slack` process"
    )
    print(
        f"  {'inflight cap':>12}  {'upload budget':>13}  {'RSS at rest':>11}  {'peak RSS':>9}  "
        "answered  failed  seconds"
    )
    for r in results:
        budget = f"{r['upload_mb']:g} MB" if r["upload_mb"] else "none"
        print(
            f"  {r['inflight']:>12}  {budget:>13}  {r['rss_at_rest_mb']:>8} MB  "
            f"{r['peak_rss_mb']:>6} MB  {r['answered']:>8}  {r['failed']:>6}  {r['seconds']:>7}"
            + ("  (the defaults)" if r["defaults"] else "")
        )
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2) + "\n")
    return 0 if all(r["answered"] + r["failed"] == r["requests"] for r in results) else 1


def _values(text: str, kind: type[int] | type[float]) -> list[Any]:
    """A comma list of numbers; ``default`` is None (the bot's own default)."""
    return [None if x.strip() == "default" else kind(x) for x in text.split(",") if x.strip()]


if __name__ == "__main__":
    raise SystemExit(main())
