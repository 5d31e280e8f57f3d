"""What ``python -m bot`` loads: a command imports only what it uses.

Start-up time is mostly imports (the OpenAI SDK, SQLAlchemy, alembic, the
Hub client each cost a large part of a second), so these tests read the
interpreter's own import log (``python -X importtime``) of real processes:
``--help`` loads none of them, and ``ask`` on a database already at head
does not load alembic (the schema check is one query), nor, on SQLite,
SQLAlchemy's PostgreSQL dialect (docs/speed.md).
"""

from __future__ import annotations

import asyncio
import json
import re
import sys
from pathlib import Path

from tests.fakes import process_env
from tests.fakes.agent_fixture import serve_all
from tests.fakes.hf_fake import FakeHF
from tests.fakes.openai_fake import FakeLLM

HEAVY = ("openai", "sqlalchemy", "alembic", "huggingface_hub", "pydantic_settings", "numpy")
_IMPORTED = re.compile(r"^import time:\s+\d+ \|\s+\d+ \|\s*([\w.]+)$", re.MULTILINE)


async def run_bot(*args: str, env: dict[str, str], cwd: Path) -> tuple[int, str, set[str]]:
    """``python -X importtime -m bot ARGS``: exit code, stdout, top-level packages imported."""
    code, out, modules = await run_bot_modules(*args, env=env, cwd=cwd)
    return code, out, {name.split(".")[0] for name in modules}


async def run_bot_modules(*args: str, env: dict[str, str], cwd: Path) -> tuple[int, str, set[str]]:
    """``python -X importtime -m bot ARGS``: exit code, stdout, every module imported."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-X", "importtime", "-m", "bot", *args,
        env=env, cwd=cwd, stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    out, err = await asyncio.wait_for(proc.communicate(), 120)
    assert proc.returncode is not None
    text = err.decode()
    modules = set(_IMPORTED.findall(text))
    assert modules, text[-2000:]  # the log was read
    return proc.returncode, out.decode(), modules


async def test_help_loads_no_sdk(tmp_path: Path) -> None:
    code, out, packages = await run_bot("--help", env=process_env.clean_env(tmp_path), cwd=tmp_path)
    assert code == 0 and "ask" in out
    assert packages.isdisjoint(HEAVY), sorted(packages & set(HEAVY))
    assert "asyncio" not in packages


async def test_ask_at_head_does_not_load_alembic(
    tmp_path: Path, llm_fake: FakeLLM, hf_fake: FakeHF
) -> None:
    serve_all(hf_fake)
    plan = '[{"task": "text-to-image", "id": 0, "dep": [-1], "args": {"text": "a cat"}}]'
    env = process_env.fake_env(tmp_path, llm_fake, hf_fake)

    llm_fake.reply("plan", plan)
    code, _, first = await run_bot("ask", "draw a cat", "--json", env=env, cwd=tmp_path)
    assert code == 0
    assert "alembic" in first  # a new database: migrated

    llm_fake.reply("plan", plan)
    code, out, modules = await run_bot_modules("ask", "draw a dog", "--json", env=env, cwd=tmp_path)
    second = {name.split(".")[0] for name in modules}
    assert code == 0
    assert json.loads(out)["tasks"][0]["status"] == "done"
    assert "alembic" not in second  # at head: one query, no migration machinery
    assert {"openai", "sqlalchemy"} <= second  # what the request itself needs
    assert "sqlalchemy.dialects.sqlite" in modules
    assert "sqlalchemy.dialects.postgresql" not in modules  # SQLite: PostgreSQL's stays unread


async def test_ask_handed_to_a_worker_loads_nothing_heavy(
    tmp_path: Path, llm_fake: FakeLLM, hf_fake: FakeHF
) -> None:
    """With ``python -m bot serve`` running, ``ask`` is a thin client: no SDK,
    no settings (pydantic), not even asyncio."""
    serve_all(hf_fake)
    env = process_env.fake_env(tmp_path, llm_fake, hf_fake, DATA_DIR=str(tmp_path))
    worker = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "bot", "serve",
        env=env, cwd=tmp_path, stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    try:
        assert worker.stderr is not None
        async with asyncio.timeout(60):
            async for line in worker.stderr:
                if b"CLI worker listening on" in line:
                    break
        plan = '[{"task": "text-to-image", "id": 0, "dep": [-1], "args": {"text": "a cat"}}]'
        llm_fake.reply("plan", plan)
        code, out, packages = await run_bot("ask", "draw", "--json", env=env, cwd=tmp_path)
        assert code == 0
        assert json.loads(out)["tasks"][0]["task"] == "text-to-image"
        heavy = {*HEAVY, "pydantic", "asyncio", "adapters"}
        assert packages.isdisjoint(heavy), sorted(packages & heavy)
    finally:
        worker.terminate()
        await asyncio.wait_for(worker.communicate(), 60)
