"""The platform-neutral turn every adapter shares.

* :mod:`adapters.chat.turn` — how a turn is run (:func:`run_turn`, the error policy)
* :mod:`adapters.chat.status` — how status is shown (one message, one pacing)
* :mod:`adapters.chat.files` — how files are sent (the size policy, splitting, packing)
* :mod:`adapters.chat.surface` — what a platform provides (:class:`Surface`, :class:`Limits`)
* :mod:`adapters.chat.render` — the words, icons, sizes and times, per platform markup
* :mod:`adapters.chat.board`, :mod:`~adapters.chat.text`, :mod:`~adapters.chat.download`,
  :mod:`~adapters.chat.intake` — the events folded for the status, the splitter,
  the capped downloader, recording and processing a request as a job

A platform adapter is then: its payload → a :class:`~core.types.Request`, a
:class:`Surface`, and a :class:`~adapters.chat.render.Markup`.
"""

from adapters.chat.render import Markup, Renderer
from adapters.chat.surface import (
    MONOTONIC,
    Clock,
    Limits,
    OutFile,
    Outgoing,
    StreamingSurface,
    Surface,
)
from adapters.chat.turn import run_turn

__all__ = [
    "MONOTONIC",
    "Clock",
    "Limits",
    "Markup",
    "OutFile",
    "Outgoing",
    "Renderer",
    "StreamingSurface",
    "Surface",
    "run_turn",
]
