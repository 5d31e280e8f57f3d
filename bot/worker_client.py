"""Hands ``ask`` and ``chat`` to a running ``python -m bot serve`` (docs/cli-worker.md).

Starting a command costs most of a second in imports (the OpenAI SDK,
SQLAlchemy, the Hub client); a worker has them loaded and its agent open.
``python -m bot`` calls :func:`hand_over` before it imports any of that: it
finds the worker's socket the way the settings find the data directory,
checks that the socket is this user's, and shakes hands.  The worker serves
the command only when this process would have run it with the same settings
and the same code (a fingerprint of both); otherwise, or when no worker
listens, :func:`hand_over` says why and the command runs here as before.

Files the person named are read here, with the same size limit, and sent as
bytes: the worker never reads a path it is sent.  Its output comes back in
the order it was written, stdout and stderr, as it is written.

Standard library only at import (python-dotenv and platformdirs, which the
settings use themselves, only when there is a ``.env`` or no ``DATA_DIR``).
"""

from __future__ import annotations

import argparse
import getpass
import hashlib
import json
import os
import signal
import socket
import stat
import struct
import sys
import threading
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import BinaryIO, TextIO

from bot import worker_protocol as wire

APP_NAME = "hugginggpt-bot"  # bot.settings.APP_NAME
SOCKET_NAME = "cli.sock"
HANDSHAKE_TIMEOUT = 5.0  # a worker answers at once; one that does not is passed by
ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("bot", "core", "adapters", "migrations")


# -- where the worker is, and whether it runs what this process would ---------


@dataclass(frozen=True, slots=True)
class Origin:
    """What this process's settings come from: the environment, ``./.env``
    (as pydantic-settings reads it, relative to the working directory) and
    the working directory itself (relative paths in the settings)."""

    cwd: str
    environ: Mapping[str, str]
    dotenv: bytes | None
    _dotenv_values: dict[str, str] = field(default_factory=dict)

    @classmethod
    def here(cls) -> Origin:
        cwd = os.getcwd()
        try:
            dotenv = Path(cwd, ".env").read_bytes()
        except OSError:
            dotenv = None
        values: dict[str, str] = {}
        if dotenv is not None:
            import io

            from dotenv import dotenv_values  # the parser pydantic-settings uses

            parsed = dotenv_values(stream=io.StringIO(dotenv.decode("utf-8")))
            values = {k.upper(): v for k, v in parsed.items() if v}
        return cls(cwd, dict(os.environ), dotenv, values)

    def setting(self, name: str) -> str | None:
        """A variable as the settings read it: the environment first, then
        ``.env``; empty means unset (``env_ignore_empty``)."""
        for key, value in self.environ.items():
            if key.upper() == name and value:
                return value
        return self._dotenv_values.get(name)


def data_dir(origin: Origin) -> Path:
    """``Settings.data_dir``: DATA_DIR, else an earlier version's ``./data``,
    else the per-user data directory."""
    if explicit := origin.setting("DATA_DIR"):
        return Path(explicit).expanduser()
    legacy = Path(origin.cwd) / "data"
    if (legacy / "bot.db").is_file() or (legacy / "media").is_dir():
        return legacy
    import platformdirs

    return Path(platformdirs.user_data_dir(APP_NAME, appauthor=False))


def socket_path(origin: Origin) -> Path:
    """CLI_SOCKET, else ``cli.sock`` in the data directory."""
    if explicit := origin.setting("CLI_SOCKET"):
        return Path(explicit).expanduser()
    return data_dir(origin) / SOCKET_NAME


def settings_fingerprint(origin: Origin, names: Iterable[str], prefixes: Iterable[str]) -> str:
    """A hash of everything the settings are made of: the named variables
    (and those with the prefixes) in the environment, ``./.env`` and the
    working directory."""
    wanted, starts = {n.upper() for n in names}, tuple(p.upper() for p in prefixes)
    env = sorted(
        (k, v)
        for k, v in origin.environ.items()
        if k.upper() in wanted or k.upper().startswith(starts)
    )
    dotenv = hashlib.sha256(origin.dotenv).hexdigest() if origin.dotenv is not None else None
    text = json.dumps([origin.cwd, dotenv, env])
    return hashlib.sha256(text.encode()).hexdigest()


