"""huggingface_hub's own clients on the process's TLS context
(core.http_client ``hub_client``, ``hub_async_client``, ``use_for_hub``): built
as the library's default factories build them, but without parsing the CA
bundle again, and used by the library once the providers are configured."""

from __future__ import annotations

from collections.abc import Iterator

import httpx2
import pytest
from huggingface_hub.utils import _http as hub_http
from huggingface_hub.utils import get_async_session, get_session

from core import tls
from core.experts.providers import configure
from core.http_client import hub_async_client, hub_client


@pytest.fixture
def library_defaults() -> Iterator[None]:
    """The library's own factories back after the test (the bot sets its own
    once at start-up, for the life of the process)."""
    yield
    hub_http.set_client_factory(hub_http.default_client_factory)
    hub_http.set_async_client_factory(hub_http.default_async_client_factory)


def _settings(client: httpx2.Client | httpx2.AsyncClient) -> tuple[object, ...]:
    hooks = {k: list(v) for k, v in client.event_hooks.items()}
    return hooks, client.follow_redirects, client.timeout, dict(client.headers), client.trust_env


def _context(client: httpx2.Client | httpx2.AsyncClient) -> object:
    return client._transport._pool._ssl_context  # type: ignore[union-attr]


def test_the_clients_are_built_like_the_librarys_defaults_on_the_shared_context() -> None:
    """A huggingface_hub upgrade that changes its default factories fails here."""
    pairs = (
        (hub_client(), hub_http.default_client_factory()),
        (hub_async_client(), hub_http.default_async_client_factory()),
    )
    for ours, theirs in pairs:
        assert _settings(ours) == _settings(theirs)
        assert _context(ours) is tls.context()
        assert _context(theirs) is not tls.context()  # the library's parses the bundle itself


@pytest.mark.usefixtures("library_defaults")
async def test_configuring_the_providers_gives_the_library_those_clients() -> None:
    configure(router_url=None, hub_url=None)
    session = get_session()
    assert _context(session) is tls.context()
    assert get_session() is session  # the library's one shared client
    async_session = get_async_session()
    try:
        assert _context(async_session) is tls.context()
    finally:
        await async_session.aclose()
