"""Handles: the short, safe, unique names users and the LLM call files by.

A handle is a basename only (no path can be smuggled in through a file
name), ASCII ``[A-Za-z0-9._-]``, at most 64 characters, unique within what a
conversation can see.
"""

from __future__ import annotations

import re
import unicodedata

MAX_HANDLE = 64
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")
_MAX_EXT = 10


def _sanitize(wanted: str) -> tuple[str, str]:
    """(stem, ".ext" or "") of a safe basename for ``wanted``."""
    name = unicodedata.normalize("NFKD", wanted).encode("ascii", "ignore").decode()
    name = re.split(r"[\\/]", name)[-1]
    name = "".join(ch for ch in name if ch.isprintable())
    stem, dot, ext = name.rpartition(".")
    if not dot:
        stem, ext = name, ""
    ext = _UNSAFE.sub("", ext)[:_MAX_EXT]
    stem = _UNSAFE.sub("_", stem).strip("._-")
    return (stem or "file"), (f".{ext}" if ext else "")


def allocate_handle(taken: set[str], wanted: str) -> str:
    """A safe, unused handle for a file the user called ``wanted``.

    Basename only, ``[A-Za-z0-9._-]``, at most 64 characters, extension kept,
    empty → ``file``; on a clash ``photo.png`` → ``photo-2.png`` → ``photo-3.png``.
    Does not add the result to ``taken``.
    """
    stem, ext = _sanitize(wanted)
    n = 1
    while True:
        suffix = "" if n == 1 else f"-{n}"
        handle = stem[: MAX_HANDLE - len(ext) - len(suffix)] + suffix + ext
        if handle not in taken:
            return handle
        n += 1
