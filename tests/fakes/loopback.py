"""Serve an aiohttp app on 127.0.0.1 for the length of a block: the one
place the fakes start and stop their servers.

``shutdown_timeout=0.5`` so a handler that hangs (a deliberately slow fake)
cannot hold teardown for aiohttp's default 60 s.
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from aiohttp import web


@asynccontextmanager
async def serve(app: web.Application) -> AsyncIterator[str]:
    """Yield the base URL (``http://127.0.0.1:PORT``, ephemeral port)."""
    runner = web.AppRunner(app, shutdown_timeout=0.5)
    await runner.setup()
    try:
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        yield f"http://127.0.0.1:{runner.addresses[0][1]}"
    finally:
        await runner.cleanup()


def free_port() -> int:
    """A loopback port nothing listens on (bound once, then released): for a
    server to start on, or a connection to be refused by."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def wait_listening(port: int, proc: asyncio.subprocess.Process, within: float = 30) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within
    while loop.time() < deadline:
        if proc.returncode is not None:
            raise AssertionError(f"the bot exited with {proc.returncode}")
        try:
            _, writer = await asyncio.open_connection("127.0.0.1", port)
        except OSError:
            await asyncio.sleep(0.1)  # nothing to await on: the port is in another process
            continue
        writer.close()
        await writer.wait_closed()
        return
    raise AssertionError("the bot never started listening")
