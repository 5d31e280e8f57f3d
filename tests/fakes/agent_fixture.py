"""A real Agent, built by the composition root, wired to the loopback fakes.

``agent`` is what adapter tests use; ``agent_env`` also hands back the fakes,
the settings and the catalog so core tests can script them.  The catalog has
two models per task (``acme/<task>-a`` more downloaded than ``-b``) and the
HF fake serves every one of them with a realistic default answer.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from bot.app import open_agent
from bot.settings import Settings
from core.agent import Agent
from core.tasks import TASKS
from tests.fakes.hf_fake import FakeHF
from tests.fakes.openai_fake import FakeLLM

REMOTE_TASKS = [t for t in TASKS if t not in ("controlnet-sd", "video-classification")]


def model_a(task: str) -> str:
    return f"acme/{task}-a"


def model_b(task: str) -> str:
    return f"acme/{task}-b"


def write_test_catalog(path: Path) -> Path:
    lines = []
    for task in TASKS:
        for suffix, downloads in (("a", 2000), ("b", 1000)):
            lines.append(
                json.dumps(
                    {
                        "id": f"acme/{task}-{suffix}",
                        "task": task,
                        "downloads": downloads,
                        "likes": downloads // 10,
                        "description": f"test model {suffix} for {task}",
                    }
                )
            )
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def make_settings(tmp_path: Path, llm: FakeLLM, hf: FakeHF, **overrides: Any) -> Settings:
    values: dict[str, Any] = {
        "openai_api_key": "sk-test-not-a-secret",
        "openai_base_url": llm.base_url,
        "llm_model": "fake-model",
        "llm_timeout": 10.0,
        "llm_max_retries": 0,
        "hf_inference_url": hf.base_url,
        "hf_token": "hf_test_token",
        "model_catalog": write_test_catalog(tmp_path / "catalog.jsonl"),
        "database_url": f"sqlite+aiosqlite:///{tmp_path / 'bot.db'}",
        "media_dir": tmp_path / "media",
        "task_timeout": 5.0,
        # the LLM is asked at once (tests of SELECTION_DELAY set their own)
        "selection_delay": 0.0,
        # tests and benchmarks send many in a row
        "requests_per_user_per_minute": 0,
        "requests_per_user_per_day": 0,
        "llm_tokens_per_user_per_day": 0,
        "requests_per_server_per_minute": 0,
        "requests_per_server_per_day": 0,
        "llm_tokens_per_server_per_day": 0,
    }
    values.update(overrides)
    return Settings(_env_file=None, **values)  # type: ignore[call-arg]


def serve_all(hf: FakeHF) -> None:
    for task in REMOTE_TASKS:
        hf.serve(model_a(task), task)
        hf.serve(model_b(task), task)


@dataclass
class AgentEnv:
    agent: Agent
    llm: FakeLLM
    hf: FakeHF
    settings: Settings
    tmp_path: Path


@asynccontextmanager
async def open_agent_env(
    tmp_path: Path, llm: FakeLLM, hf: FakeHF, **overrides: Any
) -> AsyncIterator[AgentEnv]:
    serve_all(hf)
    settings = make_settings(tmp_path, llm, hf, **overrides)
    async with open_agent(settings) as agent:
        yield AgentEnv(agent, llm, hf, settings, tmp_path)


@pytest.fixture
async def agent_env(tmp_path: Path, llm_fake: FakeLLM, hf_fake: FakeHF) -> AsyncIterator[AgentEnv]:
    async with open_agent_env(tmp_path, llm_fake, hf_fake) as env:
        yield env


@pytest.fixture
async def agent(agent_env: AgentEnv) -> Agent:
    """A real Agent on the fakes (LLM: ``llm_fake``, models: ``hf_fake``, SQLite)."""
    return agent_env.agent
