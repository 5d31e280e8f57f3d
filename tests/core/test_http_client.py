"""The SDKs' HTTP client (core.http_client): aiohttp's transport under
httpx2, its failures raised as httpcore raises them (the vendored adapter
calls a refused connection or a hang-up a ``ConnectTimeout``), against raw
loopback servers that misbehave in one way each."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Awaitable, Callable

import httpx2
import openai
import pytest

from core.http_client import Connections, async_client
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


_CHUNK = {"choices": [{"index": 0, "delta": {"content": "hi"}, "finish_reason": "stop"}]}
_COMPLETION = {
    "id": "c",
    "object": "chat.completion",
    "created": 0,
    "model": "m",
    "choices": [
        {"index": 0, "message": {"role": "assistant", "content": "hi"}, "finish_reason": "stop"}
    ],
}


class _LlamaServer:
    """Answers chat completions the way llama-server (cpp-httplib) does: a
    plain answer keeps the connection open; a streamed one is chunked SSE
    ending ``data: [DONE]``, says ``Keep-Alive`` like the other, and then the
    server hangs up (its content provider returns false after ``done()``,
    which cpp-httplib takes for a cancelled write).  The FIN is sent at once,
    as the server does, before the client has read the answer."""

    def __init__(self) -> None:
        self.requests: list[bool] = []  # stream? per request read

    async def __call__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = next(
                    int(line.split(b":", 1)[1])
                    for line in head.split(b"\r\n")
                    if line.lower().startswith(b"content-length:")
                )
                stream = bool(json.loads(await reader.readexactly(length)).get("stream"))
                self.requests.append(stream)
                if not stream:
                    body = json.dumps(_COMPLETION).encode()
                    writer.write(
                        b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n"
                        b"keep-alive: timeout=5, max=100\r\n"
                        b"content-length: %d\r\n\r\n%s" % (len(body), body)
                    )
                    await writer.drain()
                    continue
                writer.write(
                    b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
                    b"transfer-encoding: chunked\r\nkeep-alive: timeout=5, max=100\r\n\r\n"
                )
                for event in (f"data: {json.dumps(_CHUNK)}\n\n", "data: [DONE]\n\n"):
                    writer.write(b"%x\r\n%s\r\n" % (len(event), event.encode()))
                writer.write(b"0\r\n\r\n")
                writer.write_eof()  # the FIN goes out with the last bytes
                break
        except asyncio.IncompleteReadError:
            pass  # the client hung up
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


async def test_a_connection_the_server_closed_after_a_stream_is_not_reused(
    client: httpx2.AsyncClient,
) -> None:
    server = _LlamaServer()
    async for url in _serve(server):
        async with client.stream("POST", url, json={"stream": True}) as streamed:
            await streamed.aread()
        plain = await client.post(url, json={"stream": False})
        assert plain.status_code == 200
        assert server.requests == [True, False]


async def test_the_sdk_sends_each_call_once_around_a_stream() -> None:
    """stream → plain → stream through the openai SDK: three requests, no
    retry (the pooled connection the server closed used to cost one)."""
    server = _LlamaServer()
    sent: list[httpx2.Request] = []

    async def count(request: httpx2.Request) -> None:
        sent.append(request)

    async for url in _serve(server):
        llm = openai.AsyncOpenAI(
            base_url=url,
            api_key="x",
            max_retries=2,
            http_client=async_client(event_hooks={"request": [count]}),
        )
        async with llm:
            messages: list[openai.types.chat.ChatCompletionMessageParam] = [
                {"role": "user", "content": "hi"}
            ]
            for stream in (True, False, True):
                if stream:
                    chunks = await llm.chat.completions.create(
                        model="m", messages=messages, stream=True
                    )
                    async with chunks:
                        texts = [c.choices[0].delta.content async for c in chunks]
                    assert texts == ["hi"]
                else:
                    answer = await llm.chat.completions.create(model="m", messages=messages)
                    assert answer.choices[0].message.content == "hi"
        assert (len(sent), server.requests) == (3, [True, False, True])


class _KeepAlive:
    """Answers every request on a connection it keeps open; counts connections."""

    def __init__(self) -> None:
        self.connections = 0
        self.hung_up = 0  # connections the client closed

    async def __call__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            while True:
                await reader.readuntil(b"\r\n\r\n")
                writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok")
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            self.hung_up += 1
        writer.close()

    async def until_hung_up(self, n: int) -> int:
        for _ in range(500):  # the server reads the client's FIN on its next turn
            if self.hung_up >= n:
                break
            await asyncio.sleep(0.01)
        return self.hung_up


async def test_an_idle_connection_is_kept_past_the_sdks_five_seconds(
    client: httpx2.AsyncClient,
) -> None:
    """A call after a pause longer than httpx's default keep-alive (5 s), as a
    turn's answer call after its models, goes on the same connection: no new
    TCP and TLS handshake with the LLM or the router."""
    server = _KeepAlive()
    async for url in _serve(server):
        assert (await client.get(url)).status_code == 200
        await asyncio.sleep(6)
        assert (await client.get(url)).status_code == 200
    assert server.connections == 1


async def test_clients_on_one_pool_share_its_connections() -> None:
    """The LLM's client and the hosted expert's on one Connections (both go to
    the router with only HF_TOKEN): one connection between them; a client
    closed leaves the pool's connections to the others; the pool's owner
    closes them."""
    server = _KeepAlive()
    pool = Connections()
    first, second, alone = async_client(pool), async_client(pool), async_client()
    try:
        async for url in _serve(server):
            for c in (first, second, first, second, alone):
                assert (await c.get(url)).status_code == 200
            assert server.connections == 2  # the pool's one, and the lone client's own
            await first.aclose()
            await second.aclose()
            later = async_client(pool)
            assert (await later.get(url)).status_code == 200
            await later.aclose()
            assert server.connections == 2 and server.hung_up == 0
            await pool.aclose()
            assert await server.until_hung_up(1) == 1
            await alone.aclose()
            assert await server.until_hung_up(2) == 2
    finally:
        await alone.aclose()
        await pool.aclose()
