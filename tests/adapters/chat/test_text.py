"""The one fence-aware splitter (both platforms' limits), shortening, and the
bot's mention taken out of a message (Discord's and Slack's forms)."""

from __future__ import annotations

import pytest

from adapters.chat.text import shorten, split_text, strip_mention
from adapters.discord.surface import MESSAGE_LIMIT as DISCORD
from adapters.slack.mrkdwn import MESSAGE_LIMIT as SLACK


def balanced(chunk: str) -> bool:
    return sum(line.strip().startswith("```") for line in chunk.split("\n")) % 2 == 0


def test_short_text_is_one_message_and_blank_text_none() -> None:
    assert split_text("hello", DISCORD) == ["hello"]
    assert split_text("   ", DISCORD) == []


@pytest.mark.parametrize("limit", [DISCORD, SLACK, 1000])
def test_long_prose_splits_between_lines_within_the_limit(limit: int) -> None:
    text = "\n".join(f"line {i} " + "x" * 90 for i in range(120))
    chunks = split_text(text, limit)
    assert len(chunks) > 1 and all(len(c) <= limit for c in chunks)
    assert "\n".join(chunks) == text  # nothing lost, cut only at newlines


def test_code_block_is_never_cut_when_it_fits_in_a_message() -> None:
    prose = "intro " * 300  # ~1800 chars
    code = "```python\n" + "\n".join(f"print({i})" for i in range(100)) + "\n```"
    chunks = split_text(prose + "\n" + code + "\nbye", DISCORD)
    assert all(balanced(c) for c in chunks)
    assert any(code in c for c in chunks)  # the whole block in one message


@pytest.mark.parametrize("limit", [DISCORD, 500])
def test_code_block_longer_than_a_message_is_closed_and_reopened(limit: int) -> None:
    code = "```js\n" + "\n".join(f"const v{i} = {i};" for i in range(400)) + "\n```"
    chunks = split_text("Intro\n" + code + "\nOutro", limit)
    assert len(chunks) > 2
    for chunk in chunks:
        assert len(chunk) <= limit and balanced(chunk)
    body = [line for c in chunks for line in c.split("\n") if line.startswith("const")]
    assert body == [f"const v{i} = {i};" for i in range(400)]


@pytest.mark.parametrize("limit", [DISCORD, SLACK])
def test_a_single_huge_line_is_cut_at_spaces(limit: int) -> None:
    chunks = split_text("word " * 3000, limit)
    assert all(len(c) <= limit for c in chunks)
    assert " ".join(chunks).split() == ["word"] * 3000


def test_unterminated_fence_is_closed() -> None:
    assert all(balanced(c) for c in split_text("look:\n```\ncode", DISCORD))


def test_shorten_keeps_lines_and_closes_an_open_fence() -> None:
    assert shorten("a  b\nc", 10) == "a b c"
    cut = shorten("intro\n```\n" + "x = 1\n" * 50, 60, keep_lines=True)
    assert len(cut) <= 60 and cut.endswith("```…") and balanced(cut.removesuffix("…"))


@pytest.mark.parametrize(
    ("text", "user", "left"),
    [
        ("<@123> hello", 123, "hello"),
        ("hi <@!123> there", "123", "hi there"),  # Discord's nickname form
        ("<@U0BOT|hugginggpt> draw", "U0BOT", "draw"),  # Slack's labelled form
        ("<@U0OTHER> and <@U0BOT>", "U0BOT", "<@U0OTHER> and"),
        ("no mention", None, "no mention"),
    ],
)
def test_strip_mention_takes_out_only_the_bots_own(
    text: str, user: str | int | None, left: str
) -> None:
    assert strip_mention(text, user) == left
