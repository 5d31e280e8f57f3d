"""``python -m bot serve``: the resident worker that ``ask`` and ``chat`` hand
their commands to (docs/cli-worker.md).

The worker opens the agent once, as ``ask`` does, and listens on a Unix
socket (``DATA_DIR/cli.sock``, or ``CLI_SOCKET``) that only its user can
open.  Each connection is one command (:mod:`bot.worker_protocol`): the
worker runs it with the terminal adapter's own code (:mod:`adapters.cli`),
its stdout and stderr sent back as they are written, so the person sees
what ``ask`` run in its own process would print.  A command whose person
leaves (Ctrl-C, a killed ``ask``) is stopped and its job closed, as a dead
``ask``'s job is.

It exits after ``CLI_WORKER_IDLE`` seconds without a command, when its code
changes (the next ``ask`` would not use it), and on SIGTERM or Ctrl-C, as
``run`` does: running commands are let finish (SHUTDOWN_GRACE).
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import logging
import os
import socket
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from adapters import cli, cli_json
from bot import heap, logs, worker_client
from bot import worker_protocol as wire
from bot.app import llm_key, open_agent
from bot.lifecycle import Lifecycle
from bot.settings import Settings, env_names
from core.errors import BotError, ConfigError
from core.types import REPLY_ADAPTER, AgentAPI, Attachment, Job, Reply, Request

log = logging.getLogger("bot.worker")

# Besides the settings' own variables, what changes a request's course:
# the SDKs' and the Hub client's variables (read at import), proxies and
# certificates (httpx reads them), local inference's libraries.
PREFIXES = (
    *("HF_", "HUGGINGFACE_", "OPENAI_", "OTEL_"),
    *("TRANSFORMERS_", "DIFFUSERS_", "TORCH", "PYTORCH_", "CUDA_"),
)
NAMES = (
    *("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY"),
    *("SSL_CERT_FILE", "SSL_CERT_DIR", "REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE"),
)
# Where the worker listens and how long it waits do not change a request.
NOT_COMPARED = frozenset({"CLI_SOCKET", "CLI_WORKER_IDLE"})
STOP_WAIT = 5.0  # seconds a command whose request ended (a shutdown) gets to say so


def setting_names() -> list[str]:
    """The environment variables the settings read (legacy names too)."""
    return sorted({*NAMES, *env_names()} - NOT_COMPARED)


def socket_path(settings: Settings) -> Path:
    """Where the worker listens (:func:`bot.worker_client.socket_path` finds the same)."""
    return (
        settings.process.cli_socket or settings.store.data_path / worker_client.SOCKET_NAME
    ).expanduser()


# -- one connection --------------------------------------------------------------


class _Client:
    """The CLI at the other end: messages to it, and whether it left."""

    def __init__(self, writer: asyncio.StreamWriter) -> None:
        self.writer = writer
        self.gone = asyncio.Event()
        self.at_prompt = False  # a chat waiting for the person: nothing of theirs runs

    def send(self, message: wire.Message) -> None:
        if not self.gone.is_set() and not self.writer.is_closing():
            self.writer.write(wire.encode(message))

    def stream(self, name: Literal["out", "err"]) -> _Stream:
        return _Stream(self, name)


# The CLI whose command the current task works on (its log lines go to the log file).
_client: ContextVar[_Client | None] = ContextVar("cli_worker_client", default=None)


class _CommandsOnly(logging.Filter):
    """The records written while a CLI's command runs (its task and the
    tasks and threads it starts)."""

    def filter(self, record: logging.LogRecord) -> bool:
        return _client.get() is not None


@contextmanager
def _logs_to_clients(settings: Settings) -> Iterator[None]:
    """The log lines of the commands it runs go where ``ask`` and ``chat``
    in their own process write theirs: the terminal's log file, not the
    person's terminal (bot.logs).  They are in the worker's own log too."""
    handler = logs.file_handler(settings, settings.process.log_level or "INFO")
    if handler is None:  # not writable: the worker's own log has them
        yield
        return
    handler.addFilter(_CommandsOnly())
    root = logging.getLogger()
    root.addHandler(handler)
    try:
        yield
    finally:
        root.removeHandler(handler)
        handler.close()


class _Stream(io.StringIO):
    """The CLI's stdout or stderr: each write is sent as it is made."""

    def __init__(self, client: _Client, name: Literal["out", "err"]) -> None:
        super().__init__()
        self.client = client
        self.stream_name: Literal["out", "err"] = name

    def write(self, s: str) -> int:
        if s:
            self.client.send(wire.Output(self.stream_name, s))
        return len(s)


