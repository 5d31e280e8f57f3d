"""Inference calls are not followed to another server: the task-API fake answers
a model's call with a redirect, the real AsyncInferenceClient (or the expert's
own session, for text-to-video) meets it, and the call fails naming both ends.
A redirect on the same server is still followed."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from urllib.parse import urlsplit

import pytest
from aiohttp import web

from adapters.chat.messages import error_text
from core.catalog import ModelInfo
from core.errors import TaskFailed
from core.experts.remote import RemoteExpert
from core.results import TaskInputs
from core.tasks import TaskTimeouts
from core.types import ConversationKey, Request, TaskStatus
from tests.fakes.agent_fixture import AgentEnv, model_a, model_b
from tests.fakes.hf_fake import FakeHF, HFCall
from tests.said import raises_saying


@pytest.fixture
async def expert(hf_fake: FakeHF) -> AsyncIterator[RemoteExpert]:
    e = RemoteExpert(
        token="hf_test_token", base_url=hf_fake.base_url, timeouts=TaskTimeouts(5, 5, 5)
    )
    yield e
    await e.aclose()


def redirect(location: str, status: int = 307):
    def answer(call: HFCall) -> web.Response:
        return web.Response(status=status, headers={"Location": location})

    return answer


def elsewhere(fake: FakeHF, path: str) -> str:
    """The same fake under another host name: if a redirect there were
    followed, the fake would record the call."""
    port = urlsplit(fake.base_url).port
    return f"http://localhost:{port}/{path}"


@pytest.mark.parametrize(
    ("task", "status"),
    [("text-to-speech", 307), ("text-to-speech", 302), ("text-to-video", 308)],
    ids=["client-307", "client-302", "own-session-308"],
)
async def test_a_redirect_to_another_host_fails_naming_it(
    hf_fake: FakeHF, expert: RemoteExpert, task: str, status: int
) -> None:
    target = elsewhere(hf_fake, "models/evil/sink")
    hf_fake.serve("acme/model", task, redirect(target, status))
    hf_fake.serve("evil/sink", task)
    with pytest.raises(TaskFailed) as info:
        await expert.run(task, ModelInfo("acme/model", task), TaskInputs(text="private words"))
    port = urlsplit(hf_fake.base_url).port
    assert error_text(info.value) == (
        f"the inference server at {hf_fake.base_url}/models/acme/model redirected the call "
        f"to another server (http://localhost:{port}); redirects to other servers are not "
        "followed"
    )
    assert info.value.retryable and not info.value.final
    assert len(hf_fake.calls_for("acme/model")) == 1
    assert hf_fake.calls_for("evil/sink") == []  # nothing was sent there


async def test_a_redirect_to_another_port_is_another_server(
    hf_fake: FakeHF, expert: RemoteExpert, unused_tcp_port: int
) -> None:
    hf_fake.serve("acme/model", "text-to-speech", redirect(f"http://127.0.0.1:{unused_tcp_port}/x"))
    with raises_saying(TaskFailed, rf"another server \(http://127\.0\.0\.1:{unused_tcp_port}\)"):
        await expert.run(
            "text-to-speech", ModelInfo("acme/model", "text-to-speech"), TaskInputs(text="hi")
        )


@pytest.mark.parametrize("task", ["text-to-speech", "text-to-video"])
async def test_a_redirect_on_the_same_server_is_followed(
    hf_fake: FakeHF, expert: RemoteExpert, task: str
) -> None:
    hf_fake.serve("acme/old-name", task, redirect("/models/acme/new-name"))
    hf_fake.serve("acme/new-name", task)
    result = await expert.run(task, ModelInfo("acme/old-name", task), TaskInputs(text="hi"))
    assert result.media and result.media[0].data
    (moved,) = hf_fake.calls_for("acme/new-name")
    assert moved.json["inputs"] == "hi"


async def test_through_the_agent_the_next_candidate_answers(agent_env: AgentEnv) -> None:
    env = agent_env
    task = "text-to-speech"
    env.hf.serve(model_a(task), task, redirect(elsewhere(env.hf, f"models/{model_b(task)}")))
    env.llm.reply(
        "plan", json.dumps([{"task": task, "id": 0, "dep": [-1], "args": {"text": "hello"}}])
    )
    key = ConversationKey("cli", "local", "redirects", None)
    reply = await env.agent.handle(Request(key, "u1", "say hello"))
    (rec,) = reply.tasks
    assert rec.status is TaskStatus.DONE and rec.model == model_b(task)
    # the failed attempt, in the terse form the answer's language model reads
    assert f"redirected_away address='{env.hf.base_url}/models/{model_a(task)}'" in (
        rec.reason or ""
    )
    assert len(env.hf.calls_for(model_b(task))) == 1  # the real call, not a followed redirect
    assert [f.kind for f in reply.files] == ["audio"]
