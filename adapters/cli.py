"""The terminal adapter: ``ask`` (one request) and ``chat`` (a loop).

The terminal is one more surface for the shared turn (:mod:`adapters.chat`):
the status goes to stderr, one line per change (so ``--json`` output on
stdout stays machine-readable), and the answer is printed on stdout as the
model writes it.  Files named with ``--file``/``/file`` are the user's own
explicit input; they are size-checked before being read.

Each request is still a durable job (:mod:`core.jobs`), accepted and claimed
like a Discord or Slack one, so turns of a conversation are stored in order
even with a bot process (or another ``ask``) working on the same store; the
command itself stays synchronous.  A terminal request whose ``ask`` died is
not answered by a later one (nobody is there to read it): it is closed, so
it does not hold its conversation up.
"""

from __future__ import annotations

import asyncio
import getpass
import mimetypes
import os
import sys
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TextIO

from adapters import cli_json
from adapters.chat import Limits, Renderer, run_turn
from adapters.chat.messages import ChatCode, error_text
from adapters.chat.render import ERROR_ICON
from core.errors import ErrorCode, InputRejected, RunFailed
from core.types import (
    AgentAPI,
    Attachment,
    ConversationKey,
    Job,
    Notice,
    Reply,
    Request,
    Resource,
)

KIND = "cli"
RENDERER = Renderer(terminal=True)
# The terminal has no message or upload limit; it prints every state at once.
TERMINAL = Limits(
    message_chars=1_000_000, upload_bytes=1 << 62, status_interval=0, answer_in_status=False
)


def conversation_key(name: str) -> ConversationKey:
    return ConversationKey("cli", "local", name, None)


@dataclass(frozen=True, slots=True)
class NamedFile:
    """A file the person named, as their own terminal read it (the CLI
    worker gets files this way: it never reads a path it is sent): its
    bytes, or only its size when that is over the limit, or neither when
    it is not a file."""

    path: str
    size: int | None = None
    data: bytes | None = None


def read_attachment(path: str | NamedFile, max_bytes: int) -> Attachment:
    named = path if isinstance(path, NamedFile) else None
    shown = named.path if named is not None else str(path)
    p = Path(shown).expanduser()
    if named is None:
        size = p.stat().st_size if p.is_file() else None
    else:
        size = len(named.data) if named.data is not None else named.size
    if size is None:
        raise InputRejected(ChatCode.FILE_MISSING, file=shown)
    if size > max_bytes:
        raise InputRejected(ErrorCode.FILE_TOO_LARGE, file=p.name, size=size, limit=max_bytes)
    data = p.read_bytes() if named is None else named.data
    if data is None:  # a size under the limit came without its bytes
        raise InputRejected(ChatCode.FILE_MISSING, file=shown)
    mime = mimetypes.guess_type(p.name)[0] or "application/octet-stream"
    return Attachment(p.name, mime, data)


class TerminalSurface:
    """Status lines on ``err`` (each line once: a log, not an edited
    message); the answer and the files' paths on ``out`` (None: print
    nothing, the caller prints the reply, e.g. as JSON)."""

    def __init__(self, out: TextIO | None, err: TextIO) -> None:
        self.out = out
        self.err = err
        self._printed: set[str] = set()
        self._last = ""

    @property
    def failure(self) -> str | None:
        """The reason of the status's last state when it ended with ❌, else None."""
        for line in self._last.split("\n"):
            if line.startswith(f"{ERROR_ICON} "):
                return line.removeprefix(f"{ERROR_ICON} ")
        return None

    @property
    def limits(self) -> Limits:
        return TERMINAL

    async def post_status(self, text: str) -> None:
        self._print_new(text)

    async def edit_status(self, text: str) -> None:
        self._print_new(text)

    async def post_answer(self, text: str, files: Sequence[Resource]) -> None:
        if self.out is None:
            return
        if text.strip():
            print(text.rstrip(), file=self.out)
        for f in files:
            print(f"  file: {f.handle} → {f.path.resolve()}", file=self.out)
        self.out.flush()

    async def tell_privately(self, text: str) -> None:
        print(text, file=self.err, flush=True)

    def _print_new(self, text: str) -> None:
        self._last = text
        for line in text.split("\n"):
            if line.strip() and line not in self._printed:
                self._printed.add(line)
                print(line, file=self.err, flush=True)