def code_version() -> str:
    """A hash that changes with the code: the project's files (path, size,
    modification time), the interpreter, and its site-packages directories
    (a package installed or upgraded)."""
    h = hashlib.sha256(f"{sys.executable}\0{sys.version}\0{ROOT}".encode())
    for package in PACKAGES:
        for top, dirs, files in os.walk(ROOT / package):
            dirs[:] = sorted(d for d in dirs if d != "__pycache__")
            for name in sorted(files):
                st = os.stat(os.path.join(top, name))
                h.update(f"{top}/{name}\0{st.st_size}\0{st.st_mtime_ns}\0".encode())
    for entry in sys.path:
        if entry.endswith("site-packages") and os.path.isdir(entry):
            h.update(f"{entry}\0{os.stat(entry).st_mtime_ns}\0".encode())
    return h.hexdigest()


def fingerprint(settings: str, code: str) -> str:
    return f"{settings}:{code}"


# -- trust ----------------------------------------------------------------------


def socket_refusal(st: os.stat_result, uid: int) -> str | None:
    """Why a socket file is not to be trusted with this user's request, or None."""
    if not stat.S_ISSOCK(st.st_mode):
        return "it is not a socket"
    if st.st_uid != uid:
        return f"it belongs to uid {st.st_uid}, not {uid}"
    if stat.S_IMODE(st.st_mode) & 0o077:
        return f"other users may use it (mode {stat.S_IMODE(st.st_mode):04o})"
    return None


def peer_uid(sock: socket.socket) -> int | None:
    """The uid of the process at the other end (Linux: SO_PEERCRED), else None."""
    option = getattr(socket, "SO_PEERCRED", None)
    if option is None:
        return None
    _pid, uid, _gid = struct.unpack("3i", sock.getsockopt(socket.SOL_SOCKET, option, 12))
    return int(uid)


# -- the command ------------------------------------------------------------------


class _Stopped(Exception):
    """SIGTERM while the worker ran the command."""


@dataclass(slots=True)
class _Session:
    sock: socket.socket
    reader: BinaryIO
    path: Path
    pid: int = 0
    max_bytes: int = 0  # MAX_ATTACHMENT_BYTES of the worker (the same settings as here)
    at_prompt: bool = False

    def send(self, message: wire.Message) -> None:
        self.sock.sendall(wire.encode(message))

    def receive(self) -> wire.Message | None:
        line = self.reader.readline()
        # from the worker this user runs (its uid checked): shapes only, no pydantic here
        return wire.unchecked(line) if line else None


def hand_over(args: argparse.Namespace) -> int | str:
    """Run ``ask`` or ``chat`` in the CLI worker and return its exit code; or,
    when no worker serves this process's settings and code, why not (the
    caller runs the command itself).  Once the command has been sent, a
    worker that stops is an error here (one line, exit 1)."""
    if not hasattr(socket, "AF_UNIX") or not hasattr(os, "getuid"):
        return "no CLI worker on this platform (it needs Unix sockets)"
    try:
        origin = Origin.here()
        path = socket_path(origin)
    except (OSError, ValueError) as e:  # an unreadable .env: the settings will say
        return f"no CLI worker looked for ({e})"
    try:
        st = os.stat(path)
    except OSError:
        return f"no CLI worker at {path}"
    if (refused := socket_refusal(st, os.getuid())) is not None:
        return f"not using the CLI worker socket {path}: {refused}"
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    with sock:
        try:
            session = _handshake(sock, path, origin)
            if isinstance(session, str):
                return session
            files = [_read(f, session.max_bytes) for f in getattr(args, "file", [])]
            user = getpass.getuser()
            command: wire.Message
            if args.command == "ask":
                command = wire.Ask(args.text, args.conversation, args.json, user)
            else:
                command = wire.Chat(args.conversation, user)
            sock.sendall(b"".join(wire.encode(m) for m in (*files, command)))
        except (OSError, wire.ProtocolError) as e:
            return f"the CLI worker at {path} did not take the command ({e})"
        sock.settimeout(None)
        return _run(session, args.command == "chat", bool(getattr(args, "json", False)))


def _handshake(sock: socket.socket, path: Path, origin: Origin) -> _Session | str:
    sock.settimeout(HANDSHAKE_TIMEOUT)
    try:
        sock.connect(str(path))
    except OSError as e:
        return f"no CLI worker listening at {path} ({e.strerror or e})"
    uid = peer_uid(sock)
    if uid is not None and uid != os.getuid():
        return f"not using the CLI worker at {path}: it runs as uid {uid}"
    session = _Session(sock, sock.makefile("rb"), path)
    hello = session.receive()
    if not isinstance(hello, wire.Hello) or hello.protocol != wire.PROTOCOL:
        return f"the CLI worker at {path} speaks another protocol"
    session.pid = hello.pid
    mine = fingerprint(settings_fingerprint(origin, hello.names, hello.prefixes), code_version())
    session.send(wire.Handshake(mine))
    welcome = session.receive()
    if not isinstance(welcome, wire.Welcome):
        return f"the CLI worker at {path} did not answer the handshake"
    if not welcome.ok:
        return f"not using the CLI worker at {path} (pid {hello.pid}): {welcome.reason}"
    session.max_bytes = welcome.max_bytes
    return session


