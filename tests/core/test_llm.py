"""core.llm.LLM with the real openai SDK against the loopback fake."""

from __future__ import annotations

import asyncio
import logging
import socket
import time
from typing import Any

import pytest

from core.errors import ConfigError, RunFailed
from core.llm import LLM
from core.types import Usage
from tests.fakes.openai_fake import FakeLLM

KEY = "sk-test-secret"
PLAN = [
    {"role": "system", "content": "#1 Task Planning Stage: plan."},
    {"role": "user", "content": "draw a cat"},
]
ANSWER = [
    {"role": "system", "content": "#4 Response Generation Stage: answer."},
    {"role": "user", "content": "what did you do?"},
]


def tokens_of(messages: list[dict[str, str]], reply: str) -> tuple[int, int]:
    """What the fake reports: characters // 4."""
    return sum(len(m["content"]) for m in messages) // 4, len(reply) // 4


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def test_returns_content_and_sums_usage(llm_fake: FakeLLM) -> None:
    plan_reply = '[{"task": "text-to-image", "id": 0, "dep": [-1], "args": {"text": "a cat"}}]'
    llm_fake.reply("plan", plan_reply)
    llm = llm_fake.client()
    usage = Usage()
    assert await llm.complete(PLAN, usage=usage) == plan_reply
    assert await llm.complete(ANSWER, usage=usage) == "Here is the answer."
    p1, c1 = tokens_of(PLAN, plan_reply)
    p2, c2 = tokens_of(ANSWER, "Here is the answer.")
    assert usage == Usage(llm_calls=2, prompt_tokens=p1 + p2, completion_tokens=c1 + c2)


async def test_sends_model_params_and_no_stream(llm_fake: FakeLLM) -> None:
    llm = llm_fake.client(model="my-model")
    await llm.complete(PLAN, usage=Usage(), max_tokens=77, temperature=0.3)
    await llm.complete(PLAN, usage=Usage())
    first, second = llm_fake.requests
    assert first["model"] == "my-model"
    assert first["messages"] == PLAN
    assert first["max_tokens"] == 77
    assert first["temperature"] == 0.3
    assert not first.get("stream")
    assert "response_format" not in first
    assert "max_tokens" not in second and second["temperature"] == 0.0


async def test_counts_call_without_usage_block_and_null_content(llm_fake: FakeLLM) -> None:
    llm_fake.send_usage = False
    llm_fake.reply("answer", lambda body: None)
    usage = Usage()
    assert await llm_fake.client().complete(ANSWER, usage=usage) == ""
    assert usage == Usage(llm_calls=1, prompt_tokens=0, completion_tokens=0)


async def test_json_mode_sends_response_format(llm_fake: FakeLLM) -> None:
    llm = llm_fake.client()
    await llm.complete(PLAN, usage=Usage(), json_mode=True)
    assert llm_fake.requests[0]["response_format"] == {"type": "json_object"}


async def test_json_mode_falls_back_once_on_400_and_remembers(llm_fake: FakeLLM) -> None:
    llm_fake.reject_response_format = True
    llm_fake.reply("plan", "[]", "[1]")
    llm = llm_fake.client()
    usage = Usage()
    assert await llm.complete(PLAN, usage=usage, json_mode=True) == "[]"
    assert await llm.complete(PLAN, usage=usage, json_mode=True) == "[1]"
    sent = ["response_format" in body for body in llm_fake.requests]
    assert sent == [True, False, False]  # refused once, never sent again
    assert usage.llm_calls == 2


async def test_json_mode_falls_back_on_422_too(llm_fake: FakeLLM) -> None:
    # Some pydantic-based servers refuse unknown fields with 422.
    llm_fake.fail(422)
    llm = llm_fake.client()
    assert await llm.complete(PLAN, usage=Usage(), json_mode=True) == "[]"
    assert ["response_format" in body for body in llm_fake.requests] == [True, False]


async def test_400_without_json_mode_is_an_error(llm_fake: FakeLLM) -> None:
    llm_fake.fail(400)
    with pytest.raises(RunFailed, match=r"returned an error \(HTTP 400\)"):
        await llm_fake.client().complete(PLAN, usage=Usage())
    assert len(llm_fake.requests) == 1


