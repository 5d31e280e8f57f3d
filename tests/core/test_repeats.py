"""A streamed answer that repeats itself (core/repeats.py): found as it
streams, cut after the first time it says the repeated piece."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from core.repeats import Looping, RepeatGuard, cut_repeats, repeating_tail

# What Qwen2.5-Coder-0.5B answered under llama-server when asked what it had
# been asked before (its one task had failed: the Hub was unreachable).
LOOPED = (
    "The user asked me to write a short poem about autumn and read it aloud. "
    + "The Hub model used to run the task failed, likely due to a connection issue. " * 12
    + "The Hub model used to run the task failed, likely"
)
FIRST = (
    "The user asked me to write a short poem about autumn and read it aloud. "
    "The Hub model used to run the task failed, likely due to a connection issue."
)


def test_a_looped_answer_is_cut_after_the_sentence_it_first_repeats() -> None:
    unit = repeating_tail(LOOPED, 300)
    assert unit is not None
    assert cut_repeats(LOOPED, unit) == FIRST


@pytest.mark.parametrize(
    ("text", "kept"),
    [
        ("Here you go: " + "ha" * 300, "Here you go: ha"),  # no sentence end near: one period
        ("Lines:\n" + "- same line\n" * 40, "Lines:\n- same line\n"),
        ("x" * 500, "x"),
    ],
)
def test_the_cut_keeps_the_repeated_piece_once(text: str, kept: str) -> None:
    unit = repeating_tail(text, 300)
    assert unit is not None
    assert cut_repeats(text, unit) == kept


def test_a_text_that_does_not_end_in_the_piece_is_left_whole() -> None:
    assert cut_repeats("no loop here.", "zz") == "no loop here."
    assert cut_repeats("anything", "") == "anything"


async def test_the_guard_raises_as_the_stream_loops_not_before() -> None:
    guard = RepeatGuard(300)
    sentence = "The Hub model used to run the task failed, likely due to a connection issue. "
    pieces = [sentence[i : i + 16] for i in range(0, len(sentence), 16)]
    with pytest.raises(Looping):
        for _ in range(20):
            for piece in pieces:
                await guard.feed(piece)
    # found once it has said the sentence over 300 characters (four, five times), not at the cap
    assert guard.repeated is not None and 300 + len(sentence) <= guard.size < 6 * len(sentence)
    assert cut_repeats(guard.text, guard.repeated) == sentence.strip()


async def test_what_the_prompt_itself_repeats_is_no_loop() -> None:
    chorus = "na na na na hey hey goodbye " * 20
    guard = RepeatGuard(300, own_text=f'<results>{{"generated_text": "{chorus}"}}</results>')
    for piece in ("The song goes: ", chorus):
        await guard.feed(piece)
    guard.check(guard.text)
    assert guard.repeated is None


async def test_a_numbered_loop_is_cut_after_its_first_item() -> None:
    """Qwen2.5-Coder-0.5B again, numbering the sentence it repeats."""
    said = "1. The user asked me to write a short poem about autumn and read it aloud.\n"
    again = "The Hub model used to run the task failed, likely due to a connection issue.\n"
    text = said + "".join(f"{i}. {again}" for i in range(2, 40))
    guard = RepeatGuard(300, counting_span=600, counting_letters=24)
    with pytest.raises(Looping):
        for start in range(0, len(text), 16):
            await guard.feed(text[start : start + 16])
    assert guard.counting and guard.size < 1000
    assert guard.cut(guard.text) == said + "2. " + again.strip()


async def test_numbers_in_a_table_or_code_are_no_numbered_loop() -> None:
    listing = "```python\n" + "\n".join(f"x{i} = {i}" for i in range(120)) + "\n```"
    boxes = "Boxes: " + ", ".join(f"[{i}, {i + 5}, {2 * i}, {3 * i}]" for i in range(60))
    for text in (listing, boxes):
        guard = RepeatGuard(300, counting_span=600, counting_letters=24)
        for start in range(0, len(text), 16):
            await guard.feed(text[start : start + 16])
        guard.check(text)
        assert guard.repeated is None


def _tried_in_turn(text: str, min_span: int) -> str | None:
    """repeating_tail's rule, each period tried in turn (the reference)."""
    from core.repeats import LOOP_REPEATS, MAX_PERIOD

    for period in range(1, MAX_PERIOD + 1):
        span = max(min_span, period * (LOOP_REPEATS - 1))
        if span + period > len(text):
            return None
        if text[-span:] == text[-span - period : -period]:
            return text[-period:]
    return None


@given(
    st.lists(st.sampled_from(["ab", "a", "b", "abc ", ". ", "x" * 7, "na "]), max_size=400),
    st.sampled_from([1, 5, 50, 300]),
)
def test_the_search_finds_what_trying_every_period_finds(pieces: list[str], span: int) -> None:
    text = "".join(pieces)
    assert repeating_tail(text, span) == _tried_in_turn(text, span)