class StreamingTerminal(TerminalSurface):
    """Prints the answer as it comes."""

    def __init__(self, out: TextIO, err: TextIO) -> None:
        super().__init__(out, err)
        self._stream = out
        self._open_line = False

    async def stream_text(self, delta: str) -> None:
        self._stream.write(delta)
        self._stream.flush()
        self._open_line = not delta.endswith("\n")

    async def discard_stream(self) -> None:
        self._end_line()
        # a stream that broke off (the fallback follows) or that the core cut
        # back (a model repeating itself: the answer as kept follows)
        print("[answering] (the answer stopped there; what follows replaces it)", file=self.err)

    async def post_answer(self, text: str, files: Sequence[Resource]) -> None:
        if text.strip():
            self._stream.write(text)
            self._open_line = not text.endswith("\n")
        self._end_line()
        await super().post_answer("", files)

    def _end_line(self) -> None:
        if self._open_line:
            self._stream.write("\n")
            self._stream.flush()
            self._open_line = False


async def ask(
    agent: AgentAPI,
    text: str,
    *,
    files: Sequence[str | NamedFile],
    conversation: str,
    as_json: bool,
    max_bytes: int,
    out: TextIO = sys.stdout,
    err: TextIO = sys.stderr,
    user: str | None = None,
    terminal: Terminal | None = None,
) -> int:
    """Run one request; returns the process exit code (1 when it failed, also
    when the answer is the fallback built without the LLM).  ``user``: who
    asks (this process's user); ``terminal``: the runner to share, where one
    process answers several terminals (the CLI worker)."""
    try:
        attachments = tuple(read_attachment(f, max_bytes) for f in files)
    except InputRejected as e:
        if as_json:
            cli_json.write(cli_json.outcome_json(cli_json.ERROR, error_text(e)), out)
        else:
            print(f"error: {error_text(e)}", file=err)
        return 2
    # The person at the terminal runs the bot: the operator, exempt from quotas.
    request = Request(
        conversation_key(conversation), user or getpass.getuser(), text, attachments, is_admin=True
    )
    surface = TerminalSurface(None, err) if as_json else StreamingTerminal(out, err)
    terminal = terminal or Terminal(agent)
    reply = await terminal.answer(request, surface)
    if reply is None:  # the status said why, unless this process stopped first
        stopped = "stopped before the request was answered"
        if as_json:
            why = stopped if terminal.stopped else surface.failure or "the request was not run"
            status = cli_json.INTERRUPTED if terminal.stopped else cli_json.ERROR
            cli_json.write(cli_json.outcome_json(status, why), out)
        elif terminal.stopped:
            print(f"error: {stopped}", file=err)
        return 1
    if as_json:
        cli_json.write(cli_json.reply_json(reply), out)
    return 1 if reply.error or reply.fallback else 0


class Terminal:
    """Runs this terminal's requests as ``cli`` jobs (the job runner for the kind)."""

    def __init__(self, agent: AgentAPI) -> None:
        self.agent = agent
        self._mine: dict[int, tuple[Request, TerminalSurface]] = {}
        self._replies: dict[int, Reply | None] = {}
        self.stopped = False  # the last request was handed on (this process is stopping)
        agent.register_runner(KIND, self)

    async def answer(self, request: Request, surface: TerminalSurface) -> Reply | None:
        """Accept ``request``, wait for its turn, run it on ``surface``; its
        reply (None if it never ran, or this process stopped first)."""
        accepted = await self.agent.accept(
            KIND,
            request.conversation,
            {"user": request.user_id, "text": request.text},
            request_id=request.request_id,
            upload_bytes=sum(len(a.data) for a in request.attachments),
        )
        self._mine[accepted.job.id] = (request, surface)
        try:
            self.stopped = await self.agent.process(accepted.job.id) != "done"
        finally:
            self._mine.pop(accepted.job.id, None)
        return self._replies.pop(accepted.job.id, None)

    async def run(self, job: Job) -> None:
        mine = self._mine.get(job.id)
        if mine is None:  # left by an `ask` that died: nobody to answer, close it
            return
        request, surface = mine
        self._replies[job.id] = await run_turn(self.agent, surface, RENDERER, request, job=job)

    async def notify(self, job: Job, notice: Notice) -> None:
        mine = self._mine.get(job.id)
        if mine is not None:
            await mine[1].edit_status(RENDERER.notice(notice, TERMINAL.message_chars))

    async def give_up(self, job: Job, failure: RunFailed) -> None:
        return None


