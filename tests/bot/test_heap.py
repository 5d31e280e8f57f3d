"""bot.heap.settle: start-up's objects frozen, garbage collected first, the
collector still collecting what comes later.  In a process of its own: the
collector's state is the whole process's."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

SCRIPT = """
import gc, json, weakref
from bot import heap

class Node:
    pass

def cycle():
    a, b = Node(), Node()
    a.other, b.other = b, a
    return weakref.ref(a)

kept = [Node() for _ in range(100)]
before = cycle()  # garbage at start-up: collected, not frozen
frozen = heap.settle()
after = cycle()  # garbage made while serving
gc.collect()
print(json.dumps({
    "frozen": frozen,
    "freeze_count": gc.get_freeze_count(),
    "threshold": gc.get_threshold(),
    "before_collected": before() is None,
    "after_collected": after() is None,
    "kept_frozen": frozen >= len(kept),
}))
"""


def test_settle_freezes_start_up_and_still_collects_later_cycles() -> None:
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT], cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert out["frozen"] == out["freeze_count"] > 1000  # the imported modules' objects
    assert out["threshold"][0] == 10_000
    assert out["before_collected"], "start-up's garbage was frozen, not collected"
    assert out["after_collected"], "a cycle made after settling was never collected"
    assert out["kept_frozen"]
