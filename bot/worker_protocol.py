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
The worker checks every message it reads with pydantic (:func:`decode`); the
CLI, which loads nothing heavy (``python -m bot`` imports this module first),
reads the worker's with :func:`unchecked`.  Standard library only at import.
"""

from __future__ import annotations

import base64
import json
from dataclasses import asdict, dataclass, field, fields
from functools import cache
from typing import TYPE_CHECKING, Annotated, Literal

if TYPE_CHECKING:
    from pydantic import TypeAdapter

PROTOCOL = 1


@dataclass(frozen=True, slots=True)
class Hello:
    protocol: int
    pid: int
    # Environment variables (by name, and by prefix) the worker's settings
    # depend on: the CLI hashes its own values of them for the handshake.
    names: list[str]
    prefixes: list[str]
    type: Literal["hello"] = field(default="hello", repr=False)


@dataclass(frozen=True, slots=True)
class Handshake:
    fingerprint: str
    type: Literal["handshake"] = field(default="handshake", repr=False)


@dataclass(frozen=True, slots=True)
class Welcome:
    ok: bool
    reason: str  # why not, when not ok
    max_bytes: int  # MAX_ATTACHMENT_BYTES: larger files are sent by size only
    type: Literal["welcome"] = field(default="welcome", repr=False)


@dataclass(frozen=True, slots=True)
class SentFile:
    """A file the person named (``--file``, ``/file``) as the CLI found it:
    its bytes (base64), or only its size when it is over ``max_bytes``, or
    neither when it is not a file.  The worker never reads ``path``."""

    path: str
    size: int | None
    data: str | None
    type: Literal["file"] = field(default="file", repr=False)

    @classmethod
    def of(cls, path: str, size: int | None, data: bytes | None) -> SentFile:
        return cls(path, size, None if data is None else base64.b64encode(data).decode("ascii"))

    def content(self) -> bytes | None:
        return None if self.data is None else base64.b64decode(self.data, validate=True)


@dataclass(frozen=True, slots=True)
class Ask:
    """``python -m bot ask``; its files are the SentFile messages before it."""

    text: str
    conversation: str
    as_json: bool
    user: str
    type: Literal["ask"] = field(default="ask", repr=False)


@dataclass(frozen=True, slots=True)
class Chat:
    conversation: str
    user: str
    type: Literal["chat"] = field(default="chat", repr=False)


@dataclass(frozen=True, slots=True)
class Line:
    """A line the person typed in the chat (without its newline)."""

    text: str
    type: Literal["line"] = field(default="line", repr=False)


@dataclass(frozen=True, slots=True)
class EndOfInput:
    type: Literal["eof"] = field(default="eof", repr=False)


@dataclass(frozen=True, slots=True)
class Output:
    stream: Literal["out", "err"]  # the CLI's stdout or stderr
    text: str
    type: Literal["output"] = field(default="output", repr=False)


@dataclass(frozen=True, slots=True)
class Prompt:
    text: str
    type: Literal["prompt"] = field(default="prompt", repr=False)


@dataclass(frozen=True, slots=True)
class Exit:
    code: int
    type: Literal["exit"] = field(default="exit", repr=False)


Message = (
    Hello | Handshake | Welcome | SentFile | Ask | Chat | Line | EndOfInput | Output | Prompt | Exit
)
CLASSES: tuple[type[Message], ...] = (
    Hello, Handshake, Welcome, SentFile, Ask, Chat, Line, EndOfInput, Output, Prompt, Exit
)  # fmt: skip
# Each message class by its ``type`` (a field's default: slots hide it on the class).
TYPES: dict[str, type[Message]] = {
    str(f.default): cls for cls in CLASSES for f in fields(cls) if f.name == "type"
}


class ProtocolError(Exception):
    """A line that is not a message of this protocol."""


def encode(message: Message) -> bytes:
    return json.dumps({"type": message.type, **asdict(message)}).encode() + b"\n"


def _not_a_message(line: bytes) -> ProtocolError:
    return ProtocolError(f"not a message: {line[:80]!r}")


def unchecked(line: bytes) -> Message:
    """The message on ``line`` with exactly its class's fields, their values
    unchecked: the CLI's side, which loads no pydantic, reading the worker it
    has verified (its uid; then the fingerprint of its code and settings)."""
    try:
        data = json.loads(line)
        cls = TYPES[data.pop("type")]
    except (ValueError, KeyError, TypeError, AttributeError) as e:
        raise _not_a_message(line) from e
    try:
        return cls(**data)
    except TypeError as e:  # a field missing or unknown
        raise ProtocolError(f"{cls.__name__}: {e}") from None


@cache
def _adapter() -> TypeAdapter[Message]:
    from pydantic import ConfigDict, Field, TypeAdapter

    return TypeAdapter(
        Annotated[Message, Field(discriminator="type")],
        # every field of its type as sent ("2" is no int, true no int), none unknown
        config=ConfigDict(strict=True, extra="forbid"),
    )


def prepare() -> None:
    """Build the checker :func:`decode` uses now (tens of milliseconds), not
    on the first message."""
    _adapter()


def decode(line: bytes) -> Message:
    """The message on ``line``, every field checked against its type (with
    pydantic, loaded on first use: the worker's side)."""
    from pydantic import ValidationError

    try:
        return _adapter().validate_json(line)
    except ValidationError as e:
        first = e.errors(include_url=False)[0]
        if len(first["loc"]) < 2:  # no JSON object, or no type of this protocol
            raise _not_a_message(line) from None
        where = ".".join(str(part) for part in first["loc"])
        raise ProtocolError(f"{where}: {first['msg']}") from None
