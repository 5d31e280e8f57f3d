"""A streamed answer that repeats itself, found while it streams.

Small local models loop: the same sentence, or the same JSON object, over
and over until the completion cap (minutes on a CPU).  :class:`RepeatGuard`
reads a stream's pieces and raises :class:`Looping` once its tail repeats
one piece (:func:`repeating_tail`); raising from the stream's handler ends
the call, and closing the stream stops llama.cpp generating.  The planner
cuts its plan so (``core.planner.LoopGuard``), the answer stage its answer
(``core.response``), which keeps the text up to the end of the repeated
piece's first time (:func:`cut_repeats`).

A piece the person's own words (or what the answer quotes) already repeat
is not a loop: a song's chorus, "la la la".
"""

from __future__ import annotations

import re

# An answer is looked at every this many characters; its tail repeating a
# piece of up to MAX_PERIOD characters over a span of characters (and at
# least LOOP_REPEATS times) is a loop.
CHECK_EVERY = 64
MAX_PERIOD = 200
LOOP_REPEATS = 4
_PROBE = 8  # characters of the tail looked for first (repeating_tail)
_DIGITS = re.compile(r"\d+")
_TERMINATORS = ".!?…。"  # what ends a sentence (or a newline a line)
_SENTENCE_END = re.compile(rf"[{_TERMINATORS}](?=\s|$)|\n")
_ENDS = (*_TERMINATORS, "\n")


class Looping(Exception):
    """The answer repeats itself: cut it."""


def repeating_tail(text: str, min_span: int) -> str | None:
    """The piece ``text`` ends by repeating, if it repeats one piece of up to
    :data:`MAX_PERIOD` characters over ``min_span`` characters and at least
    :data:`LOOP_REPEATS` times."""
    # Only a period at which the last few characters occur again can repeat:
    # those are found by str.rfind (in C), nearest first, so the smallest
    # period wins as when each is tried in turn (ordinary prose has none).
    n = len(text)
    k = max(1, min(_PROBE, min_span))
    if n <= k:
        return None
    probe = text[-k:]
    low = max(0, n - k - MAX_PERIOD)
    high = n - 1  # an occurrence ending before the text's end: a period of 1 or more
    while (at := text.rfind(probe, low, high)) >= 0:
        period = n - k - at
        span = max(min_span, period * (LOOP_REPEATS - 1))
        if span + period > n:
            return None
        if text[-span:] == text[-span - period : -period]:
            return text[-period:]
        high = at + k - 1
    return None


def cut_repeats(text: str, unit: str) -> str:
    """``text``, which ends by repeating ``unit``, up to the end of the first
    time the repetition says it: where the repeating run begins, one period
    on, and on to the end of the sentence (or line) that period ends in."""
    period = len(unit)
    if not period or not text.endswith(unit):
        return text
    start = len(text) - period
    while start > 0 and text[start - 1] == text[start - 1 + period]:
        start -= 1
    end = start + period
    head = text[:end].rstrip(" ")
    if head.endswith(_ENDS):  # the first time ends a sentence or a line
        return head
    found = _SENTENCE_END.search(text, end, min(len(text), end + period))
    return text[: found.end()] if found else text[:end]


class RepeatGuard:
    """Reads a streamed answer's pieces (:meth:`feed`) and raises
    :class:`Looping` once its tail repeats one piece over ``span``
    characters, or (with ``counting_span``) over that many when every number
    is read as 0 (``"id": 7``, ``"id": 8``…) and the piece has at least
    ``counting_letters`` letters (so a table or a list of numbers, ``x1 = 1``,
    ``x2 = 2``…, is not taken for a sentence said again with a new number),
    unless ``own_text`` (what the person wrote, what the answer may quote)
    repeats that piece itself."""

    def __init__(
        self,
        span: int,
        own_text: str = "",
        counting_span: int | None = None,
        counting_letters: int = 0,
    ) -> None:
        self.span = span
        self.counting_span = counting_span
        self.counting_letters = counting_letters
        self.own_text = own_text
        self.parts: list[str] = []
        self.size = 0
        self._checked = 0
        self.repeated: str | None = None
        self.counting = False  # the piece repeats with every number read as 0

    @property
    def text(self) -> str:
        return "".join(self.parts)

    async def feed(self, piece: str) -> None:
        self.parts.append(piece)
        self.size += len(piece)
        if self.size - self._checked < CHECK_EVERY:
            return
        self._checked = self.size
        self.check(self.text)

    def check(self, text: str) -> None:
        """Raise :class:`Looping` when ``text`` (the answer so far) loops."""
        unit = repeating_tail(text, self.span)
        counting = False
        if unit is None and self.counting_span is not None:
            unit = repeating_tail(_DIGITS.sub("0", text), self.counting_span)
            if unit is not None and sum(c.isalpha() for c in unit) < self.counting_letters:
                unit = None
            counting = unit is not None
        if unit is not None and unit * 2 not in self.own_text:
            self.repeated, self.counting = unit, counting
            raise Looping(f"the answer repeats {unit[:40]!r}")

    def cut(self, text: str) -> str:
        """``text`` (in which this guard found the loop) cut by
        :func:`cut_repeats`; a counting loop is cut where its numbers-as-0
        form is, so the first numbered item is kept."""
        if self.repeated is None:
            return text
        if not self.counting:
            return cut_repeats(text, self.repeated)
        norm, where = _numbers_as_zero(text)
        return text[: where[len(cut_repeats(norm, self.repeated))]]


def _numbers_as_zero(text: str) -> tuple[str, list[int]]:
    """``text`` with every number as 0, and where each of its characters
    (and its end) lies in ``text``."""
    parts: list[str] = []
    where: list[int] = []
    last = 0
    for m in _DIGITS.finditer(text):
        parts.append(text[last : m.start()])
        where.extend(range(last, m.start()))
        parts.append("0")
        where.append(m.start())
        last = m.end()
    parts.append(text[last:])
    where.extend(range(last, len(text)))
    where.append(len(text))
    return "".join(parts), where
