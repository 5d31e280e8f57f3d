"""Errors carry data: every RunFailed / InputRejected the code builds names a
code (``ErrorCode.X`` in the core, ``ChatCode.X`` or ``ErrorCode.X`` in the
adapters); none is built from a sentence any more, so each sentence is in one
table (core/errors.py, adapters/chat/messages.py)."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).parents[2]
BUILT = {"InputRejected", "RunFailed", "BudgetExhausted"}
CODES = {"ErrorCode", "ChatCode"}


def uncoded_lines(source: str) -> list[int]:
    """The lines of ``source`` that build an error whose first argument is
    not a code (a sentence, an f-string, a variable)."""
    lines = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        name = func.id if isinstance(func, ast.Name) else getattr(func, "attr", None)
        if name not in BUILT:
            continue
        first = node.args[0] if node.args else None
        coded = (
            isinstance(first, ast.Attribute)
            and isinstance(first.value, ast.Name)
            and first.value.id in CODES
        )
        if not coded:
            lines.append(node.lineno)
    return lines


def uncoded(folder: str) -> list[str]:
    return [
        f"{path.relative_to(ROOT)}:{line}"
        for path in sorted((ROOT / folder).rglob("*.py"))
        for line in uncoded_lines(path.read_text())
    ]


def test_the_core_builds_no_error_from_a_sentence() -> None:
    assert uncoded("core") == []


def test_the_adapters_build_no_error_from_a_sentence() -> None:
    assert uncoded("adapters") == []


def test_the_check_finds_sentences_and_passes_codes() -> None:
    source = (
        'raise InputRejected(f"{name} is empty")\n'
        'raise RunFailed("no plan")\n'
        "raise errors.RunFailed(message)\n"
        "raise InputRejected(ErrorCode.FILE_EMPTY, file=name)\n"
        "raise InputRejected(ChatCode.FILE_MISSING, file=name)\n"
    )
    assert uncoded_lines(source) == [1, 2, 3]
