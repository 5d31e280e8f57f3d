"""Day one with only HF_TOKEN: the shipped catalog, default settings, the
controller on the router's OpenAI-compatible API and every model on Inference
Providers — against the loopback emulation of the 2026 service.

Every task some provider serves gives a result of the right kind through the
whole agent, and no task is offered to the planner that then fails."""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from bot.app import open_agent
from bot.settings import Settings
from core.agent import Agent
from core.experts.providers import SERVED_TASKS
from core.tasks import TASKS
from core.types import Attachment, ConversationKey, Request, TaskStatus
from tests.fakes.hf_service import FakeHFService
from tests.fakes.hf_service_outputs import default_chat_reply
from tests.fakes.openai_fake import stage_of
from tests.fakes.samples import sample_png, sample_wav

KEY = ConversationKey("cli", "local", "one-token", None)
TOKEN = "hf_test_token"


class Controller:
    """The router's chat replies for the controller's stages; the models' own
    chat calls (chat and vision tasks) get the service's default answer."""

    def __init__(self) -> None:
        self.plan = "[]"
        self.stages: list[str] = []
        self.bodies: list[dict[str, Any]] = []

    def __call__(self, body: dict[str, Any]) -> str:
        stage = stage_of(body)
        self.stages.append(stage)
        self.bodies.append(body)
        if stage == "plan":
            return self.plan
        if stage == "select":
            return "{}"
        if stage == "answer":
            return "Here is what the models made."
        return default_chat_reply(body)


@pytest.fixture
async def one_token(
    hf_service: FakeHFService, tmp_path: Path
) -> AsyncIterator[tuple[Agent, FakeHFService, Controller]]:
    controller = Controller()
    hf_service.chat_reply = controller
    settings = Settings(
        _env_file=None,  # type: ignore[call-arg]
        hf_token=TOKEN,
        openai_api_key=None,
        openai_base_url=None,
        llm_model=None,
        # the service's addresses (a test fake here; an enterprise gateway in real life)
        hf_router_url=hf_service.router_url,
        hf_endpoint=hf_service.hub_url,
        database_url=f"sqlite+aiosqlite:///{tmp_path / 'bot.db'}",
        media_dir=tmp_path / "media",
        requests_per_user_per_minute=0,
        requests_per_server_per_minute=0,
    )
    with hf_service.configure_client():
        async with open_agent(settings) as agent:
            yield agent, hf_service, controller


def request_for(task: str) -> tuple[Request, dict[str, str]]:
    spec = TASKS[task]
    files: list[Attachment] = []
    args: dict[str, str] = {}
    if "image" in spec.args:
        files.append(Attachment("photo.png", "image/png", sample_png(64, 48)))
        args["image"] = "photo.png"
    if "audio" in spec.args:
        files.append(Attachment("speech.wav", "audio/wav", sample_wav()))
        args["audio"] = "speech.wav"
    if "text" in spec.args or task in (
        "visual-question-answering",
        "document-question-answering",
        "image-to-image",
    ):
        args["text"] = {
            "question-answering": "Who lives in Berkeley?\nMy name is Clara; I live in Berkeley.",
            "translation": "Translate to French: good morning",
            "visual-question-answering": "What colour is the square?",
            "document-question-answering": "What is the total?",
            "image-to-image": "make the square blue",
        }.get(task, "a red fox on a hill")  # not a demonstration's words (core.planner)
    return Request(KEY, "u1", f"please do {task}", tuple(files)), args


async def test_only_the_served_tasks_are_offered_to_the_planner(
    one_token: tuple[Agent, FakeHFService, Controller],
) -> None:
    agent, svc, controller = one_token
    assert sorted(agent.router.runnable_tasks(agent.catalog)) == sorted(SERVED_TASKS)
    await agent.handle(Request(KEY, "u1", "hello", ()))
    plan_body = controller.bodies[controller.stages.index("plan")]
    spec = plan_body["messages"][0]["content"]
    for task in TASKS:  # the task specification names each offered task
        named = re.search(rf"(?<![\w-]){re.escape(task)}(?![\w-])", spec) is not None
        assert named is (task in SERVED_TASKS), task
    # the controller ran on the router with the HF token and the default open model
    llm_call = next(c for c in svc.calls if c.path == "/v1/chat/completions")
    assert llm_call.json["model"] == "openai/gpt-oss-120b"
    assert llm_call.headers["authorization"] == f"Bearer {TOKEN}"
    assert "temperature" not in llm_call.json and "max_tokens" not in llm_call.json


@pytest.mark.parametrize("task", sorted(SERVED_TASKS))
async def test_every_served_task_answers_with_only_hf_token(
    one_token: tuple[Agent, FakeHFService, Controller], task: str
) -> None:
    agent, svc, controller = one_token
    request, args = request_for(task)
    controller.plan = json.dumps([{"task": task, "id": 0, "dep": [-1], "args": args}])
    reply = await agent.handle(request)
    (record,) = reply.tasks
    assert record.status is TaskStatus.DONE, record.error
    assert not reply.error, reply.text
    assert record.model and svc.calls_for(record.model), record.model
    output = TASKS[task].output
    kinds = [f.kind for f in reply.files]
    if task in ("object-detection", "image-segmentation"):
        assert "image" in kinds  # boxes drawn / masks laid over the photo
    elif output in ("image", "audio", "video"):
        assert kinds == [output], kinds
    else:
        assert record.result and any(
            record.result.get(k) for k in ("text", "labels", "entities", "answers")
        ), record.result


async def test_the_llm_and_the_models_share_one_pool_of_connections(
    one_token: tuple[Agent, FakeHFService, Controller],
) -> None:
    """With only HF_TOKEN the planning call and the models go to the same
    router: the first model call finds the connection the planning call
    left idle (one TCP and TLS handshake fewer on the request's path), and
    so does the answer call after it."""
    agent, svc, controller = one_token
    request, args = request_for("summarization")
    controller.plan = json.dumps([{"task": "summarization", "id": 0, "dep": [-1], "args": args}])
    reply = await agent.handle(request)
    assert not reply.error, reply.text
    calls = [c for c in svc.calls if c.kind == "inference"]
    stages = [stage_of(c.json) if c.path == "/v1/chat/completions" else c.provider for c in calls]
    assert stages == ["plan", "hf-inference", "answer"]
    assert all(c.peer is not None for c in calls)
    assert len({c.peer for c in calls}) == 1, [c.peer for c in calls]
