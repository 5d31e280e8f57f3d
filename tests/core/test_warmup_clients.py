"""The clients warm-up (core.warmup): what every request's first use builds —
SQLAlchemy's mapper configuration and the OpenAI SDK's response models — is
built by it, off the event loop, so a fresh process's first request does not.
Checked in a fresh interpreter (this one has long built both)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from core.warmup import CLIENTS, HUB, WARMERS, needs

ROOT = Path(__file__).resolve().parents[2]


def test_the_clients_warm_up_configures_the_mappers_and_builds_the_sdk_models() -> None:
    code = (
        "from openai.types.chat import ChatCompletion\n"
        "from core.store.models import Base\n"
        "from core.types import Posted\n"
        "from core.warmup import PROCESS, CLIENTS\n"
        "def built(): return (ChatCompletion.__pydantic_complete__, Posted.__pydantic_complete__)\n"
        "before = (Base.registry._new_mappers, *built())\n"
        "assert PROCESS.start([CLIENTS]) == [CLIENTS]\n"
        "assert PROCESS.wait([CLIENTS], 60)\n"
        "print(before, (Base.registry._new_mappers, *built()))\n"
        "import sys\n"
        "print(all(m in sys.modules for m in ('anyio._backends._asyncio', 'encodings.idna')))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split("\n")[:2] == ["(True, False, False) (False, True, True)", "True"]


def test_a_long_running_process_warms_the_clients_a_plan_never_asks_for_them() -> None:
    assert {CLIENTS, HUB} <= set(WARMERS)  # Warmups.all(): run and serve at start
    assert list(WARMERS)[-1] == HUB  # a slow Hub holds back no other warm-up
    tasks = ["text-to-image", "object-detection", "text-to-speech"]
    assert not {CLIENTS, HUB} & set(needs(tasks))
