"""Stopping on SIGTERM without dropping work in progress.

systemd, Docker and Kubernetes stop a process with SIGTERM and kill it a
while later.  On SIGTERM the running command's hooks run first (the bot
stops taking requests and lets running ones finish), then its task is
cancelled so every ``async with`` closes its resources.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

log = logging.getLogger(__name__)


class Lifecycle:
    def __init__(self) -> None:
        self.terminated = False
        self._hooks: list[Callable[[], Awaitable[None]]] = []
        self._stopping: asyncio.Task[None] | None = None

    def before_stop(self, hook: Callable[[], Awaitable[None]]) -> None:
        """Run ``hook`` on SIGTERM before the command is cancelled."""
        self._hooks.append(hook)

    def terminate(self, task: asyncio.Task[object]) -> None:
        """The SIGTERM handler: run the hooks, then cancel ``task`` (once)."""
        if self._stopping is not None:
            return
        self.terminated = True
        self._stopping = asyncio.get_running_loop().create_task(self._stop(task))

    async def _stop(self, task: asyncio.Task[object]) -> None:
        for hook in self._hooks:
            try:
                await hook()
            except Exception:  # a failing hook must not keep the process alive
                log.exception("shutdown hook failed")
        task.cancel()
