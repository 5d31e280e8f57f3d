"""The TLS context of the SDKs' HTTP clients, built once a process.

Every ``httpx2`` client built with ``verify=True`` makes its own context:
httpcore's default, which reads the CA bundle (``SSL_CERT_FILE`` /
``SSL_CERT_DIR`` when set, else OpenSSL's own) — tens of milliseconds of
parsing certificates, on a cold ``ask``'s critical path (docs/speed.md).
:func:`context` is that same context, made once and shared by every client
:func:`core.http_client.async_client` builds (a context is read-only once
made; clients share it safely).

:func:`prepare` starts making it in a thread, as a process that will open the
agent starts (``python -m bot`` run, serve, ask, chat): OpenSSL parses the
bundle without holding the interpreter lock, so on a second core it overlaps
the imports that follow instead of running after them.  Nothing else runs
in that thread, and it imports nothing (its modules are imported first, here).
"""

from __future__ import annotations

import contextlib
import ssl
import threading

_lock = threading.Lock()
_made: ssl.SSLContext | None = None
_making: threading.Thread | None = None


def _make() -> None:
    global _made
    import httpcore2

    made = httpcore2.default_ssl_context(_trust_env=True)  # httpx2's verify=True
    with _lock:
        if _made is None:
            _made = made


def _make_quietly() -> None:
    with contextlib.suppress(Exception):  # context() makes it again, and raises it there
        _make()


def prepare() -> None:
    """Start making :func:`context` in a daemon thread (once; no-op if made)."""
    global _making
    import httpcore2  # noqa: F401  (imported here, never in the thread)

    with _lock:
        if _made is not None or _making is not None:
            return
        _making = threading.Thread(target=_make_quietly, name="tls-context", daemon=True)
        _making.start()


def context() -> ssl.SSLContext:
    """httpx2's default TLS context (``verify=True``, ``trust_env=True``),
    the same object every call: waits for :func:`prepare`'s thread, or
    makes it here."""
    thread = _making
    if thread is not None:
        thread.join()
    if _made is None:
        _make()
    assert _made is not None
    return _made
