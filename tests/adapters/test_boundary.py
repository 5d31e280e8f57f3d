"""Adapters see the core only through core.types and core.errors, and never
import the bot (bot/app.py maps its settings to each adapter's config).

ruff enforces it (adapters/ruff.toml bans every other core module, and bot);
this checks that list is complete, so a core module added later is banned too,
that ruff really reports an adapter importing the core's insides or the bot,
and that no adapter module imports the bot today."""

from __future__ import annotations

import ast
import pkgutil
import subprocess
import sys
import tomllib
from pathlib import Path

import core

ROOT = Path(__file__).parents[2]
ALLOWED = {"types", "errors", "media_files"}  # media_files: plain helpers


def banned() -> set[str]:
    config = tomllib.loads((ROOT / "adapters" / "ruff.toml").read_text())
    return set(config["lint"]["flake8-tidy-imports"]["banned-api"])


def test_every_core_module_but_types_and_errors_is_banned_in_adapters() -> None:
    modules = {m.name for m in pkgutil.iter_modules(core.__path__)}
    missing = {f"core.{m}" for m in modules - ALLOWED} - banned()
    assert not missing, f"add {sorted(missing)} to adapters/ruff.toml's banned-api"
    assert not {f"core.{m}" for m in ALLOWED} & banned()


def test_ruff_reports_an_adapter_that_imports_the_cores_insides() -> None:
    probe = (
        "from core.agent import Agent\nfrom core.types import Request\n\nprint(Agent, Request)\n"
    )
    found = subprocess.run(
        [sys.executable, "-m", "ruff", "check", "--no-cache", "--select", "TID251",
         "--output-format", "concise", "--stdin-filename", "adapters/probe.py", "-"],
        input=probe, cwd=ROOT, capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert "TID251 `core.agent` is banned" in found.stdout, found.stdout + found.stderr
    assert found.stdout.count("TID251") == 1  # core.types is fine


def ruff_tid251(source: str) -> str:
    found = subprocess.run(
        [sys.executable, "-m", "ruff", "check", "--no-cache", "--select", "TID251",
         "--output-format", "concise", "--stdin-filename", "adapters/probe.py", "-"],
        input=source, cwd=ROOT, capture_output=True, text=True, check=False,
    )  # fmt: skip
    return found.stdout + found.stderr


def test_ruff_reports_an_adapter_that_imports_the_bot() -> None:
    probe = (
        "from typing import TYPE_CHECKING\n\nimport bot.app\n\n"
        "if TYPE_CHECKING:\n    from bot.settings import Settings\n\n"
        "print(bot.app)\n\n\ndef f(s: Settings) -> None: ...\n"
    )
    out = ruff_tid251(probe)
    assert out.count("TID251 `bot` is banned") == 2, out  # type-only imports too
    assert "TID251" not in ruff_tid251("import botocore\n\nprint(botocore)\n")


def bot_imports(path: Path) -> list[str]:
    """``file:line`` of each import of ``bot`` (or a submodule) in ``path``."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0:
            names = [node.module or ""]
        else:
            continue
        if any(n == "bot" or n.startswith("bot.") for n in names):
            found.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    return found


def test_no_adapter_imports_the_bot() -> None:
    files = sorted((ROOT / "adapters").rglob("*.py"))
    assert len(files) > 10  # the adapters were found
    offenders = [hit for f in files for hit in bot_imports(f)]
    assert not offenders, f"adapters import the bot (pass a config instead): {offenders}"
