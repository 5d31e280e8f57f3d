"""Handle allocation: safe basenames, unique within a conversation."""

from __future__ import annotations

import pytest

from core.store import allocate_handle


def test_free_name_is_kept() -> None:
    assert allocate_handle(set(), "photo.png") == "photo.png"


def test_clashes_count_up() -> None:
    taken = {"photo.png"}
    assert allocate_handle(taken, "photo.png") == "photo-2.png"
    taken.add("photo-2.png")
    assert allocate_handle(taken, "photo.png") == "photo-3.png"


@pytest.mark.parametrize(
    ("wanted", "expected"),
    [
        ("../../etc/passwd", "passwd"),
        ("..\\..\\windows\\win.ini", "win.ini"),
        ("", "file"),
        ("..", "file"),
        (".png", "file.png"),
        (".bashrc", "file.bashrc"),
        ("my photo (1).JPG", "my_photo_1.JPG"),
        ("café.png", "cafe.png"),
        ("снимок.png", "file.png"),
        ("a\x00b\nc.txt", "abc.txt"),
        ("archive.tar.gz", "archive.tar.gz"),
    ],
)
def test_sanitising(wanted: str, expected: str) -> None:
    assert allocate_handle(set(), wanted) == expected


def test_long_names_are_cut_keeping_the_extension() -> None:
    name = "x" * 200 + ".png"
    handle = allocate_handle(set(), name)
    assert len(handle) == 64 and handle.endswith(".png")
    second = allocate_handle({handle}, name)
    assert len(second) == 64 and second.endswith("-2.png") and second != handle


def test_result_only_uses_safe_characters() -> None:
    for wanted in ["a/b/c.png", "we!rd*na?me.webp", "tab\there.wav", "~/.ssh/id_rsa"]:
        handle = allocate_handle(set(), wanted)
        assert handle and all(c.isascii() and (c.isalnum() or c in "._-") for c in handle)
        assert "/" not in handle and not handle.startswith(".")
