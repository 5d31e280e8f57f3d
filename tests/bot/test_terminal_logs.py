"""The terminal shows the conversation, not log lines: ``ask``, ``chat``,
``doctor`` and ``run`` opening the terminal chat log to
``DATA_DIR/logs/bot.log``; a failure is said once, by the ❌ line.  The
servers keep logging to stderr at LOG_LEVEL."""

from __future__ import annotations

import asyncio
import re
import sys
from pathlib import Path

import pytest

from bot.logs import is_terminal
from bot.settings import Settings
from tests.fakes import process_env
from tests.fakes.loopback import free_port

# A log line as the text format writes it: "2026-11-27 03:12:30,901 WARNING core.llm: …".
LOG_LINE = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} [A-Z]+ ", re.MULTILINE)


def dead_llm_env(tmp_path: Path) -> dict[str, str]:
    """No .env, no LOG_LEVEL (INFO), a language model nothing listens for."""
    env = process_env.clean_env(tmp_path)
    env.pop("LOG_LEVEL", None)
    return env | {
        "OPENAI_API_KEY": "sk-test-logs",
        "OPENAI_BASE_URL": f"http://127.0.0.1:{free_port()}/v1",
        "LLM_MAX_RETRIES": "0",
        "DATA_DIR": str(tmp_path),
    }


def said_once(err: str) -> None:
    """No log line on the terminal; the failure in one line, the ❌ one."""
    assert not LOG_LINE.search(err), err
    (failure,) = [line for line in err.splitlines() if "could not be reached" in line]
    assert failure.startswith("❌ The language model at 127.0.0.1:"), err


async def test_ask_says_a_failure_once_and_logs_to_the_file(tmp_path: Path) -> None:
    code, _, err = await process_env.run_bot(
        "ask", "hello", env=dead_llm_env(tmp_path), cwd=tmp_path
    )
    assert code == 1
    said_once(err)
    logged = (tmp_path / "logs" / "bot.log").read_text(encoding="utf-8")
    assert "WARNING core.llm: llm call failed" in logged
    assert " INFO core.stage: request " in logged  # LOG_LEVEL unset: INFO in the file


async def test_run_without_a_platform_opens_a_quiet_chat(tmp_path: Path) -> None:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "bot", "run",
        env=dead_llm_env(tmp_path), cwd=tmp_path, stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    out, err = await asyncio.wait_for(proc.communicate(b"hello\n/quit\n"), 60)
    assert proc.returncode == 0, err.decode()
    said_once(err.decode())
    assert not LOG_LINE.search(out.decode())
    logged = (tmp_path / "logs" / "bot.log").read_text(encoding="utf-8")
    assert logged.count("WARNING core.llm: llm call failed") == 1


async def test_without_a_writable_log_file_warnings_go_to_stderr(tmp_path: Path) -> None:
    (tmp_path / "logs").write_text("not a directory")
    code, _, err = await process_env.run_bot(
        "ask", "hello", env=dead_llm_env(tmp_path), cwd=tmp_path
    )
    assert code == 1
    assert " WARNING core.llm: llm call failed" in err
    assert " INFO " not in err


@pytest.mark.parametrize(
    ("command", "target", "tokens", "terminal"),
    [
        ("ask", None, False, True),
        ("chat", None, True, True),
        ("doctor", None, False, True),
        ("run", "auto", False, True),  # no platform token: the terminal chat
        ("run", "cli", True, True),
        ("run", "auto", True, False),  # serves the platform: a server's log
        ("run", "slack", True, False),
        ("serve", None, False, False),
        ("db", None, False, False),
    ],
)
def test_which_commands_talk_to_the_terminal(
    tmp_path: Path, command: str, target: str | None, tokens: bool, terminal: bool
) -> None:
    token = "xoxb-test" if tokens else None
    s = Settings(_env_file=None, data_dir=tmp_path, slack_bot_token=token, discord_bot_token=None)  # type: ignore[call-arg]
    assert is_terminal(command, s, target) is terminal
