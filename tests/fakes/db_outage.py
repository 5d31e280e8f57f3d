"""A database outage without stopping the database: a TCP proxy on 127.0.0.1
in front of the shared PostgreSQL that a test can cut and restore.

``cut()`` drops every open connection and stops listening (a client gets
"connection refused", as when the server is down or unreachable);
``restore()`` listens on the same port again.  The real driver and the real
server are on both sides, so what the bot sees is what an outage looks like.

    async with db_proxy("127.0.0.1", 5432) as proxy:
        url = make_url(pg_url).set(port=proxy.port)
        …
        await proxy.cut()
        …
        await proxy.restore()
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager


class CuttableProxy:
    def __init__(self, host: str, port: int) -> None:
        self.target = (host, port)
        self.port = 0
        self._server: asyncio.Server | None = None
        self._writers: set[asyncio.StreamWriter] = set()
        self._pipes: set[asyncio.Task[None]] = set()

    async def restore(self) -> None:
        """Listen (again, on the same port)."""
        self._server = await asyncio.start_server(self._connect, "127.0.0.1", self.port)
        self.port = int(self._server.sockets[0].getsockname()[1])

    async def cut(self) -> None:
        """Refuse new connections and drop the open ones."""
        if self._server is not None:
            self._server.close()
            self._server = None
        for writer in list(self._writers):
            writer.close()
        for task in list(self._pipes):
            task.cancel()
        await asyncio.gather(*self._pipes, return_exceptions=True)
        self._writers.clear()

    async def _connect(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            up_reader, up_writer = await asyncio.open_connection(*self.target)
        except OSError:
            writer.close()
            return
        self._writers.update((writer, up_writer))
        for src, dst in ((reader, up_writer), (up_reader, writer)):
            task = asyncio.get_running_loop().create_task(self._pipe(src, dst))
            self._pipes.add(task)
            task.add_done_callback(self._pipes.discard)

    async def _pipe(self, src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
        try:
            while data := await src.read(65536):
                dst.write(data)
                await dst.drain()
        except (OSError, asyncio.IncompleteReadError):
            pass
        finally:
            dst.close()
            self._writers.discard(dst)


@asynccontextmanager
async def db_proxy(host: str, port: int) -> AsyncIterator[CuttableProxy]:
    proxy = CuttableProxy(host, port)
    await proxy.restore()
    try:
        yield proxy
    finally:
        with contextlib.suppress(Exception):
            await proxy.cut()