async def test_dead_endpoint(caplog: pytest.LogCaptureFixture) -> None:
    port = closed_port()
    llm = LLM(api_key=KEY, base_url=f"http://127.0.0.1:{port}/v1", model="m", max_retries=0)
    usage = Usage()
    try:
        with caplog.at_level(logging.DEBUG, logger="core.llm"), pytest.raises(RunFailed) as info:
            await llm.complete(PLAN, usage=usage)
    finally:
        await llm.aclose()
    message = str(info.value)
    assert message == f"The language model at 127.0.0.1:{port} could not be reached"
    assert KEY not in message
    assert KEY not in caplog.text
    assert any(r.levelno == logging.WARNING for r in caplog.records)
    assert usage.llm_calls == 0


async def test_timeout_is_fast_and_named(llm_fake: FakeLLM) -> None:
    llm_fake.delay = 3
    llm = llm_fake.client(timeout=0.3)
    started = time.monotonic()
    with pytest.raises(RunFailed, match=r"did not answer within 0\.3 s"):
        await llm.complete(PLAN, usage=Usage())
    assert time.monotonic() - started < 2


@pytest.mark.parametrize(
    ("status", "expected"),
    [
        (401, "rejected the API key (check OPENAI_API_KEY)"),
        (403, "rejected the API key (check OPENAI_API_KEY)"),
        (404, "does not know model fake-model (check LLM_MODEL)"),
        (429, "rate limiting"),
        (418, "returned an error (HTTP 418)"),
    ],
)
async def test_http_errors(
    llm_fake: FakeLLM, caplog: pytest.LogCaptureFixture, status: int, expected: str
) -> None:
    llm_fake.fail(status)
    with caplog.at_level(logging.DEBUG, logger="core.llm"), pytest.raises(RunFailed) as info:
        await llm_fake.client().complete(PLAN, usage=Usage())
    message = str(info.value)
    assert expected in message
    assert message.startswith("The language model at 127.0.0.1:")
    assert KEY not in message and KEY not in caplog.text


async def test_500_is_retried_by_the_sdk(llm_fake: FakeLLM) -> None:
    llm_fake.fail(500, times=1)
    usage = Usage()
    answer = await llm_fake.client(max_retries=1).complete(ANSWER, usage=usage)
    assert answer == "Here is the answer."
    assert len(llm_fake.requests) == 2
    assert usage.llm_calls == 1


async def test_500_after_retries_is_run_failed(llm_fake: FakeLLM) -> None:
    llm_fake.fail(500, times=5)
    with pytest.raises(RunFailed, match=r"HTTP 500"):
        await llm_fake.client(max_retries=1).complete(ANSWER, usage=Usage())
    assert len(llm_fake.requests) == 2


async def test_debug_line_per_call(llm_fake: FakeLLM, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.DEBUG, logger="core.llm"):
        await llm_fake.client().complete(ANSWER, usage=Usage())
    lines = [r.getMessage() for r in caplog.records if r.name == "core.llm"]
    assert len(lines) == 1
    assert "prompt_tokens=" in lines[0] and "latency=" in lines[0]


def test_missing_key_without_base_url_is_config_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    with pytest.raises(ConfigError, match="OPENAI_API_KEY"):
        LLM(api_key="", base_url=None, model="m")


async def test_missing_key_is_fine_for_a_local_server(llm_fake: FakeLLM) -> None:
    llm = llm_fake.client(api_key="")
    assert await llm.complete(ANSWER, usage=Usage()) == "Here is the answer."


async def test_concurrent_calls_share_one_client(llm_fake: FakeLLM) -> None:
    llm_fake.delay = 0.2
    llm = llm_fake.client()
    usage = Usage()
    replies: list[Any] = await asyncio.gather(
        *(llm.complete(ANSWER, usage=usage) for _ in range(3))
    )
    assert replies == ["Here is the answer."] * 3
    assert usage.llm_calls == 3
    arrivals = [t for t, _ in llm_fake.events]
    assert max(arrivals) - min(arrivals) < 0.15
