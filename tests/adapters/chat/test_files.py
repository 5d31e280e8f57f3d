"""How files are sent: packed by count and total size, the first group on the
last text message."""

from __future__ import annotations

from adapters.chat import Limits, OutFile, Outgoing
from adapters.chat.files import compose, pack_files


def file(name: str, size: int) -> OutFile:
    return OutFile(name, b"x" * size, "application/octet-stream")


def test_pack_files_respects_count_and_total_size() -> None:
    groups = pack_files([file(f"f{i}", 10) for i in range(23)], 1000, 10)
    assert [len(g) for g in groups] == [10, 10, 3]
    groups = pack_files([file("a", 600), file("b", 600), file("c", 300)], 1000, 10)
    assert [[f.name for f in g] for g in groups] == [["a"], ["b", "c"]]


def test_compose_puts_files_on_the_last_text_message_then_extra_messages() -> None:
    text = "\n".join("y" * 100 for _ in range(30))  # > 2000 chars
    messages = compose(text, [file(f"f{i}", 1) for i in range(12)], Limits(2000, 10_000))
    texts = [m for m in messages if m.text]
    assert len(texts) == 2 and not texts[0].files and len(texts[1].files) == 10
    assert messages[-1].text is None and len(messages[-1].files) == 2
    assert compose("", [file("a", 1)], Limits(2000, 10)) == [Outgoing(None, (file("a", 1),))]
