"""What a new user meets first: the console script, the licence, where the data
lives (and that an earlier ``./data`` keeps being used), what ``db prune-media``
says it kept, an unknown task for ``models list``, and a terminal-friendly
``.env.example``."""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import pytest

from bot import commands
from bot.app import open_store
from bot.settings import Settings
from tests.core.store.builders import CHANNEL, stored, turn
from tests.fakes.process_env import clean_env

ROOT = Path(__file__).resolve().parents[2]
STORE_VARS = ("DATA_DIR", "DATABASE_URL", "MEDIA_DIR", "PRUNE_MIN_AGE")


@pytest.fixture
def elsewhere(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A working directory of its own and a per-user data home under tmp_path."""
    for var in STORE_VARS:
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    return work


def settings() -> Settings:
    return Settings(_env_file=None)  # type: ignore[call-arg]


def process_env(tmp_path: Path) -> dict[str, str]:
    env = {k: v for k, v in clean_env(tmp_path).items() if k not in STORE_VARS}
    return env | {"XDG_DATA_HOME": str(tmp_path / "xdg")}


def bot(*argv: str, cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "bot", *argv],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


# --- the data directory -------------------------------------------------------


def test_data_lives_in_the_per_user_directory_not_the_working_one(elsewhere: Path) -> None:
    s = settings()
    home = elsewhere.parent / "xdg" / "hugginggpt-bot"
    assert s.store.data_dir == home
    assert s.store.database_url == f"sqlite+aiosqlite:///{home.as_posix()}/bot.db"
    assert s.store.media_dir == home / "media"
    assert "DATA_DIR" in s.store.data_dir_origin
    assert not (elsewhere / "data").exists()


def test_data_dir_setting_moves_database_and_media_together(
    elsewhere: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HOME", str(elsewhere.parent))
    monkeypatch.setenv("DATA_DIR", "~/bot-data")
    s = settings()
    assert s.store.data_dir == elsewhere.parent / "bot-data"
    assert s.store.database_url.endswith(f"{(elsewhere.parent / 'bot-data').as_posix()}/bot.db")
    assert s.store.media_dir == elsewhere.parent / "bot-data" / "media"
    # each can still be set on its own, and wins
    monkeypatch.setenv("DATABASE_URL", "postgresql+asyncpg://u@db/x")
    monkeypatch.setenv("MEDIA_DIR", str(elsewhere / "m"))
    s = settings()
    assert (s.store.database_url, s.store.media_dir) == (
        "postgresql+asyncpg://u@db/x",
        elsewhere / "m",
    )


@pytest.mark.parametrize("earlier", ["bot.db", "media"])
def test_an_earlier_data_directory_here_keeps_being_used(elsewhere: Path, earlier: str) -> None:
    legacy = elsewhere / "data"
    legacy.mkdir()
    if earlier == "bot.db":
        (legacy / "bot.db").write_bytes(b"")
    else:
        (legacy / "media").mkdir()
    s = settings()
    assert s.store.data_dir == legacy
    assert s.store.database_url == f"sqlite+aiosqlite:///{legacy.as_posix()}/bot.db"
    assert s.store.media_dir == legacy / "media"
    # the log line says why, and how to use it from anywhere or move it
    assert "earlier version" in s.store.data_dir_origin
    assert "DATA_DIR" in s.store.data_dir_origin
    assert str(elsewhere.parent / "xdg" / "hugginggpt-bot") in s.store.data_dir_origin


def test_an_empty_data_directory_here_is_not_mistaken_for_history(elsewhere: Path) -> None:
    (elsewhere / "data").mkdir()  # a project's own data/ folder, say
    assert settings().store.data_dir == elsewhere.parent / "xdg" / "hugginggpt-bot"


async def test_a_user_history_in_an_earlier_data_directory_is_found(
    tmp_path: Path, elsewhere: Path
) -> None:
    """A database written where earlier versions put it (./data, the old
    default) is the one a later start in that directory opens: its
    conversation is there, and the log line names the directory."""
    legacy = elsewhere / "data"
    old = Settings(  # type: ignore[call-arg]
        _env_file=None,
        database_url="sqlite+aiosqlite:///./data/bot.db",
        media_dir=Path("./data/media"),
    )
    async with open_store(old) as (_db, repo, media):
        photo = await stored(media, "cat.png", b"an old upload")
        await repo.save_turn(turn(CHANNEL, "what is this?", "a cat", uploads=(photo,)))
    assert (legacy / "bot.db").is_file()

    env = process_env(tmp_path) | {"LOG_LEVEL": "INFO"}
    out = bot("db", "prune-media", cwd=elsewhere, env=env)
    assert out.returncode == 0, out.stderr
    assert f"from {legacy / 'media'}" in out.stdout
    assert "kept 1 file that a conversation or an unfinished request still uses" in out.stdout
    assert f"data directory {legacy}" in out.stderr
    assert (legacy / "media").is_dir()
    assert not (tmp_path / "xdg").exists()  # no second, empty history

    async with open_store(settings()) as (_db, repo, _media):
        history = await repo.load_history(CHANNEL)
    assert [(t.role, t.text) for t in history.turns] == [
        ("user", "what is this?"),
        ("assistant", "a cat"),
    ]
    assert list(history.resources) == ["cat.png"]


# --- db prune-media -----------------------------------------------------------


def age(path: Path, seconds: float) -> None:
    then = path.stat().st_mtime - seconds
    os.utime(path, (then, then))


async def test_prune_media_says_what_it_removed_kept_and_why(
    elsewhere: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("DATA_DIR", str(elsewhere / "d"))
    s = settings()
    assert s.store.prune_min_age == 3600
    async with open_store(s) as (_db, repo, media):
        used = await stored(media, "a.png", b"still in a conversation")
        await repo.save_turn(turn(CHANNEL, "q", "a", uploads=(used,)))
        gone = await stored(media, "b.png", b"orphan from long ago")
        young = [await stored(media, f"c{i}.png", b"x" * 1000 * (i + 1)) for i in range(3)]
    for r in (used, gone):
        age(r.path, 2 * 3600)

    assert await commands.db(argparse.Namespace(action="prune-media"), s) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines == [
        f"removed 1 unused file (0.0 MB) from {s.store.media_dir}",
        "kept 1 file that a conversation or an unfinished request still uses",
        "kept 3 unused files (0.0 MB) younger than 1 hour (grace period: a request still "
        "running may not have saved them yet; PRUNE_MIN_AGE sets it)",
    ]
    assert not gone.path.exists() and used.path.exists()
    assert all(r.path.exists() for r in young)

    # a shorter grace period from the environment: the young files go too
    monkeypatch.setenv("PRUNE_MIN_AGE", "90")
    s = settings()
    for r in young:
        age(r.path, 120)
    assert await commands.db(argparse.Namespace(action="prune-media"), s) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines == [
        f"removed 3 unused files (0.0 MB) from {s.store.media_dir}",
        "kept 1 file that a conversation or an unfinished request still uses",
    ]


@pytest.mark.parametrize(
    ("seconds", "said"),
    [
        (3600, "1 hour"),
        (5400, "90 minutes"),
        (2 * 86400, "2 days"),
        (90, "90 seconds"),
        (1, "1 second"),
        (0.5, "0.5 seconds"),
    ],
)
def test_grace_period_in_words(seconds: float, said: str) -> None:
    from core.store.media import PruneReport

    lines = commands.prune_summary(PruneReport(kept_recent=1), Path("/m"), seconds)
    assert f"younger than {said} " in lines[-1]


# --- models list --task -------------------------------------------------------


def test_models_list_names_the_known_tasks_for_an_unknown_one(tmp_path: Path) -> None:
    env = process_env(tmp_path)
    out = bot("models", "list", "--task", "nonsense", cwd=tmp_path, env=env)
    assert out.returncode == 2
    assert out.stdout == ""
    (line,) = out.stderr.strip().splitlines()
    assert line.startswith("error: unknown task 'nonsense'; known tasks: ")
    assert "image-classification" in line and "text-to-speech" in line

    # the paper's name for a task is a name for it
    out = bot("models", "list", "--task", "Image Classification", cwd=tmp_path, env=env)
    assert out.returncode == 0, out.stderr
    (row,) = out.stdout.strip().splitlines()
    assert row.split()[0] == "image-classification"


# --- packaging ----------------------------------------------------------------


def test_console_script_runs_the_cli() -> None:
    script = Path(sys.executable).parent / "hugginggpt-bot"
    assert script.is_file(), "pip install -e . installs the hugginggpt-bot console script"
    out = subprocess.run([script, "--help"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    for command in ("run", "ask", "chat", "db", "models", "doctor"):
        assert command in out.stdout
    assert out.stdout.startswith("usage: hugginggpt-bot ")  # named as it was started
    by_module = subprocess.run(
        [sys.executable, "-m", "bot", "--help"],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
    )
    assert by_module.stdout.startswith("usage: python -m bot ")
    (entry,) = [
        e for e in metadata.entry_points(group="console_scripts") if e.name == "hugginggpt-bot"
    ]
    assert entry.value == "bot.__main__:main"


def test_licence_is_mit_in_the_file_and_the_package_metadata() -> None:
    assert (ROOT / "LICENSE").read_text(encoding="utf-8").startswith("MIT License\n")
    assert metadata.metadata("hugginggpt-bot")["License-Expression"] == "MIT"


def test_changelog_and_contributing_guide_exist() -> None:
    changelog = (ROOT / "CHANGELOG.md").read_text(encoding="utf-8")
    assert "keepachangelog.com" in changelog
    assert re.search(r"^## \[Unreleased\]$", changelog, re.M)
    assert re.search(r"^## \[0\.1\.0\] - \d{4}-\d{2}-\d{2}$", changelog, re.M)
    contributing = (ROOT / "CONTRIBUTING.md").read_text(encoding="utf-8")
    for how in ("make test", "make lint", "make run", "Where things live", "scripts/lock.sh"):
        assert how in contributing, how


# --- .env.example -------------------------------------------------------------


def test_env_example_suits_the_terminal_and_explains_every_setting() -> None:
    text = (ROOT / ".env.example").read_text(encoding="utf-8")
    assert re.search(r"^LOG_LEVEL=WARNING$", text, re.M)
    # copied as it is, it leaves the data where the per-user default puts it
    assert re.search(r"^DATABASE_URL=$", text, re.M)
    assert re.search(r"^MEDIA_DIR=$", text, re.M)
    assert re.search(r"^DATA_DIR=$", text, re.M)
    # each setting follows a comment (one comment may explain a run of related ones)
    unexplained, covered = [], False
    for line in text.splitlines():
        if line.startswith("#"):
            covered = True
        elif not line.strip():
            covered = False
        elif (m := re.match(r"([A-Z][A-Z0-9_]*)=", line)) and not covered:
            unexplained.append(m.group(1))
    assert not unexplained, f"settings with no comment above them: {unexplained}"
