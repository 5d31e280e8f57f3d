"""The environment an operator would give ``python -m bot``, pointing at the
loopback fakes: one place for every test that runs the bot as a process."""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from tests.fakes.agent_fixture import write_test_catalog

if TYPE_CHECKING:
    from tests.fakes.hf_fake import FakeHF
    from tests.fakes.openai_fake import FakeLLM

ROOT = Path(__file__).resolve().parents[2]


def clean_env(tmp_path: Path) -> dict[str, str]:
    """This machine's environment without any LLM/HF/platform settings, with
    the store under ``tmp_path`` and the project importable.  The per-user
    data directory (the terminal's log file, a CLI worker's socket) is under
    ``tmp_path`` too, never this user's own."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("OPENAI_", "HF_", "DISCORD", "SLACK"))
    }
    env.update(
        DATABASE_URL=f"sqlite+aiosqlite:///{tmp_path / 'bot.db'}",
        MEDIA_DIR=str(tmp_path / "media"),
        PYTHONPATH=str(ROOT),
        XDG_DATA_HOME=str(tmp_path / "xdg"),
    )
    return env


def fake_env(
    tmp_path: Path, llm: FakeLLM, hf: FakeHF, *, api_key: str = "sk-test", **extra: str
) -> dict[str, str]:
    """``clean_env`` plus the LLM and HF fakes and the test catalog."""
    env = clean_env(tmp_path)
    env.update(
        OPENAI_API_KEY=api_key,
        OPENAI_BASE_URL=llm.base_url,
        HF_INFERENCE_URL=hf.base_url,
        MODEL_CATALOG=str(write_test_catalog(tmp_path / "catalog.jsonl")),
    )
    env.update(extra)
    return env


async def run_bot(
    *args: str, env: dict[str, str], cwd: Path, within: float = 60.0
) -> tuple[int, str, str]:
    """``python -m bot ARGS`` to its end: exit code, stdout, stderr (it must
    stop within ``within`` seconds, a generous bound: it must not hang)."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "bot", *args,
        env=env, cwd=cwd, stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    try:
        out, err = await asyncio.wait_for(proc.communicate(), within)
    except TimeoutError:
        proc.kill()
        await proc.wait()
        raise AssertionError(f"python -m bot {args[0] if args else ''} did not stop") from None
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()
