"""Content-addressed media files under one root directory.

A file lives at ``ab/cd/<sha256>.<ext>``: the same bytes always land on the
same path, so storing twice costs nothing and two writers cannot disagree.
Writes go to a temporary file first and are moved into place with
``os.replace``, so a reader never sees half a file.  Reads take a path
*relative to the root* and refuse anything that resolves outside it: the
LLM and users only ever name files by handle, and this is the last line that
keeps a crafted path from reading ``/etc/passwd``.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import tempfile
from dataclasses import dataclass
from pathlib import Path

from core.clock import SYSTEM_CLOCK, Clock
from core.threads import work

_EXT = re.compile(r"[^a-z0-9]")
# A path as :meth:`MediaStore.put` names it (``ab/cd/<sha256>.<ext>``).
_STORED = re.compile(r"[0-9a-f]{2}/[0-9a-f]{2}/[0-9a-f]{64}\.[a-z0-9]{1,10}")


def _clean_ext(ext: str) -> str:
    cleaned = _EXT.sub("", ext.lower().lstrip("."))[:10]
    return cleaned or "bin"


@dataclass(frozen=True, slots=True)
class PruneReport:
    """What a prune did: files removed, and the files it kept and why."""

    removed: int = 0
    freed: int = 0  # bytes
    kept_in_use: int = 0  # a conversation or an unfinished request refers to them
    kept_recent: int = 0  # unreferenced, but younger than the grace period
    kept_recent_bytes: int = 0


class MediaStore:
    def __init__(self, root: Path, *, clock: Clock = SYSTEM_CLOCK) -> None:
        self.root = Path(root).resolve()
        self._prefix = str(self.root) + os.sep
        self.clock = clock  # a prune's cutoff (wall time, beside the files' mtimes)

    async def put(self, data: bytes, ext: str) -> tuple[str, str]:
        """Store ``data``; return (path relative to the root, sha256 hex)."""
        return await work(self._put, data, ext)

    def _put(self, data: bytes, ext: str) -> tuple[str, str]:
        digest = hashlib.sha256(data).hexdigest()
        rel = f"{digest[:2]}/{digest[2:4]}/{digest}.{_clean_ext(ext)}"
        target = self.root / rel
        if target.is_file() and target.stat().st_size == len(data):
            return rel, digest  # same name means same bytes: nothing to write
        target.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=".tmp-", suffix=".part")
        try:
            with os.fdopen(fd, "wb") as fh:
                fh.write(data)
                fh.flush()
                os.fsync(fh.fileno())
            os.replace(tmp, target)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise
        return rel, digest

    async def read(self, rel_path: str) -> bytes:
        """The bytes at ``rel_path``; ValueError if it points outside the root."""
        path = self.path(rel_path)
        return await work(path.read_bytes)

    def path(self, rel: str) -> Path:
        """The absolute path of ``rel``; ValueError if it resolves outside the root.

        A name in this store's own layout (``ab/cd/<sha256>.<ext>``: no ``..``,
        no absolute part) is joined to the root as it is, as :meth:`relative`
        takes one; any other is resolved and checked."""
        if _STORED.fullmatch(rel):
            return Path(self._prefix + rel)
        if not rel or Path(rel).is_absolute():
            raise ValueError(f"media path must be relative to the media root: {rel!r}")
        resolved = (self.root / rel).resolve()
        if resolved == self.root or not resolved.is_relative_to(self.root):
            raise ValueError(f"media path escapes the media root: {rel!r}")
        return resolved

    def relative(self, path: Path) -> str:
        """The storage path of an absolute ``path`` inside the root (ValueError if outside).

        A path as this store names its files (the root, then ``ab/cd/<sha256>.<ext>``)
        is taken as it is; any other is resolved first (a checkpoint names each
        of its turn's files this way, several times a request, and resolving
        asks the file system about every directory on the way)."""
        text = str(path)
        if text.startswith(self._prefix) and _STORED.fullmatch(rest := text[len(self._prefix) :]):
            return rest
        resolved = Path(path).resolve()
        if resolved == self.root or not resolved.is_relative_to(self.root):
            raise ValueError(f"{path} is not inside the media root {self.root}")
        return resolved.relative_to(self.root).as_posix()

    async def prune(self, keep: set[str], *, older_than: float = 3600.0) -> PruneReport:
        """Delete stored files whose relative path is not in ``keep``.

        Only files older than ``older_than`` seconds go: a turn writes its
        files before its database rows, so a fresh unreferenced file may
        belong to a turn still running.  The report says what was removed
        and what was kept for which reason.
        """
        return await work(self._prune, keep, older_than)

    def _prune(self, keep: set[str], older_than: float) -> PruneReport:
        if not self.root.is_dir():
            return PruneReport()
        cutoff = self.clock.now() - older_than
        removed = freed = in_use = recent = recent_bytes = 0
        for path in self.root.glob("*/*/*"):
            if not path.is_file() or path.name.startswith(".tmp-"):
                continue
            rel = path.relative_to(self.root).as_posix()
            try:
                st = path.stat()
            except FileNotFoundError:
                continue
            if rel in keep:
                in_use += 1
            elif st.st_mtime > cutoff:
                recent += 1
                recent_bytes += st.st_size
            else:
                with contextlib.suppress(FileNotFoundError):
                    path.unlink()
                    removed += 1
                    freed += st.st_size
        return PruneReport(removed, freed, in_use, recent, recent_bytes)
