"""Markdown → Slack mrkdwn, splitting, and the status message text."""

from __future__ import annotations

import pytest

from adapters.slack.render import (
    MESSAGE_LIMIT,
    final_status,
    split_message,
    status_text,
    to_mrkdwn,
)
from core.types import Progress, Reply, Stage, TaskRecord, TaskState, TaskStatus


@pytest.mark.parametrize(
    ("markdown", "mrkdwn"),
    [
        ("**bold** and __also bold__", "*bold* and *also bold*"),
        ("*italic* and _italic_", "_italic_ and _italic_"),
        ("***both***", "*_both_*"),
        ("~~gone~~", "~gone~"),
        (
            "see [the docs](https://example.com/a?b=1&c=2)",
            "see <https://example.com/a?b=1&amp;c=2|the docs>",
        ),
        ("![a cat](https://x.test/cat.png)", "<https://x.test/cat.png|a cat>"),
        ("[https://x.test](https://x.test)", "<https://x.test>"),
        ("<https://auto.test/x>", "<https://auto.test/x>"),
        ("# Title", "*Title*"),
        ("### **Bold** heading ###", "*Bold heading*"),
        ("- one\n* two\n+ three", "• one\n• two\n• three"),
        ("  - nested", "  • nested"),
        ("> quoted **q**", "> quoted *q*"),
        ("a < b & c > d", "a &lt; b &amp; c &gt; d"),
        ("`**not bold** <x>`", "`**not bold** &lt;x&gt;`"),
        ("snake_case_name and 2*3*4", "snake_case_name and 2*3*4"),
        ("<@U123> hi", "&lt;@U123&gt; hi"),
    ],
)
def test_inline_conversion(markdown: str, mrkdwn: str) -> None:
    assert to_mrkdwn(markdown) == mrkdwn


def test_code_blocks_are_kept_verbatim_without_language_tag() -> None:
    markdown = "Run:\n```python\nif a < b and **c**:\n    print('*x*')\n```\nDone **now**."
    assert to_mrkdwn(markdown) == (
        "Run:\n```\nif a &lt; b and **c**:\n    print('*x*')\n```\nDone *now*."
    )


def test_unclosed_code_block_is_closed() -> None:
    assert to_mrkdwn("```\ncode") == "```\ncode\n```"


def test_short_text_is_one_part_and_empty_text_none() -> None:
    assert split_message("hello") == ["hello"]
    assert split_message("   ") == []


def test_split_respects_the_limit_and_keeps_every_word() -> None:
    text = "\n".join(f"line {i} " + "x" * 50 for i in range(400))
    parts = split_message(text, limit=1000)
    assert all(len(p) <= 1000 for p in parts)
    assert "\n".join(parts) == text


def test_split_closes_and_reopens_code_fences() -> None:
    code = "```\n" + "\n".join(f"print({i})" for i in range(300)) + "\n```"
    parts = split_message("Intro\n" + code + "\nOutro", limit=500)
    assert len(parts) > 2
    for part in parts:
        assert part.count("```") % 2 == 0, part
        assert len(part) <= 500
    body = [line for p in parts for line in p.split("\n") if line.startswith("print(")]
    assert body == [f"print({i})" for i in range(300)]


def test_an_overlong_line_is_cut_at_spaces() -> None:
    text = " ".join(["word"] * 3000)
    parts = split_message(text)
    assert all(len(p) <= MESSAGE_LIMIT for p in parts)
    assert " ".join(parts).split() == text.split()


def test_status_shows_stage_and_each_task_with_its_model() -> None:
    progress = Progress(
        Stage.RUNNING,
        "Running tasks (1/3 finished)",
        (
            TaskState(0, "text-to-image", "acme/sd", TaskStatus.DONE),
            TaskState(1, "image-to-text", "acme/blip", TaskStatus.RUNNING),
            TaskState(2, "translation", None, TaskStatus.FAILED, error="HTTP 500 <boom>"),
        ),
    )
    assert status_text(progress) == (
        "⏳ *Running tasks (1/3 finished)*\n"
        "✅ 0. text-to-image · `acme/sd`\n"
        "⏳ 1. image-to-text · `acme/blip`\n"
        "❌ 2. translation — HTTP 500 &lt;boom&gt;"
    )
    assert status_text(Progress(Stage.PLANNING, "")) == "⏳ *Planning the tasks…*"


def test_final_status_says_outcome_time_and_tasks() -> None:
    tasks = (
        TaskRecord(0, "text-to-image", "acme/sd", TaskStatus.DONE),
        TaskRecord(1, "image-classification", None, TaskStatus.SKIPPED, reason="task 0 failed"),
    )
    ok = final_status(Reply("hi", tasks=tasks), 2.345)
    assert ok.splitlines() == [
        "✅ *Done* in 2.3 s",
        "✅ 0. text-to-image · `acme/sd`",
        "⏭️ 1. image-classification — task 0 failed",
    ]
    assert final_status(Reply("no", error=True), 0.5) == "❌ *Failed* in 0.5 s"
