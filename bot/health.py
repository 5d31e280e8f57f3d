"""Whether ``run`` is serving: a heartbeat file and the check that reads it.

While it serves Discord or Slack, ``run`` touches ``DATA_DIR/heartbeat-<host>``
from its event loop every ``BEAT_EVERY`` seconds, and removes it when it
stops.  ``python -m bot.health`` (the container's health check) exits 0 when
that file is fresh, and 1 with one line saying why not.  The host name keeps
the files of containers that share one data volume apart.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path

BEAT_EVERY = 10.0  # seconds between two touches
STALE_AFTER = 60.0  # a heartbeat older than this: the event loop is stuck or gone


def heartbeat_path(data_dir: Path) -> Path:
    return data_dir / f"heartbeat-{socket.gethostname()}"


@contextlib.asynccontextmanager
async def heartbeat(data_dir: Path, every: float = BEAT_EVERY) -> AsyncIterator[Path]:
    """Touch the heartbeat file now and every ``every`` seconds while the
    block runs; remove it when the block ends (a clean stop is not a hang)."""
    path = heartbeat_path(data_dir)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.touch()

    async def beat() -> None:
        while True:
            await asyncio.sleep(every)
            path.touch()

    task = asyncio.create_task(beat(), name="heartbeat")
    try:
        yield path
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        path.unlink(missing_ok=True)


def check(path: Path, now: float, stale_after: float = STALE_AFTER) -> tuple[bool, str]:
    """``(serving, one line)`` for the heartbeat at ``path`` at time ``now``."""
    try:
        age = now - path.stat().st_mtime
    except FileNotFoundError:
        return False, f"not serving: no heartbeat at {path} (is `hugginggpt-bot run` running?)"
    if age > stale_after:
        return False, (
            f"not serving: the last heartbeat at {path} is {age:.0f} s old "
            f"(more than {stale_after:.0f} s): the bot is stuck or stopped; restart it"
        )
    return True, f"serving: heartbeat {age:.0f} s ago"


def main() -> int:
    from bot.settings import Settings

    serving, line = check(heartbeat_path(Settings().store.data_path), time.time())
    print(line, file=sys.stdout if serving else sys.stderr)
    return 0 if serving else 1


if __name__ == "__main__":
    sys.exit(main())
