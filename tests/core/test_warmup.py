"""Warm-ups (core.warmup): what a plan's tasks will need is loaded off the
event loop, once per process, before the tasks need it; and what only some
results need (the drawing library) is not loaded for the others.

The real warm-ups and the lazy imports are checked in a fresh interpreter
(``sys.modules`` of this one already holds everything other tests loaded)."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path

import httpx2
import pytest

from core import agent as agent_module
from core.agent import Agent
from core.catalog import ModelInfo
from core.execution import Executor
from core.experts import remote
from core.http_client import Connections
from core.planning import PlannedTask
from core.postprocess import draws
from core.results import Blob, Box, TaskInputs, TaskResult
from core.routing import ExpertRouter
from core.types import ConversationKey, Request
from core.warmup import DRAWING, PICTURES, SOUND, WARMERS, Warmups, needs
from tests.fakes.agent_fixture import AgentEnv
from tests.fakes.samples import sample_png

ROOT = Path(__file__).resolve().parents[2]


def fresh_python(code: str) -> str:
    """Run ``code`` in a new interpreter in this checkout; its stdout."""
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_a_plans_tasks_name_the_warm_ups_they_need() -> None:
    assert needs(["summarization", "translation"]) == []
    assert needs(["text-to-speech"]) == [SOUND]
    assert needs(["text-to-image", "image-to-text"]) == [PICTURES]
    assert needs(["image-to-text", "object-detection", "text-to-speech"]) == [
        PICTURES,
        DRAWING,
        SOUND,
    ]
    assert needs(["no-such-task"]) == []


def test_each_warm_up_runs_once_in_a_thread_of_its_own_and_a_failure_is_not_fatal(
    caplog: pytest.LogCaptureFixture,
) -> None:
    ran: list[tuple[str, int]] = []

    def record(name: str) -> None:
        ran.append((name, threading.get_ident()))

    def broken() -> None:
        raise RuntimeError("no codec")

    warm = Warmups({"a": lambda: record("a"), "broken": broken, "b": lambda: record("b")})
    assert warm.start(["a", "broken", "b", "unknown"]) == ["a", "broken", "b"]
    assert warm.start(["a", "b"]) == []  # asked before: not queued again
    assert warm.wait(["a", "broken", "b"], timeout=30)
    assert [name for name, _ in ran] == ["a", "b"]
    assert all(thread != threading.get_ident() for _, thread in ran)
    assert warm.done("broken") and warm.done("b")
    assert "warm-up broken failed" in caplog.text


async def test_the_executor_asks_for_its_plans_warm_ups_before_the_first_task_runs() -> None:
    loop_thread = threading.get_ident()
    warmed: list[tuple[str, int]] = []

    def warmer(name: str) -> Callable[[], None]:
        return lambda: warmed.append((name, threading.get_ident()))

    warm = Warmups({PICTURES: warmer(PICTURES), DRAWING: warmer(DRAWING), SOUND: warmer(SOUND)})
    asked_before_run: list[list[str]] = []

    class Expert:
        name = "remote"

        def can_run(self, task: str, model: ModelInfo | None = None) -> bool:
            return True

        async def run(self, task: str, model: ModelInfo, inputs: TaskInputs) -> TaskResult:
            asked_before_run.append(sorted(warm._asked))
            return TaskResult(text="a caption")

        async def aclose(self) -> None:
            pass

    ex = Executor(ExpertRouter("remote", remote=Expert(), local=None), warmups=warm)  # type: ignore[arg-type]
    plan = [
        PlannedTask(0, "image-to-text", [], {"image": "photo.png"}),
        PlannedTask(1, "summarization", [0], {"text": "<resource>-0"}),
    ]

    async def photo(handle: str) -> Blob:
        return Blob("image", "image/png", sample_png())

    models = {t.id: [ModelInfo(f"m/{t.task}", t.task)] for t in plan}
    outcomes = await ex.run(plan, models, load_handle=photo)
    assert all(o.result is not None for o in outcomes.values())
    assert asked_before_run[0] == [PICTURES]  # what image-to-text needs; no audio, no drawing
    assert await asyncio.to_thread(warm.wait, [PICTURES], 30)
    assert [(name, thread != loop_thread) for name, thread in warmed] == [(PICTURES, True)]


def test_only_boxes_and_masks_on_an_input_picture_are_drawn() -> None:
    photo = TaskInputs(image=Blob("image", "image/png", sample_png()))
    boxes = TaskResult(boxes=(Box("cat", 0.9, 1, 1, 5, 5),))
    assert draws("object-detection", photo, boxes)
    assert not draws("object-detection", photo, TaskResult(boxes=()))  # nothing to draw
    assert not draws("object-detection", TaskInputs(), boxes)  # nothing to draw on
    assert not draws("image-to-text", photo, TaskResult(text="a cat"))
    assert not draws("image-classification", photo, TaskResult(text="cat"))


def test_a_result_with_nothing_to_draw_does_not_load_the_drawing_library() -> None:
    out = fresh_python(
        "import sys\n"
        "from core.postprocess import enrich\n"
        "from core.results import Blob, TaskInputs, TaskResult\n"
        "from tests.fakes.samples import sample_png\n"
        "photo = TaskInputs(image=Blob('image', 'image/png', sample_png()))\n"
        "r = TaskResult(text='a cat on a sofa')\n"
        "assert enrich('image-to-text', photo, r) is r\n"
        "print('core.experts.images' in sys.modules, 'numpy' in sys.modules)\n"
    )
    assert out == "False False"


def test_the_audio_warm_up_loads_the_codecs_a_models_audio_needs() -> None:
    out = fresh_python(
        "import sys, threading\n"
        "from core.warmup import PROCESS, SOUND\n"
        "assert 'av' not in sys.modules and 'soundfile' not in sys.modules\n"
        "assert PROCESS.for_tasks(['text-to-speech']) == [SOUND]\n"
        "assert PROCESS.wait([SOUND], 60) and PROCESS.done(SOUND)\n"
        "print(all(m in sys.modules for m in ('av', 'soundfile', 'core.experts.audio')))\n"
    )
    assert out == "True"


async def test_a_long_running_process_warms_every_kind_and_the_first_session_at_start(
    agent: Agent, monkeypatch: pytest.MonkeyPatch
) -> None:
    ran: list[str] = []
    agent.executor.warmups = Warmups({n: (lambda n=n: ran.append(n)) for n in WARMERS})
    built: list[int] = []
    real = remote._new_session

    def counting(pool: Connections | None = None) -> tuple[httpx2.AsyncClient, httpx2.AsyncClient]:
        built.append(threading.get_ident())
        return real(pool)

    monkeypatch.setattr(remote, "_new_session", counting)
    agent.warm_up()
    assert await asyncio.to_thread(agent.executor.warmups.wait, WARMERS, 30)
    assert sorted(ran) == sorted(WARMERS)
    for _ in range(200):  # the session is built in a worker thread
        if built:
            break
        await asyncio.sleep(0.01)
    assert len(built) == 1 and built[0] != threading.get_ident()


@pytest.mark.parametrize(
    ("after", "warmed"),
    [
        (0.0, sorted(WARMERS)),  # the planner takes longer: everything loads meanwhile
        (3600.0, [PICTURES]),  # it answers first: only what its plan needs
    ],
)
async def test_a_planner_still_thinking_leaves_time_to_warm_every_kind(
    agent_env: AgentEnv, monkeypatch: pytest.MonkeyPatch, after: float, warmed: list[str]
) -> None:
    env = agent_env
    asked: list[str] = []
    env.agent.executor.warmups = Warmups({n: (lambda n=n: asked.append(n)) for n in WARMERS})
    monkeypatch.setattr(agent_module, "WARM_WHILE_PLANNING_AFTER", after)
    step = {"task": "text-to-image", "id": 0, "dep": [-1], "args": {"text": "a fox"}}
    env.llm.reply("plan", json.dumps([step]))
    key = ConversationKey("cli", "local", "warm", None)
    reply = await env.agent.handle(Request(key, "u1", "draw a fox"))
    assert not reply.error, reply.text
    assert await asyncio.to_thread(env.agent.executor.warmups.wait, WARMERS, 30)
    assert sorted(asked) == warmed


async def test_warming_up_asks_the_llm_server_its_context_size_before_any_request(
    agent_env: AgentEnv,
) -> None:
    env = agent_env
    env.agent.executor.warmups = Warmups({})  # nothing to load here
    env.agent.warm_up()
    for _ in range(500):  # the GETs go out from a background task
        if env.llm.gets:
            break
        await asyncio.sleep(0.01)
    assert env.llm.gets and env.llm.requests == []  # asked, and no chat call was made
    await env.agent.llm.context_window()  # waits for that probe's end (it may GET twice)
    asked = len(env.llm.gets)
    step = {"task": "text-to-image", "id": 0, "dep": [-1], "args": {"text": "a fox"}}
    env.llm.reply("plan", json.dumps([step]))
    key = ConversationKey("cli", "local", "probe", None)
    reply = await env.agent.handle(Request(key, "u1", "draw a fox"))
    assert not reply.error, reply.text
    assert len(env.llm.gets) == asked  # the request did not ask again