class Prompt:
    """Reads the chat's lines from stdin on the event loop, without a thread.

    ``input()`` in a worker thread cannot be interrupted: Ctrl-C cancels the
    chat, but ``asyncio.run`` then waits for that thread, i.e. for Enter.  Here
    the loop watches the descriptor (``add_reader``) and Ctrl-C ends the wait
    at once.  Where the loop cannot watch it (a regular file: reading never
    blocks) it is read directly; where it has no readers (Windows), ``input()``
    in a thread as before.
    """

    def __init__(self, stdin: TextIO = sys.stdin, out: TextIO = sys.stdout) -> None:
        self.stdin = stdin
        self.out = out
        self._buffer = b""
        self._eof = False

    async def __call__(self, prompt: str) -> str:
        """One line without its newline; EOFError at the end of input."""
        try:
            fd = self.stdin.fileno()
        except (AttributeError, OSError, ValueError):  # no real descriptor
            return await asyncio.to_thread(input, prompt)
        print(prompt, end="", file=self.out, flush=True)
        while b"\n" not in self._buffer and not self._eof:
            try:
                await self._readable(fd)
            except NotImplementedError:
                return await asyncio.to_thread(input, "")
            chunk = os.read(fd, 65536)
            self._eof = not chunk
            self._buffer += chunk
        if not self._buffer:
            raise EOFError
        line, _, self._buffer = self._buffer.partition(b"\n")
        return line.decode(self.stdin.encoding or "utf-8", errors="replace")

    @staticmethod
    async def _readable(fd: int) -> None:
        loop = asyncio.get_running_loop()
        ready: asyncio.Future[None] = loop.create_future()

        def wake() -> None:
            if not ready.done():
                ready.set_result(None)

        try:
            loop.add_reader(fd, wake)
        except PermissionError:  # a regular file (epoll refuses): never blocks
            return
        try:
            await ready
        finally:
            loop.remove_reader(fd)


# -- the chat's own commands ---------------------------------------------------


@dataclass(frozen=True, slots=True)
class ChatCommand:
    name: str
    usage: str
    help: str


COMMANDS = (
    ChatCommand("/help", "/help", "list these commands"),
    ChatCommand("/file", "/file PATH", "attach a file to your next message"),
    ChatCommand("/forget", "/forget", "clear this conversation's history"),
    ChatCommand("/quit", "/quit", "leave (also /exit, or Ctrl-D)"),
)
ALIASES = {"/exit": "/quit"}


def help_text() -> str:
    width = max(len(c.usage) for c in COMMANDS)
    lines = ["Commands (never sent to the model):"]
    lines += [f"  {c.usage.ljust(width)}  {c.help}" for c in COMMANDS]
    lines.append("Anything else is a message. Start it with // to send one beginning with /.")
    return "\n".join(lines)


@dataclass(slots=True)
class Chat:
    """The chat loop's state: one conversation, files waiting for a message."""

    agent: AgentAPI
    key: ConversationKey
    max_bytes: int
    out: TextIO
    err: TextIO
    pending: list[Attachment]
    read_file: Callable[[str, int], Attachment] = field(default=read_attachment)

    async def command(self, line: str) -> bool:
        """Handle a line starting with ``/``; False when the chat should end."""
        name, _, arg = line.partition(" ")
        name = ALIASES.get(name.lower(), name.lower())
        arg = arg.strip()
        if name == "/quit":
            return False
        if name == "/help":
            print(help_text(), file=self.err)
        elif name == "/forget":
            n = await self.agent.forget(self.key)
            print(f"forgot {n} messages", file=self.err)
        elif name == "/file" and arg:
            try:
                self.pending.append(self.read_file(arg, self.max_bytes))
                print(f"attached {self.pending[-1].name}", file=self.err)
            except InputRejected as e:
                print(f"error: {error_text(e)}", file=self.err)
        elif name == "/file":
            print("usage: /file PATH", file=self.err)
        else:
            print(f"unknown command {name}: /help lists the commands", file=self.err)
        return True


async def chat(
    agent: AgentAPI,
    *,
    conversation: str,
    max_bytes: int,
    prompt: Callable[[str], Awaitable[str]] | None = None,
    out: TextIO = sys.stdout,
    err: TextIO = sys.stderr,
    user: str | None = None,
    terminal: Terminal | None = None,
    read_file: Callable[[str, int], Attachment] = read_attachment,
) -> int:
    """An interactive loop on one conversation (``/help`` lists its commands).

    Ctrl-D (end of input) or ``/quit`` leaves (0); Ctrl-C stops at once, also
    at the prompt (the caller exits 130).  ``user``, ``terminal``: as for
    :func:`ask`; ``read_file``: how ``/file PATH`` gets the file."""
    print(f"Chatting in conversation '{conversation}'. /help lists the commands.", file=err)
    state = Chat(agent, conversation_key(conversation), max_bytes, out, err, [], read_file)
    prompt = prompt or Prompt(out=out)
    terminal = terminal or Terminal(agent)
    user = user or getpass.getuser()
    while True:
        try:
            line = (await prompt("you> ")).strip()
        except (EOFError, KeyboardInterrupt):
            print(file=err)
            return 0
        except asyncio.CancelledError:  # Ctrl-C at the prompt: end the prompt's line
            print(file=err)
            raise
        if not line:
            continue
        if line.startswith("/") and not line.startswith("//"):
            if not await state.command(line):
                return 0
            continue
        text = line[1:] if line.startswith("//") else line
        request = Request(state.key, user, text, tuple(state.pending), is_admin=True)
        state.pending = []
        await terminal.answer(request, StreamingTerminal(out, err))
