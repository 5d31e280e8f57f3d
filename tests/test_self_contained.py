"""The tests need nothing beside the checkout: a fresh clone passes on its own.

Data the tests read lives in ``tests/data``; a path leaving the repository
(``../shared``, the folder some developers keep beside it) works on their
machine and fails on everybody else's.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# `ROOT.parent / "shared"`, `parents[3] / "shared"`, "../shared/data/…"
_OUTSIDE = re.compile(r"""/\s*["']shared["']|\.\./shared\b""")


def test_no_test_reads_a_folder_beside_the_checkout() -> None:
    offenders = [
        f"{path.relative_to(ROOT)}:{n}"
        for path in sorted((ROOT / "tests").rglob("*.py"))
        if path.name != "test_self_contained.py"
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if _OUTSIDE.search(line)
    ]
    assert offenders == []
