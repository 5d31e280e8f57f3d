"""The SDK clients' TLS context (core.tls): httpx2's own default, made once a
process (in a thread when :func:`core.tls.prepare` started it) and shared by
every client :func:`core.http_client.async_client` builds."""

from __future__ import annotations

import ssl
import threading
from collections.abc import Iterator
from pathlib import Path

import httpcore2
import pytest
from openai._vendor.httpx_aiohttp import AiohttpTransport

from core import tls
from core.http_client import async_client


@pytest.fixture
def fresh(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """A process that has made no context yet."""
    if tls._making is not None:  # one an earlier test started: let it finish first
        tls._making.join()
    monkeypatch.setattr(tls, "_made", None)
    monkeypatch.setattr(tls, "_making", None)
    yield


def _one_ca_bundle(path: Path) -> Path:
    """A CA bundle of one certificate (the first of the system's)."""
    system = ssl.create_default_context()
    ders = system.get_ca_certs(binary_form=True)
    if not ders:  # the default store may be a directory read lazily: take its file
        cafile = ssl.get_default_verify_paths().openssl_cafile
        system.load_verify_locations(cafile)
        ders = system.get_ca_certs(binary_form=True)
    assert ders, "no CA certificate on this machine to build a bundle from"
    path.write_text(ssl.DER_cert_to_PEM_cert(ders[0]), encoding="ascii")
    return path


def _transport_context(client: object) -> ssl.SSLContext:
    transport = client._transport._inner  # type: ignore[attr-defined]  # _Errors around it
    assert isinstance(transport, AiohttpTransport)
    return transport.ssl_context


def test_it_is_httpx2s_default_context(fresh: None) -> None:
    made = tls.context()
    default = httpcore2.default_ssl_context(_trust_env=True)
    assert made.verify_mode == default.verify_mode == ssl.CERT_REQUIRED
    assert made.check_hostname and default.check_hostname
    assert made.cert_store_stats() == default.cert_store_stats()
    assert made.protocol == default.protocol


def test_it_reads_the_bundle_ssl_cert_file_names(
    fresh: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    bundle = _one_ca_bundle(tmp_path / "ca.pem")
    monkeypatch.setenv("SSL_CERT_FILE", str(bundle))
    assert tls.context().cert_store_stats()["x509_ca"] == 1


def test_one_context_for_every_client(fresh: None) -> None:
    first, second = async_client(), async_client()
    assert _transport_context(first) is _transport_context(second) is tls.context()


def test_a_client_asked_for_its_own_verification_keeps_it(fresh: None) -> None:
    mine = ssl.create_default_context()
    assert _transport_context(async_client(verify=mine)) is mine
    ignoring_env = async_client(trust_env=False)  # SSL_CERT_FILE ignored: not the shared one
    assert _transport_context(ignoring_env) is not tls.context()


def test_prepare_makes_it_in_its_thread_and_context_waits_for_it(
    fresh: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    made_in: list[str] = []
    real = httpcore2.default_ssl_context

    def recording(**kw: bool) -> ssl.SSLContext:
        made_in.append(threading.current_thread().name)
        return real(**kw)

    monkeypatch.setattr(httpcore2, "default_ssl_context", recording)
    tls.prepare()
    tls.prepare()  # once a process
    first = tls.context()
    assert tls.context() is first
    assert made_in == ["tls-context"]


def test_a_failure_in_the_thread_is_raised_where_the_context_is_needed(
    fresh: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SSL_CERT_FILE", str(tmp_path / "missing.pem"))
    tls.prepare()
    with pytest.raises(OSError):  # as httpx2 would raise it building the client
        tls.context()
