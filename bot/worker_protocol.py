"""The CLI worker's wire protocol: JSON lines on a Unix socket, one command
per connection (docs/cli-worker.md).

::

    worker → CLI   Hello        who it is, and which variables its settings came from
    CLI → worker   Handshake    the fingerprint of the CLI's settings and code
    worker → CLI   Welcome      ok (same fingerprint), or why not: the CLI runs it itself
    CLI → worker   SentFile…    each file the person named, read by the CLI
    CLI → worker   Ask | Chat   the command
    worker → CLI   Output…      text for stdout or stderr, in the order it was written
                   Prompt       (chat) the prompt; the CLI answers with Line or EndOfInput
    worker → CLI   Exit         the command's exit code; the connection ends

Each message is one line: a JSON object whose ``type`` names the class.
Standard library only: ``python -m bot`` imports it before anything heavy.
"""

from __future__ import annotations

import base64
import json
from dataclasses import asdict, dataclass, fields
from typing import Any, ClassVar

PROTOCOL = 1


@dataclass(frozen=True, slots=True)
class Hello:
    type: ClassVar[str] = "hello"
    protocol: int
    pid: int
    # Environment variables (by name, and by prefix) the worker's settings
    # depend on: the CLI hashes its own values of them for the handshake.
    names: list[str]
    prefixes: list[str]


@dataclass(frozen=True, slots=True)
class Handshake:
    type: ClassVar[str] = "handshake"
    fingerprint: str


@dataclass(frozen=True, slots=True)
class Welcome:
    type: ClassVar[str] = "welcome"
    ok: bool
    reason: str  # why not, when not ok
    max_bytes: int  # MAX_ATTACHMENT_BYTES: larger files are sent by size only


@dataclass(frozen=True, slots=True)
class SentFile:
    """A file the person named (``--file``, ``/file``) as the CLI found it:
    its bytes (base64), or only its size when it is over ``max_bytes``, or
    neither when it is not a file.  The worker never reads ``path``."""

    type: ClassVar[str] = "file"
    path: str
    size: int | None
    data: str | None

    @classmethod
    def of(cls, path: str, size: int | None, data: bytes | None) -> SentFile:
        return cls(path, size, None if data is None else base64.b64encode(data).decode("ascii"))

    def content(self) -> bytes | None:
        return None if self.data is None else base64.b64decode(self.data, validate=True)


@dataclass(frozen=True, slots=True)
class Ask:
    """``python -m bot ask``; its files are the SentFile messages before it."""

    type: ClassVar[str] = "ask"
    text: str
    conversation: str
    as_json: bool
    user: str


@dataclass(frozen=True, slots=True)
class Chat:
    type: ClassVar[str] = "chat"
    conversation: str
    user: str


@dataclass(frozen=True, slots=True)
class Line:
    """A line the person typed in the chat (without its newline)."""

    type: ClassVar[str] = "line"
    text: str


@dataclass(frozen=True, slots=True)
class EndOfInput:
    type: ClassVar[str] = "eof"


@dataclass(frozen=True, slots=True)
class Output:
    type: ClassVar[str] = "output"
    stream: str  # "out" or "err"
    text: str


@dataclass(frozen=True, slots=True)
class Prompt:
    type: ClassVar[str] = "prompt"
    text: str


@dataclass(frozen=True, slots=True)
class Exit:
    type: ClassVar[str] = "exit"
    code: int


Message = (
    Hello | Handshake | Welcome | SentFile | Ask | Chat | Line | EndOfInput | Output | Prompt | Exit
)
TYPES: dict[str, type[Message]] = {
    cls.type: cls
    for cls in (
        Hello, Handshake, Welcome, SentFile, Ask, Chat, Line, EndOfInput, Output, Prompt, Exit
    )
}  # fmt: skip


class ProtocolError(Exception):
    """A line that is not a message of this protocol."""


def encode(message: Message) -> bytes:
    return json.dumps({"type": message.type, **asdict(message)}).encode() + b"\n"


def raw(line: bytes) -> tuple[type[Message], dict[str, Any]]:
    """The message class a line names, and its fields as sent (unchecked)."""
    try:
        data = json.loads(line)
        cls = TYPES[data.pop("type")]
    except (ValueError, KeyError, TypeError, AttributeError) as e:
        raise ProtocolError(f"not a message: {line[:80]!r}") from e
    return cls, data


# What each annotation of the messages above accepts (the worker's side checks
# with pydantic instead; the CLI runs before pydantic is imported).
_ACCEPTS: dict[str, tuple[type, ...]] = {
    "int": (int,),
    "str": (str,),
    "bool": (bool,),
    "int | None": (int, type(None)),
    "str | None": (str, type(None)),
    "list[str]": (list,),
}


def decode(line: bytes) -> Message:
    """The message on ``line``, its fields checked against their types."""
    cls, data = raw(line)
    names = {f.name: f.type for f in fields(cls)}
    if set(data) != set(names):
        raise ProtocolError(f"{cls.type}: fields {sorted(data)}, expected {sorted(names)}")
    for name, value in data.items():
        accepts = _ACCEPTS[str(names[name])]
        if not isinstance(value, accepts) or (isinstance(value, bool) and bool not in accepts):
            raise ProtocolError(f"{cls.type}.{name}: {type(value).__name__}")
        if isinstance(value, list) and not all(isinstance(v, str) for v in value):
            raise ProtocolError(f"{cls.type}.{name}: not a list of strings")
    return cls(**data)
