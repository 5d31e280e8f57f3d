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
the body streams.

A second: aiohttp hands out a pooled connection again while its socket
says the server has hung up, as long as the event loop has not yet read
that hang-up.  llama-server closes the connection right after every
streamed answer (its chunked answer ends ``0\r\n\r\n``, says
``Keep-Alive``, and the FIN follows at once), and the next request, sent
in the same turn of the loop, was written onto that socket and failed
("Can not write request body"): one retry after every streamed call.
:class:`_Connector` applies httpcore's rule (an idle connection whose
socket is readable is closed, not reused).  Every session is built by
:func:`async_client`.
"""

from __future__ import annotations

import asyncio
import functools
import select
import weakref
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import httpx2
import openai
from aiohttp.client_proto import ResponseHandler
from aiohttp.client_reqrep import ClientRequest
from aiohttp.connector import Connection
from aiohttp.tracing import Trace
from openai._vendor.httpx_aiohttp import AiohttpTransport

from core import tls

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


def _hung_up(connection: Connection) -> bool:
    """Whether an idle connection's socket has something to read: with no
    request outstanding that can only be the server's hang-up (or bytes no
    request asked for); either way it cannot carry another request."""
    transport = connection.transport
    sock = transport.get_extra_info("socket") if transport is not None else None
    if sock is None or sock.fileno() < 0:
        return True
    if not hasattr(select, "poll"):  # Windows
        return bool(select.select([sock], [], [], 0)[0])
    poll = select.poll()
    poll.register(sock, select.POLLIN)
    return bool(poll.poll(0))


class _Connector(aiohttp.TCPConnector):
    """aiohttp's connector, but a pooled connection the server has already
    closed is closed instead of handed out again (see the module docstring):
    aiohttp only notices a hang-up once the event loop has read it."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._used: weakref.WeakSet[ResponseHandler] = weakref.WeakSet()

    async def connect(
        self,
        req: ClientRequest,
        traces: list[Trace],
        timeout: aiohttp.ClientTimeout,  # noqa: ASYNC109 (aiohttp's signature)
    ) -> Connection:
        while True:
            connection = await super().connect(req, traces, timeout)
            protocol = connection.protocol
            if protocol is None or protocol not in self._used:  # a new connection
                if protocol is not None:
                    self._used.add(protocol)
                return connection
            if not _hung_up(connection):
                return connection
            connection.close()  # then the next pooled one, or a new one


def _connector(transport: AiohttpTransport) -> _Connector:
    limits = transport.limits
    limit = {} if limits.max_connections is None else {"limit": limits.max_connections}
    local = (transport.local_address, 0) if transport.local_address else None
    return _Connector(
        keepalive_timeout=limits.keepalive_expiry,
        ssl=transport.ssl_context,  # the default; the transport passes it on every request
        local_addr=local,
        **limit,
    )


def _session(transport: AiohttpTransport, pool: Connections | None = None) -> aiohttp.ClientSession:
    """The session the vendored transport would build itself
    (``AiohttpTransport.get_client``), on :class:`_Connector`: its own, or
    ``pool``'s, which it leaves open when it closes."""
    if pool is None:
        return aiohttp.ClientSession(connector=_connector(transport))
    return aiohttp.ClientSession(connector=pool.connector(transport), connector_owner=False)


class Connections:
    """One pool of connections for several clients.

    With only ``HF_TOKEN`` the LLM's calls (the openai SDK, on the router's
    ``/v1``) and the models' (the hosted expert) go to the same host,
    ``router.huggingface.co``: on one pool, a request's first model call
    finds the connection its planning call left idle, instead of opening its
    own (a TCP and TLS handshake, two round trips, in each fresh process and
    after every idle spell).  The connector is made in the event loop on the
    first call, as the transport's own is, with the first client's limits;
    closing a client leaves it open: :meth:`aclose` (its owner's) closes it."""

    def __init__(self) -> None:
        self._connector: _Connector | None = None

    def connector(self, transport: AiohttpTransport) -> _Connector:
        if self._connector is None or self._connector.closed:
            self._connector = _connector(transport)
        return self._connector

    async def aclose(self) -> None:
        connector, self._connector = self._connector, None
        if connector is not None:
            await connector.close()


# How long an idle connection is kept for the next call.  httpx's default
# (the SDKs' too) is 5 s: a turn's answer call, made after models that ran
# longer, and every request's first calls after a quiet spell paid a new TCP
# and TLS handshake to the LLM and to the router (two round trips each).
# Under a minute, the shortest idle timeout of the usual servers and load
# balancers (AWS's 60 s, nginx's 75 s); a connection a server closed earlier
# is not reused (_Connector).
KEEPALIVE_SECONDS = 50.0


def async_client(pool: Connections | None = None, **kwargs: Any) -> httpx2.AsyncClient:
    """An ``httpx2.AsyncClient`` on aiohttp's transport, with the openai SDK's
    defaults (timeout, connection limits, redirects) unless ``kwargs`` says
    otherwise, idle connections kept :data:`KEEPALIVE_SECONDS`, on ``pool``'s
    connections when given (else its own).  Their TLS context is the
    process's one (core.tls), not one made (a CA bundle parsed) per client."""
    if "verify" not in kwargs and kwargs.get("trust_env", True):
        kwargs["verify"] = tls.context()
    if "limits" not in kwargs:
        sdk = openai.DEFAULT_CONNECTION_LIMITS
        kwargs["limits"] = httpx2.Limits(
            max_connections=sdk.max_connections,
            max_keepalive_connections=sdk.max_keepalive_connections,
            keepalive_expiry=KEEPALIVE_SECONDS,
        )
    client: httpx2.AsyncClient = openai.DefaultAioHttpClient(**kwargs)
    for transport in (client._transport, *client._mounts.values()):
        if isinstance(transport, AiohttpTransport) and transport.client is None:
            # built on its first request, inside the event loop, as its own is
            transport.client = functools.partial(_session, transport, pool)
    client._transport = _Errors(client._transport)
    return client


def like(session: httpx2.AsyncClient, pool: Connections | None = None) -> httpx2.AsyncClient:
    """A client configured like ``session`` (its hooks, redirects, timeout,
    headers), on aiohttp's transport (on ``pool``'s connections when given):
    for a session an SDK built itself."""
    return async_client(
        pool,
        event_hooks={k: list(v) for k, v in session.event_hooks.items()},
        follow_redirects=session.follow_redirects,
        timeout=session.timeout,
        headers=session.headers,
    )
