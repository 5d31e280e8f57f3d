"""A CPU profile without any package: the main thread's stack, sampled on
the process's CPU time (``SIGPROF``), as ``--profile`` writes it when
pyinstrument is not installed.

The timer counts the CPU time of every thread of the process (user and
system), so a sample that lands while the event loop waits in ``select``
is CPU spent elsewhere in the process: aiosqlite's thread running SQLite,
or the kernel writing a commit to disk.  The report says so.  Linux and
macOS only (``signal.setitimer``); the resolution is the kernel's tick
(about 4 ms here), so a few thousand samples need a run of some seconds.
"""

from __future__ import annotations

import collections
import signal
from pathlib import Path
from types import FrameType

# Where a sample is filed, first match of its stack from the outermost frame in.
GROUPS: tuple[tuple[str, tuple[str, ...]], ...] = (
    (
        "store (SQLAlchemy, drivers, core/store)",
        ("sqlalchemy/", "aiosqlite/", "asyncpg/", "core/store/"),
    ),
    ("LLM calls (openai SDK, core/llm.py)", ("openai/", "core/llm.py")),
    ("model calls (huggingface_hub, core/experts)", ("huggingface_hub/", "core/experts/")),
    ("prompt building", ("core/plan_prompt.py", "core/prompts/")),
    ("logging", ("logging/",)),
    ("checkpoint state (pydantic)", ("core/turn_state.py",)),
    ("HTTP (aiohttp, httpx2) outside the SDKs", ("aiohttp/", "httpx2/")),
    ("elsewhere in the process (SQLite's thread, the kernel)", ("selectors.py:select",)),
)


class CpuSampler:
    def __init__(self, interval: float = 0.001) -> None:
        self.interval = interval
        self.stacks: collections.Counter[tuple[str, ...]] = collections.Counter()

    def _sample(self, _signum: int, frame: FrameType | None) -> None:
        stack: list[str] = []
        while frame is not None:
            stack.append(f"{frame.f_code.co_filename}:{frame.f_code.co_name}")
            frame = frame.f_back
        self.stacks[tuple(reversed(stack))] += 1

    def start(self) -> None:
        self._previous = signal.signal(signal.SIGPROF, self._sample)
        signal.setitimer(signal.ITIMER_PROF, self.interval, self.interval)

    def stop(self) -> None:
        signal.setitimer(signal.ITIMER_PROF, 0, 0)
        signal.signal(signal.SIGPROF, self._previous)

    def report(self, top: int = 40) -> str:
        """The share of samples per group, then per function (inclusive:
        every sample with the function anywhere on its stack, by file)."""
        total = sum(self.stacks.values()) or 1
        groups: collections.Counter[str] = collections.Counter()
        functions: collections.Counter[str] = collections.Counter()
        for stack, n in self.stacks.items():
            short = [_short(f) for f in stack]
            groups[_group(short)] += n
            for f in set(short):
                functions[f] += n
        lines = [f"{total} samples of CPU time (SIGPROF, {self.interval * 1000:g} ms asked)", ""]
        lines += [f"{100 * n / total:5.1f}%  {g}" for g, n in groups.most_common()]
        lines += ["", "inclusive, by function:"]
        outer = {
            "<module>",
            "run",
            "run_forever",
            "run_until_complete",
            "_run_once",
            "_run",
            "main",
        }
        shown = [
            (f, n)
            for f, n in functions.most_common()
            if f.rsplit(":", 1)[-1] not in outer and not f.startswith("<frozen runpy>")
        ]
        lines += [f"{100 * n / total:5.1f}%  {f}" for f, n in shown[:top]]
        return "\n".join(lines) + "\n"

    def write(self, path: Path) -> None:
        path.write_text(self.report(), encoding="utf-8")


def _short(frame: str) -> str:
    for marker in ("/site-packages/", "/lib/python3"):
        if marker in frame:
            frame = frame.split(marker, 1)[1]
            return frame.split("/", 1)[1] if marker == "/lib/python3" else frame
    parts = frame.split("/")
    for root in ("core", "bot", "adapters", "benchmarks"):
        if root in parts:
            return "/".join(parts[parts.index(root) :])
    return frame


def _group(stack: list[str]) -> str:
    for name, marks in GROUPS:
        if any(any(m in f for m in marks) for f in stack):
            return name
    for f in reversed(stack):
        if f.startswith(("core/", "bot/", "adapters/")):
            return "other: " + f.split(":", 1)[0]
    if stack and stack[-1].startswith(("asyncio/", "selectors.py")):
        return "the event loop (asyncio: callbacks, tasks, wake-ups)"
    return "other: " + (stack[-1] if stack else "?")
