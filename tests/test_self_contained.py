"""The tests need nothing beside the checkout: a fresh clone passes on its own.

Data the tests read lives in ``tests/data``; a path that climbs out of the
repository (to a folder some developers keep next to it) works on their
machine and fails on everybody else's.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
_PARENTS = re.compile(r"\.parents\[(\d+)\]")
# ROOT.parent, or a Path built from a literal that starts by going up a folder
# (hostile "../" strings handed to the code under test are not paths it reads)
_CLIMBS = re.compile(r"""\bROOT\.parent\b|Path\(\s*["']\.\./""")


def _climbs_out(path: Path, line: str) -> bool:
    """``Path(__file__).parents[N]`` above the repository, ``ROOT.parent``,
    or ``Path("../…")``."""
    depth = len(path.relative_to(ROOT).parts)  # parents[depth - 1] is ROOT
    if "__file__" in line and any(int(n) >= depth for n in _PARENTS.findall(line)):
        return True
    return bool(_CLIMBS.search(line))


def test_no_test_reads_a_folder_beside_the_checkout() -> None:
    offenders = [
        f"{path.relative_to(ROOT)}:{n}"
        for path in sorted((ROOT / "tests").rglob("*.py"))
        if path.name != "test_self_contained.py"
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if _climbs_out(path, line)
    ]
    assert offenders == []


def test_the_guard_sees_each_way_out() -> None:
    deep = ROOT / "tests" / "core" / "x.py"  # parents[2] is the repository
    assert _climbs_out(deep, 'DATA = Path(__file__).resolve().parents[3] / "data"')
    assert _climbs_out(deep, 'DATA = ROOT.parent / "data"')
    assert _climbs_out(deep, 'DATA = Path("../data/facts.json")')
    assert not _climbs_out(deep, 'DATA = Path(__file__).resolve().parents[2] / "tests"')
    assert not _climbs_out(deep, 'DATA = Path(__file__).resolve().parents[1] / "data"')
