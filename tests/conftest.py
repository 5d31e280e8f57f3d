"""Shared fixtures: every module in tests/fakes/ is a pytest plugin, so a
fake server dropped there is available to all tests as a fixture."""

from __future__ import annotations

from pathlib import Path

import pytest

# Fakes import each other; rewrite their asserts no matter which loads first.
pytest.register_assert_rewrite("tests.fakes")

pytest_plugins = sorted(
    f"tests.fakes.{p.stem}"
    for p in (Path(__file__).parent / "fakes").glob("*.py")
    if p.stem != "__init__" and not p.stem.startswith("test_")
)
