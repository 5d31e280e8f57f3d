"""The pre-commit hooks run the same lint as ``make lint``."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]


def lint_commands() -> list[str]:
    """The commands of the Makefile's ``lint`` target, without ``$(VENV)/bin/``."""
    text = (ROOT / "Makefile").read_text(encoding="utf-8")
    body = text.split("\nlint:", 1)[1].split("\n\n", 1)[0]
    lines = [line.strip() for line in body.splitlines()[1:] if line.startswith("\t")]
    return [re.sub(r"^\$\(VENV\)/bin/", "", line) for line in lines]


def test_pre_commit_runs_what_make_lint_runs() -> None:
    config = yaml.safe_load((ROOT / ".pre-commit-config.yaml").read_text(encoding="utf-8"))
    hooks = [h for repo in config["repos"] for h in repo["hooks"]]
    entries = [h["entry"].removeprefix(".venv/bin/").replace(" --force-exclude", "") for h in hooks]
    for command in lint_commands():
        # ruff check . / ruff format --check . / mypy: the hooks get the files instead of "."
        assert command.removesuffix(" .") in entries, (command, entries)
    mypy = next(h for h in hooks if h["id"] == "mypy")
    assert mypy["pass_filenames"] is False  # mypy checks what pyproject.toml names, all of it