@dataclass(slots=True)
class _ChatInput:
    """What a chat's CLI sent: its lines (None: end of input), and the files
    of its ``/file`` lines, sent just before them."""

    lines: asyncio.Queue[str | None] = field(default_factory=asyncio.Queue)
    files: list[cli.NamedFile] = field(default_factory=list)

    def take(self, path: str) -> cli.NamedFile:
        for i, f in enumerate(self.files):
            if f.path == path:
                return self.files.pop(i)
        return cli.NamedFile(path)  # not sent: not a file

    async def prompt(self, client: _Client, text: str) -> str:
        client.send(wire.Prompt(text))
        client.at_prompt = True
        try:
            line = await self.lines.get()
        finally:
            client.at_prompt = False
        if line is None:
            raise EOFError
        return line


class WorkerTerminal(cli.Terminal):
    """The terminal runner shared by every connection; a turn whose person
    left is stopped (its job is then closed, like a dead ``ask``'s)."""

    def __init__(self, agent: AgentAPI) -> None:
        super().__init__(agent)
        self._clients: dict[str, _Client] = {}

    async def answer(self, request: Request, surface: cli.TerminalSurface) -> Reply | None:
        if isinstance(surface.err, _Stream):
            self._clients[request.request_id] = surface.err.client
        try:
            return await super().answer(request, surface)
        finally:
            self._clients.pop(request.request_id, None)

    async def run(self, job: Job) -> None:
        client = self._clients.get(job.request_id)
        if client is None:
            return await super().run(job)
        _client.set(client)  # this job's task: its log lines go to the terminal too
        turn = asyncio.ensure_future(super().run(job))
        left = asyncio.ensure_future(client.gone.wait())
        try:
            await asyncio.wait({turn, left}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            left.cancel()
            if not turn.done():  # the person left (or this process is stopping)
                turn.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await turn
        if turn.cancelled():
            log.info("request %s: its terminal left; stopped", job.request_id)
            return None
        return turn.result()


# -- the worker ----------------------------------------------------------------------


class Worker:
    """Serves the CLI's connections with one agent (see the module docstring)."""

    def __init__(
        self,
        agent: AgentAPI,
        settings: Settings,
        *,
        fingerprint: tuple[str, str],
        describe: Callable[[BotError], tuple[int, str]],
    ) -> None:
        self.agent = agent
        self.settings = settings
        self.terminal = WorkerTerminal(agent)
        self.names = setting_names()
        self.settings_hash, self.code = fingerprint
        self.describe = describe
        self.idle = settings.process.cli_worker_idle
        self._handlers: dict[asyncio.Task[Any], _Client] = {}
        self._changed = asyncio.Event()
        self._last = asyncio.get_running_loop().time()
        self._retire = False

    # -- life ---------------------------------------------------------------------
    async def wait(self) -> None:
        """Until no command came for ``idle`` seconds, or the code changed
        and the running commands ended."""
        loop = asyncio.get_running_loop()
        while True:
            self._changed.clear()
            timeout: float | None = None
            if not self._handlers:
                if self._retire:
                    log.warning("the bot's code changed since the CLI worker started: stopping")
                    return
                if self.idle > 0:
                    timeout = self._last + self.idle - loop.time()
                    if timeout <= 0:
                        log.info("CLI worker: no command for %gs; stopping", self.idle)
                        return
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._changed.wait(), timeout)

    async def finish(self, grace: float) -> None:
        """Let the running commands end (``grace`` seconds), then stop them;
        a chat waiting at its prompt is stopped at once."""
        running = {t for t, client in self._handlers.items() if not client.at_prompt}
        if running:
            await asyncio.wait(running, timeout=grace)
        stopping = list(self._handlers)
        for task in stopping:
            task.cancel()
        await asyncio.gather(*stopping, return_exceptions=True)

    # -- a connection ------------------------------------------------------------
    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        client = _Client(writer)
        self._handlers[task] = client
        self._changed.set()
        try:
            await self._serve(reader, client)
        except (ConnectionError, ValueError, wire.ProtocolError) as e:  # ValueError: too long
            log.info("CLI worker: a connection ended: %s", e)
        finally:
            client.gone.set()
            writer.close()
            with contextlib.suppress(ConnectionError):
                await writer.wait_closed()
            self._handlers.pop(task, None)
            self._last = asyncio.get_running_loop().time()
            self._changed.set()

    async def _serve(self, reader: asyncio.StreamReader, client: _Client) -> None:
        sock = client.writer.get_extra_info("socket")
        uid = worker_client.peer_uid(sock) if sock is not None else None
        if uid is not None and uid != os.getuid():
            log.warning("CLI worker: refused a connection from uid %d", uid)
            return
        _client.set(client)  # this connection's task: its log lines go to the terminal too
        client.send(wire.Hello(wire.PROTOCOL, os.getpid(), self.names, list(PREFIXES)))
        handshake = await _receive(reader)
        if not isinstance(handshake, wire.Handshake):
            return
        problem = self._mismatch(handshake.fingerprint)
        client.send(
            wire.Welcome(problem is None, problem or "", self.settings.input.max_attachment_bytes)
        )
        if problem is not None:
            return
        received = await _command(reader)
        if received is None:
            return
        message, files = received
        chat_input = _ChatInput()
        if isinstance(message, wire.Ask):
            command = self._ask(message, files, client)
        else:
            command = self._chat(message, client, chat_input)
        as_json = isinstance(message, wire.Ask) and message.as_json
        work = asyncio.ensure_future(self._guarded(command, client, as_json))
        watch = asyncio.ensure_future(_watch(reader, chat_input))
        try:
            await asyncio.wait({work, watch}, return_when=asyncio.FIRST_COMPLETED)
            if work.done():
                code = work.result()
                log.info("CLI worker: %s ended (exit %d)", message.type, code)
                client.send(wire.Exit(code))
            else:  # the CLI left: stop its command
                log.info("CLI worker: the %s command's terminal left", message.type)
        finally:
            client.gone.set()
            for t in (work, watch):
                t.cancel()
            await asyncio.gather(work, watch, return_exceptions=True)

    def _mismatch(self, theirs: str) -> str | None:
        settings, _, code = theirs.partition(":")
        if code != self.code:
            if worker_client.code_version() != self.code:
                self._retire = True  # edited or upgraded since: no CLI will match again
                self._changed.set()
            return "it runs another version of the code (restart it: python -m bot serve)"
        if settings != self.settings_hash:
            return "it was started with other settings (environment, .env or directory)"
        return None

    async def _guarded(self, command: Awaitable[int], client: _Client, as_json: bool) -> int:
        """The command's exit code; the project's errors in one line, as
        ``python -m bot`` says them (``ask --json``: as its JSON object)."""
        try:
            return await command
        except BotError as e:
            code, line = self.describe(e)
        except Exception:
            log.exception("CLI worker: the command failed")
            code, line = 1, "error: the CLI worker failed; its log says why"
        if as_json:
            outcome = cli_json.outcome_json(cli_json.ERROR, cli_json.error_message(line))
            client.send(wire.Output("out", cli_json.line(outcome)))
        else:
            client.send(wire.Output("err", line + "\n"))
        return code

    async def _ask(self, ask: wire.Ask, files: list[cli.NamedFile], client: _Client) -> int:
        return await cli.ask(
            self.agent,
            ask.text,
            files=files,
            conversation=ask.conversation,
            as_json=ask.as_json,
            max_bytes=self.settings.input.max_attachment_bytes,
            out=client.stream("out"),
            err=client.stream("err"),
            user=ask.user,
            terminal=self.terminal,
        )

    async def _chat(self, chat: wire.Chat, client: _Client, chat_input: _ChatInput) -> int:
        def read_file(path: str, max_bytes: int) -> Attachment:
            return cli.read_attachment(chat_input.take(path), max_bytes)

        async def prompt(text: str) -> str:
            return await chat_input.prompt(client, text)

        return await cli.chat(
            self.agent,
            conversation=chat.conversation,
            max_bytes=self.settings.input.max_attachment_bytes,
            prompt=prompt,
            out=client.stream("out"),
            err=client.stream("err"),
            user=chat.user,
            terminal=self.terminal,
            read_file=read_file,
        )


