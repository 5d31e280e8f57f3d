"""Text shaping every platform shares: the fence-aware splitter, shortening,
and taking the bot's own mention out of a message."""

from __future__ import annotations

import re

FENCE = "```"


def shorten(text: str, width: int, *, keep_lines: bool = False) -> str:
    """``text`` cut to ``width`` characters with an ellipsis; one line unless
    ``keep_lines`` (then cut at the last line break that fits, when there is
    one in the second half, and an open code fence is closed)."""
    if not keep_lines:
        text = " ".join(text.split())
    if len(text) <= width:
        return text
    cut = text[: max(0, width - 5)]
    if keep_lines:
        line_end = cut.rfind("\n")
        if line_end > width // 2:
            cut = cut[:line_end]
        if sum(line.strip().startswith(FENCE) for line in cut.split("\n")) % 2:
            return f"{cut.rstrip()}\n{FENCE}"[: width - 1] + "…"
    return cut.rstrip() + "…"


def strip_mention(text: str, user_id: str | int | None) -> str:
    """The text without the bot's own mention(s): ``<@U123>``, ``<@!123>``
    (Discord's nickname form), ``<@U123|name>`` (Slack's labelled form)."""
    if user_id:
        text = re.sub(rf"<@!?{re.escape(str(user_id))}(?:\|[^>]*)?>", " ", text)
    return re.sub(r"[ \t]{2,}", " ", text).strip()


def _segments(text: str) -> list[str]:
    """Lines of prose, and whole fenced code blocks as one segment each."""
    segments: list[str] = []
    block: list[str] | None = None
    for line in text.split("\n"):
        if block is not None:
            block.append(line)
            if line.strip().startswith(FENCE):
                segments.append("\n".join(block))
                block = None
        elif line.strip().startswith(FENCE):
            block = [line]
        else:
            segments.append(line)
    if block is not None:  # an unterminated fence: close it so no chunk is left open
        block.append(FENCE)
        segments.append("\n".join(block))
    return segments


def _split_prose(line: str, limit: int) -> list[str]:
    pieces: list[str] = []
    while len(line) > limit:
        cut = line.rfind(" ", 0, limit + 1)
        if cut <= 0:
            cut = limit
        pieces.append(line[:cut].rstrip())
        line = line[cut:].lstrip()
    pieces.append(line)
    return pieces


def _split_code(block: str, limit: int) -> list[str]:
    """A code block too long for one message: close the fence at each cut and
    reopen it (same language) in the next piece."""
    lines = block.split("\n")
    opener = lines[0].strip()
    if len(opener) > 40:  # a "language" that long is not one; keep the room for code
        opener = FENCE
    body = lines[1:-1] if len(lines) > 1 and lines[-1].strip().startswith(FENCE) else lines[1:]
    room = limit - len(opener) - len(FENCE) - 2
    pieces: list[str] = []
    current: list[str] = []
    size = 0
    for raw in body:
        for line in [raw[i : i + room] for i in range(0, len(raw), room)] or [""]:
            if current and size + len(line) + 1 > room:
                pieces.append("\n".join([opener, *current, FENCE]))
                current, size = [], 0
            current.append(line)
            size += len(line) + 1
    if current:
        pieces.append("\n".join([opener, *current, FENCE]))
    return pieces


def split_text(text: str, limit: int) -> list[str]:
    """Split an answer into messages of at most ``limit`` characters, cutting
    only between lines and never inside a code block (a block longer than a
    message is closed and reopened at the cut)."""
    chunks: list[str] = []
    current = ""
    for segment in _segments(text.strip()):
        if current and len(current) + 1 + len(segment) <= limit:
            current = f"{current}\n{segment}"
            continue
        if current.strip():
            chunks.append(current.rstrip())
        if len(segment) <= limit:
            current = segment
            continue
        is_code = segment.lstrip().startswith(FENCE)
        pieces = _split_code(segment, limit) if is_code else _split_prose(segment, limit)
        chunks.extend(p for p in pieces[:-1] if p.strip())
        current = pieces[-1]
    if current.strip():
        chunks.append(current.rstrip())
    return chunks
