"""The store's JSON columns (core/store/json_columns.py): orjson's speed, the
standard library's text in kind: ASCII only, the same values back, the same
refusals."""

from __future__ import annotations

import dataclasses
import json
import math
from datetime import UTC, datetime

import pytest
import sqlalchemy as sa
from hypothesis import given
from hypothesis import strategies as st

from core.store import Database
from core.store.json_columns import dumps

# JSON values as the bot's columns hold them (checkpoints, task args and results).
_VALUES = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**80), max_value=2**80)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=20,
)


@given(_VALUES)
def test_any_value_is_written_in_ascii_and_reads_back_as_the_standard_library_reads_it(
    value: object,
) -> None:
    text = dumps(value)
    assert text.isascii()
    assert json.loads(text) == json.loads(json.dumps(value))


def test_non_ascii_is_escaped_as_json_dumps_escapes_it() -> None:
    value = {"caption": "un café ☕ 😀", "naïve key": ["ü"]}
    assert dumps(value) == json.dumps(value, separators=(",", ":"))
    assert "\\ud83d\\ude00" in dumps(value)  # beyond the first plane: a surrogate pair


def test_what_orjson_refuses_or_writes_otherwise_is_left_to_json_dumps() -> None:
    # keys that are not strings, integers beyond 64 bits: json.dumps writes them
    assert dumps({1: "one", None: "n"}) == json.dumps({1: "one", None: "n"})
    assert dumps([2**70]) == "[1180591620717411303424]"

    # dataclasses and datetimes: json.dumps refuses them, and so does this
    @dataclasses.dataclass
    class Point:
        x: int

    for bad in (Point(1), {"at": datetime(2026, 1, 1, tzinfo=UTC)}):
        with pytest.raises(TypeError):
            json.dumps(bad)
        with pytest.raises(TypeError):
            dumps(bad)
    # a lone surrogate has no UTF-8: json.dumps escapes it as it is
    assert dumps("\ud800") == json.dumps("\ud800")


async def test_a_json_column_is_stored_as_ascii_on_both_backends(database: Database) -> None:
    """Through the engine the bot builds: the text the database is given is
    ASCII (as json.dumps made it), and the value comes back whole."""
    table = sa.Table("json_scratch", sa.MetaData(), sa.Column("doc", sa.JSON))
    async with database.engine.begin() as conn:
        await conn.run_sync(table.metadata.create_all)
        value = {"text": "un café ☕ 😀", "n": [1, 2.5, None, True], "big": 2**70}
        await conn.execute(sa.insert(table).values(doc=value))
        # a stray NaN (the repo turns them into null before they get here) is
        # null: PostgreSQL refused the NaN json.dumps wrote
        await conn.execute(sa.insert(table).values(doc={"score": math.nan}))
    async with database.engine.connect() as conn:
        raw = (await conn.execute(sa.text("SELECT CAST(doc AS TEXT) FROM json_scratch"))).all()
        back = (await conn.execute(sa.select(table.c.doc))).scalars().all()
    assert all(r[0].isascii() for r in raw)
    assert json.loads(raw[0][0]) == value
    assert back == [value, {"score": None}]
