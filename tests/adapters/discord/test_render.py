"""Splitting, packing and status text: the pure rendering rules."""

from __future__ import annotations

from adapters.discord.render import (
    MESSAGE_LIMIT,
    OutFile,
    compose,
    done_text,
    models_text,
    pack_files,
    plan_text,
    split_text,
    status_text,
)
from core.types import (
    ModelChoice,
    PlannedStep,
    PlanPreview,
    Progress,
    Reply,
    Stage,
    TaskRecord,
    TaskState,
    TaskStatus,
)


def _balanced(chunk: str) -> bool:
    return sum(line.strip().startswith("```") for line in chunk.split("\n")) % 2 == 0


def test_short_text_is_one_message() -> None:
    assert split_text("hello") == ["hello"]
    assert split_text("   ") == []


def test_long_prose_splits_between_lines_within_the_limit() -> None:
    text = "\n".join(f"line {i} " + "x" * 90 for i in range(60))
    chunks = split_text(text)
    assert len(chunks) > 1
    assert all(len(c) <= MESSAGE_LIMIT for c in chunks)
    assert "\n".join(chunks) == text  # nothing lost, cut only at newlines


def test_code_block_is_never_cut_when_it_fits_in_a_message() -> None:
    prose = "intro " * 300  # ~1800 chars
    code = "```python\n" + "\n".join(f"print({i})" for i in range(100)) + "\n```"
    chunks = split_text(prose + "\n" + code + "\nbye")
    assert all(_balanced(c) for c in chunks)
    assert any(code in c for c in chunks)  # the whole block in one message


def test_code_block_longer_than_a_message_is_closed_and_reopened() -> None:
    code = "```js\n" + "\n".join(f"const v{i} = {i};" for i in range(400)) + "\n```"
    chunks = split_text(code)
    assert len(chunks) > 2
    for chunk in chunks:
        assert len(chunk) <= MESSAGE_LIMIT
        assert chunk.startswith("```js\n") and chunk.endswith("\n```")
    body = [line for c in chunks for line in c.split("\n")[1:-1]]
    assert body == [f"const v{i} = {i};" for i in range(400)]


def test_a_single_huge_line_is_cut_at_spaces() -> None:
    chunks = split_text("word " * 1000)
    assert all(len(c) <= MESSAGE_LIMIT for c in chunks)
    assert " ".join(chunks).split() == ["word"] * 1000


def test_unterminated_fence_is_closed() -> None:
    chunks = split_text("look:\n```\ncode")
    assert all(_balanced(c) for c in chunks)


def _file(name: str, size: int) -> OutFile:
    return OutFile(name, b"x" * size, "application/octet-stream")


def test_pack_files_respects_count_and_total_size() -> None:
    files = [_file(f"f{i}", 10) for i in range(23)]
    groups = pack_files(files, limit=1000)
    assert [len(g) for g in groups] == [10, 10, 3]
    groups = pack_files([_file("a", 600), _file("b", 600), _file("c", 300)], limit=1000)
    assert [[f.name for f in g] for g in groups] == [["a"], ["b", "c"]]


def test_compose_puts_files_on_the_last_text_message_then_extra_messages() -> None:
    text = "\n".join("y" * 100 for _ in range(30))  # > 2000 chars
    files = [_file(f"f{i}", 1) for i in range(12)]
    messages = compose(text, files, limit=10_000)
    texts = [m for m in messages if m.content]
    assert len(texts) == 2 and not texts[0].files and len(texts[1].files) == 10
    assert messages[-1].content is None and len(messages[-1].files) == 2


def test_status_shows_stage_and_each_task_with_model_and_icon() -> None:
    tasks = (
        TaskState(0, "text-to-image", "acme/t2i", TaskStatus.DONE),
        TaskState(1, "image-to-text", "acme/i2t", TaskStatus.RUNNING),
        TaskState(2, "summarization", None, TaskStatus.FAILED, error="boom\nbad"),
    )
    text = status_text(Progress(Stage.RUNNING, "Running tasks (1/3 finished)", tasks))
    lines = text.split("\n")
    assert lines[0] == "⚙️ Running tasks (1/3 finished)…"
    assert lines[1] == "✅ `0` text-to-image · `acme/t2i`"
    assert lines[2] == "⏳ `1` image-to-text · `acme/i2t`"
    assert lines[3].startswith("❌ `2` summarization") and "boom bad" in lines[3]
    assert status_text(Progress(Stage.PLANNING, "")).startswith("🧠 Planning the tasks")


def test_status_with_many_tasks_stays_within_a_message() -> None:
    tasks = tuple(
        TaskState(i, "text-to-image", "m/" + "x" * 80, TaskStatus.DONE) for i in range(60)
    )
    text = status_text(Progress(Stage.RUNNING, "", tasks))
    assert len(text) <= MESSAGE_LIMIT and text.endswith("more")


def test_done_text_lists_the_records() -> None:
    reply = Reply("hi", tasks=(TaskRecord(0, "summarization", "acme/s", TaskStatus.DONE),))
    assert done_text(reply, 2.345) == "✅ Done in 2.3 s\n✅ `0` summarization · `acme/s`"


def test_plan_and_models_text() -> None:
    preview = PlanPreview(
        (
            PlannedStep(0, "text-to-image", (), {"text": "a cat"}, "acme/t2i", "most downloaded"),
            PlannedStep(1, "image-to-text", (0,), {"image": "<resource>-0"}, None, None),
        )
    )
    text = plan_text(preview)
    assert "2 tasks" in text and "`0` **text-to-image** → `acme/t2i`" in text
    assert "`1` **image-to-text** after 0 → no model" in text and "'a cat'" in text
    assert plan_text(PlanPreview((), note="I would answer directly.")).endswith("directly.")
    models = {"summarization": [ModelChoice("acme/s", "summarization", 1234, "short")]}
    assert models_text(models) == "**summarization**\n• `acme/s` (1,234 downloads) — short"
    assert "No models" in models_text({})
