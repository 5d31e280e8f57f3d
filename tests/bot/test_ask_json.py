"""``ask --json`` prints one JSON object on stdout whatever happens: a
missing setting, a bad ``--file``, an unreachable language model, a refused
request, Ctrl-C, SIGTERM, a CLI worker that dies.  Real processes against
the loopback fakes, run here and through ``python -m bot serve``."""

from __future__ import annotations

import asyncio
import json
import signal
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from tests.bot.test_worker import Worker, env_for, serving
from tests.fakes import process_env
from tests.fakes.hf_fake import FakeHF
from tests.fakes.loopback import free_port
from tests.fakes.openai_fake import FakeLLM

WITHIN = 60.0  # a hang guard, not a duration under test
SHAPE = {
    "answer",
    "status",
    "error",
    "message",
    "fallback",
    "request_id",
    "tasks",
    "files",
    "usage",
    "timings",
}


@pytest.fixture
async def workers() -> AsyncIterator[list[Worker]]:
    """CLI workers a test starts, stopped at its end whatever happened."""
    started: list[Worker] = []
    yield started
    for w in started:
        await w.stop()


def one_object(out: str) -> dict[str, Any]:
    """stdout holds exactly one JSON object, on one line, in the documented shape."""
    assert out.endswith("\n") and out.count("\n") == 1, out
    data = json.loads(out)
    assert isinstance(data, dict) and set(data) == SHAPE, data
    return data


def failed_before_the_agent(out: str, status: str = "error") -> dict[str, Any]:
    data = one_object(out)
    assert data["status"] == status and data["error"] is True
    assert data["answer"] == "" and data["tasks"] == [] and data["files"] == []
    assert isinstance(data["message"], str) and data["message"]
    return data


async def ask_json(env: dict[str, str], cwd: Path, *args: str) -> tuple[int, str, str]:
    return await process_env.run_bot("ask", *args, "--json", env=env, cwd=cwd)


# -- in its own process ------------------------------------------------------------------


async def test_without_any_llm_setting(tmp_path: Path) -> None:
    code, out, err = await ask_json(process_env.clean_env(tmp_path), tmp_path, "hello")
    assert code == 2
    data = failed_before_the_agent(out)
    assert "HF_TOKEN" in data["message"] and "OPENAI_API_KEY" in data["message"]
    assert "error:" not in err  # said once, in the object


async def test_an_invalid_setting(tmp_path: Path) -> None:
    env = process_env.clean_env(tmp_path) | {"LOG_FORMAT": "yaml"}
    code, out, _ = await ask_json(env, tmp_path, "hello")
    assert code == 2
    assert failed_before_the_agent(out)["message"].startswith("invalid configuration: LOG_FORMAT")


async def test_a_missing_file(tmp_path: Path, llm_fake: FakeLLM, hf_fake: FakeHF) -> None:
    env = env_for(tmp_path, llm_fake, hf_fake)
    code, out, err = await ask_json(env, tmp_path, "x", "--file", "nope.png")
    assert code == 2
    assert failed_before_the_agent(out)["message"] == "nope.png: no such file"
    assert err == ""
    assert llm_fake.requests == []


async def test_an_unreachable_language_model(tmp_path: Path) -> None:
    env = process_env.clean_env(tmp_path) | {
        "OPENAI_API_KEY": "sk-test-json",
        "OPENAI_BASE_URL": f"http://127.0.0.1:{free_port()}/v1",
        "LLM_MAX_RETRIES": "0",
        "DATA_DIR": str(tmp_path),
    }
    code, out, _ = await ask_json(env, tmp_path, "hello")
    assert code == 1
    data = one_object(out)
    assert data["status"] == "failed" and data["error"] is True and data["message"] is None
    assert "could not be reached. Is its server running?" in data["answer"]


async def test_a_refused_request(tmp_path: Path, llm_fake: FakeLLM, hf_fake: FakeHF) -> None:
    code, out, _ = await ask_json(env_for(tmp_path, llm_fake, hf_fake), tmp_path, "   ")
    assert code == 1
    data = one_object(out)
    assert data["status"] == "refused" and data["error"] is True
    assert "empty" in data["answer"]


async def interrupted(
    env: dict[str, str], cwd: Path, llm: FakeLLM, sig: signal.Signals
) -> tuple[int, str]:
    """``ask --json`` stopped by ``sig`` while the planning call waits."""
    llm.gate = asyncio.Event()
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "bot", "ask", "hello", "--json",
        env=env, cwd=cwd, stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    try:
        await llm.wait_in_flight(within=WITHIN)
        proc.send_signal(sig)
        out, err = await asyncio.wait_for(proc.communicate(), WITHIN)
    finally:
        llm.gate.set()
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    assert proc.returncode is not None
    assert "Traceback" not in err.decode(), err.decode()
    return proc.returncode, out.decode()


async def test_ctrl_c(tmp_path: Path, llm_fake: FakeLLM, hf_fake: FakeHF) -> None:
    env = env_for(tmp_path, llm_fake, hf_fake)
    code, out = await interrupted(env, tmp_path, llm_fake, signal.SIGINT)
    assert code == 130
    data = failed_before_the_agent(out, "interrupted")
    assert data["message"] == "stopped by Ctrl-C before the answer"


async def test_sigterm(tmp_path: Path, llm_fake: FakeLLM, hf_fake: FakeHF) -> None:
    env = env_for(tmp_path, llm_fake, hf_fake)
    code, out = await interrupted(env, tmp_path, llm_fake, signal.SIGTERM)
    assert code == 143
    assert failed_before_the_agent(out, "interrupted")["message"].startswith("stopped by SIGTERM")


# -- through the CLI worker ----------------------------------------------------------------


async def test_through_the_worker_a_missing_file(
    tmp_path: Path, llm_fake: FakeLLM, hf_fake: FakeHF, workers: list[Worker]
) -> None:
    env = env_for(tmp_path, llm_fake, hf_fake)
    worker = await serving(env, tmp_path, workers)
    code, out, err = await ask_json(env, tmp_path, "x", "--file", "nope.png")
    assert (code, err) == (2, "")
    assert worker.commands() == 1
    assert failed_before_the_agent(out)["message"] == "nope.png: no such file"


async def test_through_the_worker_ctrl_c(
    tmp_path: Path, llm_fake: FakeLLM, hf_fake: FakeHF, workers: list[Worker]
) -> None:
    env = env_for(tmp_path, llm_fake, hf_fake)
    await serving(env, tmp_path, workers)
    code, out = await interrupted(env, tmp_path, llm_fake, signal.SIGINT)
    assert code == 130
    assert failed_before_the_agent(out, "interrupted")["message"].startswith("stopped by Ctrl-C")


async def test_a_worker_killed_mid_request(
    tmp_path: Path, llm_fake: FakeLLM, hf_fake: FakeHF, workers: list[Worker]
) -> None:
    env = env_for(tmp_path, llm_fake, hf_fake)
    worker = await serving(env, tmp_path, workers)
    llm_fake.gate = asyncio.Event()  # the planning call waits here
    ask = asyncio.ensure_future(ask_json(env, tmp_path, "hello"))
    try:
        await llm_fake.wait_in_flight(within=WITHIN)
        worker.proc.kill()
        code, out, err = await ask
    finally:
        llm_fake.gate.set()
    assert code == 1 and "error:" not in err
    data = failed_before_the_agent(out)
    assert data["message"] == (
        f"the CLI worker (pid {worker.proc.pid}) stopped before the command finished; run it again"
    )
