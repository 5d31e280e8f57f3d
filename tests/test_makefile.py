"""The Makefile a new user runs first: ``make test`` runs every suite and
says how each went; the virtualenvs need Python 3.11+ and ``make run``
installs only what running needs, from the lock.  Dry runs (``make -n``) and
a copy of the ``test`` recipe over stand-in targets: nothing is installed."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MAKE = shutil.which("make")  # what the README's two commands need


def make(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    assert MAKE is not None
    return subprocess.run(
        [MAKE, "--no-print-directory", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
    )


def recipe(target: str) -> str:
    """The rule for ``target`` as the Makefile writes it (its recipe lines)."""
    text = (ROOT / "Makefile").read_text(encoding="utf-8")
    body = text.split(f"\n{target}:", 1)[1]
    lines = body.splitlines()[1:]
    kept = []
    for line in lines:
        if not line.startswith("\t"):
            break
        kept.append(line)
    return f"{target}:\n" + "\n".join(kept) + "\n"


INSTALLS = "install:\n\t@true\ninstall-local:\n\t@true\n"


def test_make_test_runs_every_suite_when_one_fails_and_says_how_each_went(tmp_path: Path) -> None:
    ran = tmp_path / "ran"
    stand_ins = INSTALLS + "".join(
        f"{name}:\n\t@echo {name} >> {ran}\n\t@exit {code}\n"
        for name, code in (("lint", 1), ("test-core", 0), ("test-local", 2))
    )
    (tmp_path / "Makefile").write_text(recipe("test") + stand_ins, encoding="utf-8")
    out = make("test", cwd=tmp_path)
    assert out.returncode != 0
    assert ran.read_text().split() == ["lint", "test-core", "test-local"]  # none skipped
    assert out.stdout.strip().splitlines()[-3:] == [
        "lint: FAILED",
        "core tests: passed",
        "local tests: FAILED",
    ]


def test_make_test_passes_when_every_suite_passes(tmp_path: Path) -> None:
    stand_ins = INSTALLS + "".join(
        f"{name}:\n\t@true\n" for name in ("lint", "test-core", "test-local")
    )
    (tmp_path / "Makefile").write_text(recipe("test") + stand_ins, encoding="utf-8")
    out = make("test", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().splitlines() == [
        "lint: passed",
        "core tests: passed",
        "local tests: passed",
    ]


def test_the_local_venv_is_made_while_the_main_suite_runs(tmp_path: Path) -> None:
    """install-local starts before lint and the core suite finish (it runs in the
    background); test-local waits for it, and a failed install shows its output."""
    log = tmp_path / "order"
    stand_ins = (
        "install:\n\t@true\n"
        # finishes only once the core suite has run: a recipe that made the local
        # venv first would wait here until the subprocess timeout
        f"install-local:\n\t@echo local-start >> {log}\n"
        f"\t@while ! grep -q core {log}; do sleep 0.05; done\n"
        f"\t@echo local-done >> {log}\n\t@echo pip said no; exit 3\n"
        f"lint:\n\t@echo lint >> {log}\n"
        f"test-core:\n\t@echo core >> {log}\n"
        f"test-local:\n\t@echo local-tests >> {log}\n\t@exit 1\n"
    )
    (tmp_path / "Makefile").write_text(recipe("test") + stand_ins, encoding="utf-8")
    out = make("test", cwd=tmp_path)
    order = log.read_text().split()
    assert order.index("core") < order.index("local-done")  # ran alongside, not before
    assert order.index("local-done") < order.index("local-tests")  # waited for
    assert "pip said no" in out.stderr and "failed" in out.stderr
    assert out.stdout.strip().splitlines()[-1] == "local tests: FAILED"


def test_an_old_python_is_refused_with_what_to_do(tmp_path: Path) -> None:
    old = tmp_path / "python3.10"
    old.write_text("#!/bin/sh\n[ \"$1\" = --version ] && echo 'Python 3.10.13'\nexit 1\n")
    old.chmod(0o755)
    venv = tmp_path / "venv"
    out = make("install", f"PYTHON={old}", f"VENV={venv}")
    assert out.returncode != 0
    assert "needs Python 3.11 or newer" in out.stderr and "Python 3.10.13" in out.stderr
    assert "PYTHON=python3.11" in out.stderr  # what to do
    assert not venv.exists()  # nothing half made


def test_a_virtualenv_of_another_python_is_made_again(tmp_path: Path) -> None:
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    (venv / ".locked").touch()  # newer than the lock: only the interpreter differs
    (venv / ".installed").touch()
    other = venv / "bin" / "python"
    other.write_text("#!/bin/sh\necho 3.10.13 /usr\n")
    other.chmod(0o755)
    out = make("-n", "install", f"PYTHON={sys.executable}", f"VENV={venv}")
    assert out.returncode == 0, out.stderr
    assert f"rm -rf {venv}" in out.stdout and "--require-hashes -r requirements.txt" in out.stdout


def test_make_run_installs_the_lock_and_the_bot_not_the_dev_tools(tmp_path: Path) -> None:
    out = make("-n", "run", f"PYTHON={sys.executable}", f"VENV={tmp_path / 'venv'}")
    assert out.returncode == 0, out.stderr
    installs = [
        line
        for line in out.stdout.splitlines()
        if "pip install" in line and "--upgrade pip" not in line
    ]
    assert [i.split("pip install -q ", 1)[1] for i in installs if " -q " in i] == [
        "--require-hashes -r requirements.txt",
        "--no-deps -e .",
    ]
    assert "[dev" not in out.stdout


def test_make_install_adds_the_dev_extra_to_the_lock(tmp_path: Path) -> None:
    out = make("-n", "install", f"PYTHON={sys.executable}", f"VENV={tmp_path / 'venv'}")
    assert out.returncode == 0, out.stderr
    lock = out.stdout.index("--require-hashes -r requirements.txt")
    assert lock < out.stdout.index("pip install -q -e '.[dev]'")


def test_the_local_venv_takes_torch_from_the_cpu_index_first(tmp_path: Path) -> None:
    out = make("-n", "install-local", f"PYTHON={sys.executable}", f"LOCAL_VENV={tmp_path / 'v'}")
    assert out.returncode == 0, out.stderr
    torch = out.stdout.index("--extra-index-url https://download.pytorch.org/whl/cpu torch==")
    assert torch < out.stdout.index("pip install -q -e '.[dev,local]'")
