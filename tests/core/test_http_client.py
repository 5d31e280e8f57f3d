"""The SDKs' HTTP client (core.http_client): aiohttp's transport under
httpx2, its failures raised as httpcore raises them (the vendored adapter
calls a refused connection or a hang-up a ``ConnectTimeout``), against raw
loopback servers that misbehave in one way each."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable

import httpx2
import pytest

from core.http_client import async_client
from tests.fakes.loopback import free_port as closed_port

Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


async def _serve(handler: Handler) -> AsyncIterator[str]:
    server = await asyncio.start_server(handler, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}/"
    finally:
        server.close()
        await server.wait_closed()


async def _hang_up(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    await reader.readuntil(b"\r\n\r\n")
    writer.close()


async def _short_body(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    await reader.readuntil(b"\r\n\r\n")
    writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 100\r\n\r\nonly part")
    await writer.drain()
    writer.close()


async def _silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    await reader.readuntil(b"\r\n\r\n")
    await asyncio.sleep(30)  # never answers; the client's read timeout ends it


async def _ok(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    await reader.readuntil(b"\r\n\r\n")
    writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\n\r\nhello")
    await writer.drain()
    writer.close()


@pytest.fixture
async def client() -> AsyncIterator[httpx2.AsyncClient]:
    c = async_client()
    try:
        yield c
    finally:
        await c.aclose()


async def test_a_refused_connection_is_a_connect_error_not_a_timeout(
    client: httpx2.AsyncClient,
) -> None:
    with pytest.raises(httpx2.ConnectError):
        await client.get(f"http://127.0.0.1:{closed_port()}/")


async def test_a_server_that_hangs_up_is_a_protocol_error(client: httpx2.AsyncClient) -> None:
    async for url in _serve(_hang_up):
        with pytest.raises(httpx2.RemoteProtocolError):
            await client.get(url)


async def test_a_body_cut_short_while_streaming_is_a_protocol_error(
    client: httpx2.AsyncClient,
) -> None:
    async for url in _serve(_short_body):
        async with client.stream("GET", url) as response:
            assert response.status_code == 200
            with pytest.raises(httpx2.RemoteProtocolError):
                await response.aread()


async def test_a_silent_server_is_a_read_timeout(client: httpx2.AsyncClient) -> None:
    async for url in _serve(_silent):
        with pytest.raises(httpx2.ReadTimeout):
            await client.get(url, timeout=httpx2.Timeout(5.0, read=0.2))


async def test_a_good_answer_reads_through(client: httpx2.AsyncClient) -> None:
    async for url in _serve(_ok):
        response = await client.get(url)
        assert (response.status_code, response.text) == (200, "hello")