def _read(path: str, max_bytes: int) -> wire.SentFile:
    """A file the person named, as ``adapters.cli.read_attachment`` would read it."""
    p = Path(path).expanduser()
    if not p.is_file():
        return wire.SentFile.of(path, None, None)
    size = p.stat().st_size
    if size > max_bytes:
        return wire.SentFile.of(path, size, None)
    data = p.read_bytes()  # OSError (unreadable): the command runs here and says so
    return wire.SentFile.of(path, len(data), data)


def _run(session: _Session, chat: bool, as_json: bool = False) -> int:
    """Relay the command's output until its exit code; Ctrl-C and SIGTERM
    leave (the worker stops the request) with 130 and 143.  ``as_json``
    (``ask --json``): a failure of its own is said as the JSON object too."""

    def stop(signum: int, frame: FrameType | None) -> None:
        raise _Stopped

    previous = signal.signal(signal.SIGTERM, stop)
    try:
        if chat:
            threading.Thread(target=_send_input, args=(session,), daemon=True).start()
        return _relay(session, sys.stdout, sys.stderr, as_json)
    except KeyboardInterrupt:
        if session.at_prompt:  # as the chat does: end the prompt's line
            print(file=sys.stderr)
        if as_json:
            _outcome("interrupted", "stopped by Ctrl-C before the answer", sys.stdout)
        return 130
    except _Stopped:
        if as_json:
            _outcome("interrupted", "stopped by SIGTERM before the answer", sys.stdout)
        return 143
    except BrokenPipeError:  # stdout closed (`| head`): nobody reads the rest
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1
    finally:
        signal.signal(signal.SIGTERM, previous)


def _outcome(status: str, message: str, out: TextIO) -> None:
    """``ask --json``'s object for an outcome with no reply."""
    from adapters import cli_json  # standard library only; loaded on this path alone

    cli_json.write(cli_json.outcome_json(status, message), out)


def _relay(session: _Session, out: TextIO, err: TextIO, as_json: bool = False) -> int:
    while True:
        try:
            message = session.receive()
        except (OSError, wire.ProtocolError):
            message = None
        if message is None:
            why = (
                f"the CLI worker (pid {session.pid}) stopped before the command finished; "
                "run it again"
            )
            if as_json:
                _outcome("error", why, out)
            else:
                print(f"error: {why}", file=err, flush=True)
            return 1
        if isinstance(message, wire.Exit):
            return message.code
        if isinstance(message, wire.Output):
            stream = out if message.stream == "out" else err
            stream.write(message.text)
            stream.flush()
            session.at_prompt = False
        elif isinstance(message, wire.Prompt):
            out.write(message.text)
            out.flush()
            session.at_prompt = True


def _send_input(session: _Session) -> None:
    """The chat's input, line by line, as ``adapters.cli.Prompt`` reads it;
    a ``/file PATH`` line is preceded by the file (read here)."""
    encoding = getattr(sys.stdin, "encoding", None) or "utf-8"
    try:
        for raw in _stdin_lines():
            text = raw.decode(encoding, errors="replace")
            if (path := _file_command(text)) is not None:
                try:
                    named = _read(path, session.max_bytes)
                except OSError:  # unreadable: the chat says there is no such file
                    named = wire.SentFile.of(path, None, None)
                session.send(named)
            session.send(wire.Line(text))
        session.send(wire.EndOfInput())
    except OSError:  # the worker is gone: the relay says so
        return


def _stdin_lines() -> Iterator[bytes]:
    """Standard input's lines without their newlines (the last one also
    without); it ends where reading fails.  Read with ``os.read``: a thread
    blocked in a buffered ``readline`` would hold the buffer's lock when the
    interpreter exits."""
    try:
        fd = sys.stdin.fileno()
    except (AttributeError, OSError, ValueError):  # no standard input
        return
    buffer = b""
    while True:
        try:
            chunk = os.read(fd, 65536)
        except OSError:
            chunk = b""
        if not chunk:
            break
        buffer += chunk
        *lines, buffer = buffer.split(b"\n")
        yield from lines
    if buffer:
        yield buffer


def _file_command(text: str) -> str | None:
    """The path of a chat line ``/file PATH`` (as ``adapters.cli.Chat`` parses it)."""
    line = text.strip()
    if not line.startswith("/") or line.startswith("//"):
        return None
    name, _, arg = line.partition(" ")
    return arg.strip() if name.lower() == "/file" and arg.strip() else None
