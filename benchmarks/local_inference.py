"""Local CPU inference of tiny models: the first call (load + run) vs cached calls.

Run from the repository root with the local extra installed::

    .venv-local/bin/python benchmarks/local_inference.py [--repeat 5]

The tiny models (randomly initialised, no downloads) are built first; then each
one is measured in a fresh process, as the bot's first local request after
start-up meets it: the first ``LocalExpert.run`` (torch imports, pipeline load,
run), the median of ``--repeat`` cached calls, and a reload after eviction
(weights loaded again in a warm process).  It prints a table and exits
non-zero unless every cached call is at least 10× faster than the first call.
Tiny weights load in milliseconds, so the reload column is the honest measure
of weight loading alone; with real checkpoints it grows to seconds.
"""

from __future__ import annotations

import argparse
import asyncio
import io
import json
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402

from core.catalog import ModelInfo  # noqa: E402
from core.experts.local import LocalExpert  # noqa: E402
from core.results import Blob, TaskInputs  # noqa: E402

MIN_SPEEDUP = 10.0


def _png() -> Blob:
    from PIL import Image

    im = Image.new("RGB", (48, 40), "white")
    im.paste((0, 0, 0), (10, 10, 30, 30))
    buf = io.BytesIO()
    im.save(buf, format="PNG")
    return Blob(kind="image", mime="image/png", data=buf.getvalue())


def _video() -> Blob:
    from core.experts.video import encode_video

    frames = [np.full((32, 32, 3), 20 * i, dtype=np.uint8) for i in range(12)]
    return Blob(kind="video", mime="video/mp4", data=encode_video(frames, fps=8))


def _cases() -> list[tuple[str, str, Callable[[], TaskInputs]]]:
    """(task, tiny_models builder, inputs) for each benchmarked model."""
    text = "my name is sarah and i live in london"
    return [
        ("text-classification", "text_classifier", lambda: TaskInputs(text=text)),
        ("token-classification", "token_classifier", lambda: TaskInputs(text=text)),
        ("image-classification", "image_classifier", lambda: TaskInputs(image=_png())),
        ("object-detection", "object_detector", lambda: TaskInputs(image=_png())),
        ("image-segmentation", "segmenter", lambda: TaskInputs(image=_png())),
        ("video-classification", "video_classifier", lambda: TaskInputs(video=_video())),
        ("text-to-image", "stable_diffusion", lambda: TaskInputs(text="a cat")),
    ]


async def _time(ex: LocalExpert, task: str, model: ModelInfo, inputs: TaskInputs) -> float:
    started = time.perf_counter()
    await ex.run(task, model, inputs)
    return time.perf_counter() - started


async def measure(task: str, path: Path, repeat: int) -> dict[str, float]:
    """In a process that has not touched torch yet, as a bot's first request:
    the cold first call, the cached calls, then a reload after eviction."""
    make_inputs = next(make for t, _, make in _cases() if t == task)
    inputs = make_inputs()
    started = time.perf_counter()
    import diffusers  # noqa: F401  (the packages themselves: paid once per process)
    import torch  # noqa: F401
    import transformers  # noqa: F401

    imports = time.perf_counter() - started
    model = ModelInfo(id=f"tiny/{task}", task=task, local=str(path))
    ex = LocalExpert(models_dir=None, max_loaded=1, device="cpu", diffusion_steps=2)
    cold = await _time(ex, task, model, inputs)
    cached = statistics.median([await _time(ex, task, model, inputs) for _ in range(repeat)])
    await ex.aclose()  # evicted: the next call loads the weights again
    reload = await _time(ex, task, model, inputs)
    assert ex.loads == 2, ex.loads
    await ex.aclose()
    return {"imports": imports, "cold": cold, "cached": cached, "reload": reload}


def _child(task: str, path: Path, repeat: int) -> dict[str, float]:
    out = subprocess.run(
        [sys.executable, __file__, "--one", task, "--dir", str(path), "--repeat", str(repeat)],
        check=True,
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def run_all(repeat: int) -> list[tuple[str, dict[str, float]]]:
    from tests.core.experts.local import tiny_models

    rows = []
    with tempfile.TemporaryDirectory(prefix="bench-local-") as tmp:
        paths = {
            task: getattr(tiny_models, builder)(Path(tmp) / task) for task, builder, _ in _cases()
        }
        for task, path in paths.items():
            rows.append((task, _child(task, path, repeat)))
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5, help="cached calls per model")
    parser.add_argument("--one", help=argparse.SUPPRESS)  # child mode: one task
    parser.add_argument("--dir", help=argparse.SUPPRESS)
    args = parser.parse_args()
    repeat = max(1, args.repeat)
    if args.one:
        print(json.dumps(asyncio.run(measure(args.one, Path(args.dir), repeat))))
        return 0

    rows = run_all(repeat)
    print("Local CPU inference, tiny models; one fresh process per model, times in ms")
    print(
        f"{'task':<22} {'imports':>8} {'first call':>11} {'cached':>8} {'speed-up':>9} "
        f"{'reload':>8} {'reload/cached':>14}"
    )
    slow = []
    for task, t in rows:
        speedup = t["cold"] / t["cached"]
        print(
            f"{task:<22} {t['imports'] * 1e3:>8.0f} {t['cold'] * 1e3:>11.1f} {t['cached'] * 1e3:>8.1f} {speedup:>8.1f}× "
            f"{t['reload'] * 1e3:>8.1f} {t['reload'] / t['cached']:>13.1f}×"
        )
        if speedup < MIN_SPEEDUP:
            slow.append(task)
    print(
        "imports = import torch, transformers, diffusers (once per process, not counted);\n"
        "first call = load (incl. the model type's modules) + run, as the first request for\n"
        "a model after start-up; cached = median of later calls; reload = load + run again\n"
        "after the model was evicted from the LRU (weights only; modules already imported)."
    )
    if slow:
        print(f"FAIL: the cached call is less than {MIN_SPEEDUP:.0f}× faster for {', '.join(slow)}")
        return 1
    print(f"OK: every cached call is at least {MIN_SPEEDUP:.0f}× faster than the first call")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
