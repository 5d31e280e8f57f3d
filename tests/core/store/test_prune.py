"""Pruning media files nothing refers to any more (after /forget)."""

from __future__ import annotations

import os
import time
from pathlib import Path

from core.store import MediaStore, Repo
from core.types import ConversationKey
from tests.core.store.builders import CHANNEL, stored, turn
from tests.fakes.clock import FakeClock

OTHER = ConversationKey("slack", "T1", "C1", None)


def age(path: os.PathLike[str], seconds: float) -> None:
    old = time.time() - seconds
    os.utime(path, (old, old))


async def test_prune_keeps_referenced_and_fresh_files(repo: Repo, media_store: MediaStore) -> None:
    shared = await stored(media_store, "a.png", b"same bytes")
    mine = await stored(media_store, "b.png", b"only mine")
    await repo.save_turn(turn(CHANNEL, "q", "a", uploads=(shared, mine)))
    twin = await stored(media_store, "a-copy.png", b"same bytes")  # same content → same file
    await repo.save_turn(turn(OTHER, "q", "a", uploads=(twin,)))
    fresh_orphan = await stored(media_store, "c.png", b"in flight, not saved yet")
    for r in (shared, mine, fresh_orphan):
        age(r.path, 7200)
    age(fresh_orphan.path, 10)  # written moments ago by a turn still running

    await repo.forget(CHANNEL)
    report = await repo.prune_media(older_than=3600)

    assert (report.removed, report.freed) == (1, len(b"only mine"))
    assert not mine.path.exists()
    assert shared.path.exists()  # still used by the other conversation
    assert fresh_orphan.path.exists()
    # what was kept, and why: one file in use, one too young to tell
    assert (report.kept_in_use, report.kept_recent) == (1, 1)
    assert report.kept_recent_bytes == len(b"in flight, not saved yet")
    assert await repo.read(twin) == b"same bytes"
    again = await repo.prune_media(older_than=3600)
    assert (again.removed, again.freed, again.kept_in_use, again.kept_recent) == (0, 0, 1, 1)


async def test_the_grace_period_is_read_on_the_stores_clock(tmp_path: Path) -> None:
    media = MediaStore(tmp_path, clock=FakeClock(wall=time.time() + 7200))
    rel, _ = await media.put(b"written just now", "png")
    report = await media.prune(set(), older_than=3600)  # two hours later, on its clock
    assert report.removed == 1
    assert not media.path(rel).exists()
