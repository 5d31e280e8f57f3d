"""Prompt templates (``*.md``) and demonstrations (``*.json``) for the LLM stages.

They ship as package data and are read with :mod:`importlib.resources`, so
they work from a wheel as well as from a checkout.  :func:`quote` keeps user
text inside the delimiter tags the prompts use.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from functools import cache
from importlib import resources

_TAGS = re.compile(r"<(/?\s*(?:request|chat_log|results|files)\s*)>", re.IGNORECASE)
TRIMMED = "…(trimmed)"


@cache
def load(name: str) -> str:
    """The text of one file of this package (e.g. ``planning_system.md``)."""
    return resources.files(__name__).joinpath(name).read_text(encoding="utf-8")


def quote(text: str) -> str:
    """``text`` with our delimiter tags defused (``</request>`` → ``‹/request›``),
    so words from a user or a model cannot close a block and pose as rules."""
    return _TAGS.sub(r"‹\1›", text)


def trim(text: str, limit: int) -> str:
    """``text`` cut to ``limit`` characters, marked when cut."""
    return text if len(text) <= limit else text[:limit] + TRIMMED


def render_chat_log(
    chat_log: Sequence[tuple[str, str]], budget: int, turn_limit: int = 1200
) -> str:
    """Recent turns as ``role: text`` lines, oldest first; the newest are kept
    within ``budget`` characters and each turn is cut to ``turn_limit``."""
    kept: list[str] = []
    used = 0
    for role, text in reversed(chat_log):
        line = f"{role}: {quote(trim(' '.join(text.split()), turn_limit))}"
        if used + len(line) > budget:
            break
        kept.append(line)
        used += len(line) + 1
    return "\n".join(reversed(kept))