async def _receive(reader: asyncio.StreamReader) -> wire.Message | None:
    """The next message; None when the CLI closed the connection."""
    line = await reader.readline()
    return wire.decode(line) if line else None


async def _command(
    reader: asyncio.StreamReader,
) -> tuple[wire.Ask | wire.Chat, list[cli.NamedFile]] | None:
    """The command and the files sent before it; None when the CLI left."""
    files: list[cli.NamedFile] = []
    while (message := await _receive(reader)) is not None:
        if isinstance(message, wire.Ask | wire.Chat):
            return message, files
        if not isinstance(message, wire.SentFile):
            raise wire.ProtocolError(f"{message.type} before the command")
        files.append(cli.NamedFile(message.path, message.size, message.content()))
    return None


async def _watch(reader: asyncio.StreamReader, chat_input: _ChatInput) -> None:
    """Read the CLI's input until it leaves (the connection closes)."""
    while (message := await _receive(reader)) is not None:
        if isinstance(message, wire.Line):
            chat_input.lines.put_nowait(message.text)
        elif isinstance(message, wire.EndOfInput):
            chat_input.lines.put_nowait(None)
        elif isinstance(message, wire.SentFile):
            chat_input.files.append(cli.NamedFile(message.path, message.size, message.content()))
        else:
            raise wire.ProtocolError(f"{message.type} during a command")


