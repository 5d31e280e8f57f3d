"""Scripting helpers shared by the Discord end-to-end tests."""

from __future__ import annotations

import io
import json
import random
from typing import Any

from PIL import Image


def plan(*tasks: dict[str, Any]) -> str:
    return json.dumps(list(tasks))


def step(id: int, task: str, dep: list[int] | None = None, **args: str) -> dict[str, Any]:
    return {"task": task, "id": id, "dep": dep or [-1], "args": args}


def noisy_png(side: int, seed: int = 0) -> bytes:
    """A PNG that does not compress (random pixels): about 3 bytes per pixel."""
    rng = random.Random(seed)
    im = Image.frombytes("RGB", (side, side), rng.randbytes(side * side * 3))
    buf = io.BytesIO()
    im.save(buf, format="PNG")
    return buf.getvalue()


def fence_balanced(text: str) -> bool:
    return sum(line.strip().startswith("```") for line in text.split("\n")) % 2 == 0
