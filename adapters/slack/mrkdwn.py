"""The agent's Markdown as Slack's mrkdwn, and Slack's markup for the shared
renderer.

LLMs write CommonMark; Slack renders its own *mrkdwn* (``*bold*``,
``_italic_``, ``<url|text>``, no headings) and wants ``&``, ``<`` and ``>``
escaped everywhere.  (Splitting long answers is the shared splitter's,
:func:`adapters.chat.text.split_text`.)
"""

from __future__ import annotations

import re

from adapters.chat import Markup, Renderer

# Slack truncates text above 40,000 characters and advises staying under 4,000.
MESSAGE_LIMIT = 3_900

_FENCE = re.compile(r"^\s*(`{3,}|~{3,})")
_HEADING = re.compile(r"^\s{0,3}#{1,6}\s+(.*?)\s*#*\s*$")
_BULLET = re.compile(r"^(\s*)[-*+]\s+(?=\S)")
_QUOTE = re.compile(r"^(\s*)>\s?")
_INLINE_CODE = re.compile(r"(`+)(.+?)\1")
_LINK = re.compile(r"!?\[(?P<text>[^\]]*)\]\((?P<url>[^)\s]+)(?:\s+\"[^\"]*\")?\)")
_AUTOLINK = re.compile(r"<(?P<url>(?:https?|mailto):[^\s>]+)>")
_BOLD_ITALIC = re.compile(r"\*\*\*(?=\S)(.+?)(?<=\S)\*\*\*")
_BOLD = (
    re.compile(r"\*\*(?=\S)(.+?)(?<=\S)\*\*"),
    re.compile(r"(?<!\w)__(?=\S)(.+?)(?<=\S)__(?!\w)"),
)
_ITALIC = re.compile(r"(?<![\w*])\*(?=[^\s*])(.+?)(?<=[^\s*])\*(?![\w*])")
_STRIKE = re.compile(r"~~(?=\S)(.+?)(?<=\S)~~")
_SLOT = re.compile("\x00(\\d+)\x00")
_BOLD_MARK = "\x01"


def escape(text: str) -> str:
    """Slack's three control characters (required even inside code)."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def to_mrkdwn(markdown: str) -> str:
    """Convert CommonMark-ish LLM output to Slack mrkdwn.

    Fenced code is kept verbatim (language tags dropped, Slack shows them as
    text); headings become bold lines; ``**b**``→``*b*``, ``*i*``→``_i_``,
    ``~~s~~``→``~s~``, ``[t](u)``→``<u|t>``, list markers → bullets.
    """
    out: list[str] = []
    fence: str | None = None
    for line in markdown.splitlines():
        match = _FENCE.match(line)
        if fence is None and match:
            fence = match.group(1)[0] * 3
            out.append("```")
        elif fence is not None and match and line.strip().startswith(fence):
            fence = None
            out.append("```")
        elif fence is not None:
            out.append(escape(line))
        else:
            out.append(_convert_line(line))
    if fence is not None:
        out.append("```")
    return "\n".join(out)


def _convert_line(line: str) -> str:
    heading = _HEADING.match(line)
    if heading:
        inner = heading.group(1).replace("**", "").replace("__", "")
        return f"*{_inline(inner)}*" if inner else ""
    prefix = ""
    quote = _QUOTE.match(line)
    if quote:
        prefix, line = quote.group(1) + ">", line[quote.end() :]
        prefix += " " if line else ""
    bullet = _BULLET.match(line)
    if bullet:
        prefix, line = prefix + bullet.group(1) + "• ", line[bullet.end() :]
    return prefix + _inline(line)


def _inline(text: str) -> str:
    """Convert one line's inline markup; code spans and links are set aside
    first so nothing inside them is touched."""
    slots: list[str] = []

    def keep(value: str) -> str:
        slots.append(value)
        return f"\x00{len(slots) - 1}\x00"

    text = _INLINE_CODE.sub(lambda m: keep(f"`{escape(m.group(2))}`"), text)
    text = _LINK.sub(lambda m: keep(_link(m["url"], m["text"])), text)
    text = _AUTOLINK.sub(lambda m: keep(f"<{_url(m['url'])}>"), text)
    text = escape(text)
    text = _BOLD_ITALIC.sub(lambda m: f"{_BOLD_MARK}_{m.group(1)}_{_BOLD_MARK}", text)
    for pattern in _BOLD:
        text = pattern.sub(lambda m: f"{_BOLD_MARK}{m.group(1)}{_BOLD_MARK}", text)
    text = _ITALIC.sub(r"_\1_", text)
    text = text.replace(_BOLD_MARK, "*")
    text = _STRIKE.sub(r"~\1~", text)
    return _SLOT.sub(lambda m: slots[int(m.group(1))], text)


def _link(url: str, label: str) -> str:
    label = re.sub(r"[*_`~]", "", label).replace("|", "/").strip()
    if not label or label == url:
        return f"<{_url(url)}>"
    return f"<{_url(url)}|{escape(label)}>"


def _url(url: str) -> str:
    """A URL inside ``<…>``: entities for ``&``, percent-escapes for the rest."""
    return url.replace("&", "&amp;").replace("<", "%3C").replace(">", "%3E").replace("|", "%7C")


def _code(text: str) -> str:
    return f"`{escape(text)}`"


MARKUP = Markup(bold=lambda text: f"*{text}*", code=_code, escape=escape, answer=to_mrkdwn)
RENDERER = Renderer(MARKUP)
