"""The HTTP client under the OpenAI and Hugging Face SDKs.

Both SDKs speak through an ``httpx2.AsyncClient``; by default its transport is
httpcore's, which costs about 1.1 ms of event-loop CPU per call (most of a
zero-latency request's CPU: issue 10's profile).  The openai SDK ships the
same client on aiohttp's transport (``openai.DefaultAioHttpClient``, a
vendored fork of httpx-aiohttp), which keeps every httpx2 feature the SDKs
and we rely on (event hooks, redirect rules, timeouts, streaming; proxies
from the environment, which httpx2 mounts on transports of their own) at
about half the CPU per call.

One thing it gets wrong, and it matters here: it maps every aiohttp
connection error to ``ConnectTimeout`` (a refused connection, a server that
hung up), so a dead endpoint would read "did not answer within 0 s" and a
reset connection would not be retried (core.llm retries connection errors,
never timeouts).  :class:`_Errors` maps them again from aiohttp's own
exception, as httpcore would have raised them, on the request and while
the body streams.  Every session is built by :func:`async_client`.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import httpx2
import openai

# aiohttp's exception → what httpcore raises for the same failure; the first
# that matches (most specific first).
_MAP: tuple[tuple[type[BaseException], type[httpx2.TransportError]], ...] = (
    (aiohttp.ConnectionTimeoutError, httpx2.ConnectTimeout),
    (aiohttp.ServerTimeoutError, httpx2.ReadTimeout),
    (aiohttp.ClientProxyConnectionError, httpx2.ProxyError),
    (aiohttp.ClientHttpProxyError, httpx2.ProxyError),
    (aiohttp.ClientConnectorError, httpx2.ConnectError),  # refused, DNS, TLS
    (aiohttp.ServerDisconnectedError, httpx2.RemoteProtocolError),
    (aiohttp.ClientPayloadError, httpx2.RemoteProtocolError),  # body cut short
    (aiohttp.ClientConnectionError, httpx2.ReadError),  # reset, other OS errors
    (asyncio.TimeoutError, httpx2.ReadTimeout),
)


def _remapped(error: httpx2.TransportError) -> httpx2.TransportError:
    cause = error.__cause__
    for source, target in _MAP:
        if isinstance(cause, source):
            if isinstance(error, target):
                return error
            return target(str(error) or type(cause).__name__)
    return error


class _Stream(httpx2.AsyncByteStream):
    def __init__(self, inner: httpx2.AsyncByteStream) -> None:
        self._inner = inner

    async def __aiter__(self) -> AsyncIterator[bytes]:
        try:
            async for chunk in self._inner:
                yield chunk
        except httpx2.TransportError as e:
            raise _remapped(e) from e.__cause__

    async def aclose(self) -> None:
        await self._inner.aclose()


class _Errors(httpx2.AsyncBaseTransport):
    """A transport whose errors are mapped again (see the module docstring)."""

    def __init__(self, inner: httpx2.AsyncBaseTransport) -> None:
        self._inner = inner

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        try:
            response = await self._inner.handle_async_request(request)
        except httpx2.TransportError as e:
            raise _remapped(e) from e.__cause__
        if isinstance(response.stream, httpx2.AsyncByteStream):
            response.stream = _Stream(response.stream)
        return response

    async def aclose(self) -> None:
        await self._inner.aclose()


def async_client(**kwargs: Any) -> httpx2.AsyncClient:
    """An ``httpx2.AsyncClient`` on aiohttp's transport, with the openai SDK's
    defaults (timeout, connection limits, redirects) unless ``kwargs`` says
    otherwise."""
    client: httpx2.AsyncClient = openai.DefaultAioHttpClient(**kwargs)
    client._transport = _Errors(client._transport)
    return client


def like(session: httpx2.AsyncClient) -> httpx2.AsyncClient:
    """A client configured like ``session`` (its hooks, redirects, timeout,
    headers), on aiohttp's transport: for a session an SDK built itself."""
    return async_client(
        event_hooks={k: list(v) for k, v in session.event_hooks.items()},
        follow_redirects=session.follow_redirects,
        timeout=session.timeout,
        headers=session.headers,
    )
