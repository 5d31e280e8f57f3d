"""Markdown → Slack mrkdwn (splitting and the status text are the shared
renderer's: tests/adapters/chat)."""

from __future__ import annotations

import pytest

from adapters.slack.mrkdwn import RENDERER, to_mrkdwn
from core.types import TaskRecord, TaskState, TaskStatus


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


def test_status_lines_are_escaped_and_marked_up_for_slack() -> None:
    tasks = (
        TaskState(0, "text-to-image", "acme/<sd>", TaskStatus.DONE),
        TaskState(1, "translation", None, TaskStatus.FAILED, error="HTTP 500 <boom>"),
    )
    assert [RENDERER.task_line(t) for t in tasks] == [
        "✅ 0. text-to-image · `acme/&lt;sd&gt;`",
        "❌ 1. translation · choosing a model… — HTTP 500 &lt;boom&gt;",
    ]
    skipped = TaskRecord(
        2, "image-classification", None, TaskStatus.SKIPPED, reason="task 0 failed"
    )
    assert RENDERER.task_line(skipped).endswith("— task 0 failed")
    assert RENDERER.failed("a < b", (), 3900) == "❌ a &lt; b"
