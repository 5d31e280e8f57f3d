"""What a platform is to a turn: a :class:`Surface` and its :class:`Limits`.

A surface is one conversation place already bound (channel, thread, the
person): the turn never passes ``channel=…, thread_ts=…`` around.  It shows
one status message, posts the answer with its files, and tells the person
something privately where the platform allows it.  A surface that shows an
answer word by word by itself (the terminal; a platform's native streaming
message) also implements :class:`StreamingSurface`; on the others the turn
shows the answer as it is written inside the status message.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from adapters.chat.board import Board
from core.types import SYSTEM_CLOCK, Resource
from core.types import Clock as Clock


@dataclass(frozen=True, slots=True)
class Limits:
    """One platform's limits, as the shared turn needs them."""

    message_chars: int  # the longest message
    upload_bytes: int  # the largest file, and the most per message
    files_per_message: int = 10
    status_interval: float = 1.0  # at most one status edit per this many seconds
    # While the answer is written, the status message shows it (surfaces
    # that stream it themselves, or print it at the end, say False).
    answer_in_status: bool = True


class Surface(Protocol):
    """Where one request's status and answer go."""

    @property
    def limits(self) -> Limits: ...

    async def post_status(self, text: str) -> None:
        """Show the request's status message: post it, or take over the one
        a queue notice or a stopped process left (the one call of a turn
        that may raise: no status, no turn)."""
        ...

    async def edit_status(self, text: str) -> None:
        """Replace the status message's text (paced by the caller)."""
        ...

    async def post_answer(self, text: str, files: Sequence[Resource]) -> None:
        """Post the answer (already in the platform's markup, not split yet)
        and the generated files, as :mod:`adapters.chat.files` sends them."""
        ...

    async def tell_privately(self, text: str) -> None:
        """A message only the requester needs (ephemeral where possible)."""
        ...


@runtime_checkable
class StreamingSurface(Surface, Protocol):
    """A surface that shows the answer itself, piece by piece, as it comes."""

    async def stream_text(self, delta: str) -> None: ...

    async def discard_stream(self) -> None:
        """What was streamed is void (the stream broke off): the answer
        posted next replaces it."""
        ...


@runtime_checkable
class BoardSurface(Surface, Protocol):
    """A surface that also shows the request's state natively from the data
    (a platform's own status line, the plan as task cards), not only as the
    status text: the turn hands it its :class:`~adapters.chat.board.Board`
    before the status is posted, and the surface reads it whenever the
    status is shown (``post_status`` / ``edit_status``, paced as usual)."""

    def follow(self, board: Board) -> None: ...


# Time for pacing: the core's clock (``monotonic`` and ``sleep``); tests inject
# a fake one.
MONOTONIC: Clock = SYSTEM_CLOCK


@dataclass(frozen=True, slots=True)
class OutFile:
    """A file ready to upload (bytes read and within the limit)."""

    name: str
    data: bytes
    mime: str

    @property
    def size(self) -> int:
        return len(self.data)


@dataclass(frozen=True, slots=True)
class Outgoing:
    """One message to send: text, files, or both."""

    text: str | None
    files: tuple[OutFile, ...] = ()