# -- the socket ---------------------------------------------------------------------


@contextmanager
def _only_worker(path: Path) -> Iterator[None]:
    """Hold ``PATH.lock`` while serving: a second worker on the same socket
    is refused (BotError), and a socket file left behind is known stale."""
    import fcntl  # Unix only, as the socket is

    lock = path.with_name(path.name + ".lock")
    fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            pid = os.pread(fd, 32, 0).decode(errors="replace").strip() or "?"
            raise BotError(
                f"a CLI worker (pid {pid}) is already serving at {path}; stop it first (kill {pid})"
            ) from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, str(os.getpid()).encode(), 0)
        yield
    finally:
        os.close(fd)  # releases the lock


def _bind(path: Path) -> socket.socket:
    """A listening socket at ``path`` that only this user can open (0600)."""
    if path.exists() or path.is_symlink():
        probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        with probe:
            try:
                probe.connect(str(path))
            except OSError:
                pass
            else:  # something else listens there, not a worker of ours
                raise BotError(f"another process listens at {path}: set CLI_SOCKET elsewhere")
        log.info("removing a stale CLI worker socket at %s", path)
        path.unlink()
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    old = os.umask(0o177)  # the socket is created 0600: no moment others could connect
    try:
        sock.bind(str(path))
    except OSError as e:
        sock.close()
        raise BotError(f"cannot listen at {path} ({e}): set CLI_SOCKET to a short path") from None
    finally:
        os.umask(old)
    os.chmod(path, 0o600)
    return sock


@asynccontextmanager
async def _listening(path: Path, worker: Worker) -> AsyncIterator[asyncio.Server]:
    sock = _bind(path)
    inode = os.stat(path).st_ino
    # a line holds at most one file, base64-encoded
    limit = worker.settings.input.max_attachment_bytes * 4 // 3 + 65536
    server = await asyncio.start_unix_server(worker.handle, sock=sock, limit=limit)
    try:
        yield server
    finally:
        server.close()
        with contextlib.suppress(FileNotFoundError):
            if os.stat(path).st_ino == inode:  # still ours
                os.unlink(path)


async def serve(
    settings: Settings, lifecycle: Lifecycle, describe: Callable[[BotError], tuple[int, str]]
) -> int:
    """``python -m bot serve`` (see the module docstring); ``describe``: the
    exit code and line ``python -m bot`` gives for one of the project's errors."""
    llm_key(settings)  # fail first, in one line, when no LLM is configured
    if not hasattr(socket, "AF_UNIX"):
        raise ConfigError("python -m bot serve needs Unix sockets (Linux, macOS)")
    path = socket_path(settings)
    path.parent.mkdir(parents=True, exist_ok=True)
    code = worker_client.code_version()
    with _only_worker(path), _logs_to_clients(settings):
        async with open_agent(settings) as agent:
            agent.warm_up()  # codecs and the first hosted session, before the first ask
            wire.prepare()  # the message checker too,
            REPLY_ADAPTER.rebuild()  # and `ask --json`'s reply JSON
            heap.settle()  # start-up's objects out of the collector's way (bot/heap.py)
            origin = worker_client.Origin.here()
            worker = Worker(
                agent,
                settings,
                fingerprint=(
                    worker_client.settings_fingerprint(origin, setting_names(), PREFIXES),
                    code,
                ),
                describe=describe,
            )
            async with _listening(path, worker) as server:

                async def stop() -> None:  # SIGTERM: as `run`, let running commands finish
                    server.close()
                    running = agent.begin_shutdown()
                    log.info("CLI worker stopping: finishing %d running request(s)", running)
                    if not await agent.drain(settings.process.shutdown_grace):
                        await agent.interrupt()
                    await worker.finish(STOP_WAIT)

                lifecycle.before_stop(stop)
                idle = (
                    f"{settings.process.cli_worker_idle:g}s"
                    if settings.process.cli_worker_idle
                    else "never"
                )
                log.info(
                    "CLI worker listening on %s (pid %d; stops when idle for %s)",
                    path.absolute(),
                    os.getpid(),
                    idle,
                )
                try:
                    await worker.wait()
                finally:  # idle, or stopped: stop what still runs (nothing, but on Ctrl-C)
                    server.close()
                    await worker.finish(0)
    return 0
