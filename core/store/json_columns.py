"""How the store's JSON columns are written: ``orjson`` where it gives what
the standard library would store, ``json.dumps`` otherwise.

SQLAlchemy serialises every ``sa.JSON`` value with the engine's
``json_serializer`` (``json.dumps`` by default).  A burst of requests spent about 3 % of its CPU in
``json.dumps`` of the checkpoints and turns (``docs/speed.md``); orjson does
the same work in a fraction of the time.

What the database is asked to store does not change in kind:

* **ASCII only.**  ``json.dumps`` escapes every non-ASCII character
  (``\\u00e9``, a surrogate pair beyond the first plane), so a database or
  column with a narrow character set only ever sees ASCII.  orjson writes
  UTF-8, which can only hold non-ASCII characters inside strings: each is
  escaped the same way before the text goes out.
* **What orjson refuses, or would write differently**: keys that are not
  strings, integers beyond 64 bits, nesting deeper than 255, dataclasses,
  dates and times (``json.dumps`` refuses those: the refusal stays the
  standard library's).  NaN and infinity are turned into ``null`` by
  ``core.store.repo.clean_json`` before they get here; a stray one would be
  written as ``null`` (valid JSON) where ``json.dumps`` wrote ``NaN``.
* Separators differ (orjson writes no spaces): the same value either way.

Reading stays ``json.loads``: orjson reads an integer beyond 64 bits as a
float, and the columns keep such numbers exact.
"""

from __future__ import annotations

import json
import re
from typing import Any

import orjson

# What orjson should leave to json.dumps (which refuses them) rather than
# serialise itself: keeps the standard library's behaviour for those values.
_PASS = orjson.OPT_PASSTHROUGH_DATACLASS | orjson.OPT_PASSTHROUGH_DATETIME
_NON_ASCII = re.compile(r"[^\x00-\x7f]")


def _escaped(match: re.Match[str]) -> str:
    """A non-ASCII character as json.dumps escapes it."""
    code = ord(match.group())
    if code > 0xFFFF:  # a surrogate pair, as JSON spells characters beyond the first plane
        code -= 0x10000
        return f"\\u{0xD800 | (code >> 10):04x}\\u{0xDC00 | (code & 0x3FF):04x}"
    return f"\\u{code:04x}"


def dumps(value: Any) -> str:
    """A JSON column's text, ASCII only (see the module docstring)."""
    try:
        out = orjson.dumps(value, option=_PASS)
    except TypeError:  # orjson.JSONEncodeError: what json.dumps decides
        return json.dumps(value)
    if out.isascii():
        return out.decode("ascii")
    return _NON_ASCII.sub(_escaped, out.decode("utf-8"))
