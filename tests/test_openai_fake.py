"""The fake OpenAI server, driven by the real ``openai`` SDK."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import openai
import pytest
from openai.types.chat import ChatCompletionMessageParam

from core.types import Usage
from tests.fakes.openai_fake import FakeLLM, WeakModel, make_llm_fake

PLAN_SYS = "#1 Task Planning Stage: plan the user's request as a JSON list of tasks."
SELECT_SYS = "#2 Model Selection Stage: choose a model for each task."
ANSWER_SYS = "#4 Response Generation Stage: describe what was done."


def msgs(system: str | None, user: str = "hi") -> list[ChatCompletionMessageParam]:
    out: list[ChatCompletionMessageParam] = []
    if system is not None:
        out.append({"role": "system", "content": system})
    return [*out, {"role": "user", "content": user}]


@pytest.fixture
async def sdk(llm_fake: FakeLLM) -> AsyncIterator[openai.AsyncOpenAI]:
    client = openai.AsyncOpenAI(api_key="x", base_url=llm_fake.base_url, max_retries=0, timeout=5)
    yield client
    await client.close()


async def ask(sdk: openai.AsyncOpenAI, messages: list[Any], **kw: Any) -> str:
    response = await sdk.chat.completions.create(model="fake-model", messages=messages, **kw)
    return response.choices[0].message.content or ""


async def test_defaults_per_stage(llm_fake: FakeLLM, sdk: openai.AsyncOpenAI) -> None:
    assert await ask(sdk, msgs(PLAN_SYS)) == "[]"
    assert await ask(sdk, msgs(SELECT_SYS)) == "{}"
    assert await ask(sdk, msgs(ANSWER_SYS)) == "Here is the answer."
    assert await ask(sdk, msgs("You are helpful.")) == "ok"
    assert await ask(sdk, msgs(None)) == "ok"
    assert [stage for _, stage in llm_fake.events] == ["plan", "select", "answer", "other", "other"]
    assert len(llm_fake.calls("plan")) == 1
    assert len(llm_fake.calls()) == 5


async def test_marker_must_open_the_first_system_message(
    llm_fake: FakeLLM, sdk: openai.AsyncOpenAI
) -> None:
    llm_fake.reply("plan", "PLAN")
    # Leading whitespace is fine; a marker later in the text or in a later
    # system message does not count.
    assert await ask(sdk, msgs("  \n" + PLAN_SYS)) == "PLAN"
    assert await ask(sdk, msgs("Intro. " + PLAN_SYS)) == "ok"
    two_systems = [
        {"role": "system", "content": "preamble"},
        {"role": "system", "content": PLAN_SYS},
        {"role": "user", "content": "hi"},
    ]
    assert await ask(sdk, two_systems) == "ok"


async def test_queued_replies_pop_in_order_then_default(
    llm_fake: FakeLLM, sdk: openai.AsyncOpenAI
) -> None:
    llm_fake.reply("answer", "first", lambda body: f"echo {body['messages'][-1]['content']}")

    async def later(body: dict[str, Any]) -> str:
        return "awaited"

    llm_fake.reply("answer", later)
    llm_fake.reply("plan", "[{}]")
    assert await ask(sdk, msgs(ANSWER_SYS)) == "first"
    assert await ask(sdk, msgs(ANSWER_SYS, "ping")) == "echo ping"
    assert await ask(sdk, msgs(ANSWER_SYS)) == "awaited"
    assert await ask(sdk, msgs(ANSWER_SYS)) == "Here is the answer."
    assert await ask(sdk, msgs(PLAN_SYS)) == "[{}]"


async def test_usage_block_counts_characters(llm_fake: FakeLLM, sdk: openai.AsyncOpenAI) -> None:
    llm_fake.reply("other", "x" * 41)
    response = await sdk.chat.completions.create(
        model="fake-model", messages=msgs("s" * 10, "u" * 30)
    )
    assert response.object == "chat.completion"
    assert response.choices[0].finish_reason == "stop"
    assert response.usage is not None
    assert response.usage.prompt_tokens == 40 // 4
    assert response.usage.completion_tokens == 41 // 4
    assert response.usage.total_tokens == 10 + 10


async def test_records_request_bodies(llm_fake: FakeLLM, sdk: openai.AsyncOpenAI) -> None:
    await ask(sdk, msgs(PLAN_SYS), temperature=0.0, response_format={"type": "json_object"})
    (body,) = llm_fake.requests
    assert body["model"] == "fake-model"
    assert body["response_format"] == {"type": "json_object"}
    assert body["messages"][0]["content"] == PLAN_SYS


async def test_streaming_frames_parse_with_the_sdk(
    llm_fake: FakeLLM, sdk: openai.AsyncOpenAI
) -> None:
    text = "A streamed answer that is longer than one sixteen-character chunk."
    llm_fake.reply("answer", text)
    stream = await sdk.chat.completions.create(
        model="fake-model",
        messages=msgs(ANSWER_SYS),
        stream=True,
        stream_options={"include_usage": True},
    )
    parts: list[str] = []
    finish: list[str] = []
    usage = None
    async for chunk in stream:
        assert chunk.object == "chat.completion.chunk"
        for choice in chunk.choices:
            parts.append(choice.delta.content or "")
            if choice.finish_reason:
                finish.append(choice.finish_reason)
        if chunk.usage is not None:
            usage = chunk.usage
    assert "".join(parts) == text
    assert finish == ["stop"]
    assert usage is not None and usage.completion_tokens == len(text) // 4
    assert llm_fake.requests[0]["stream"] is True


async def test_models_endpoint(llm_fake: FakeLLM, sdk: openai.AsyncOpenAI) -> None:
    llm_fake.models = ["alpha", "beta"]
    page = await sdk.models.list()
    assert [m.id for m in page.data] == ["alpha", "beta"]


async def test_fail_by_stage_then_recovers(llm_fake: FakeLLM, sdk: openai.AsyncOpenAI) -> None:
    llm_fake.fail(503, times=2, stage="select")
    assert await ask(sdk, msgs(PLAN_SYS)) == "[]"  # another stage is unaffected
    for _ in range(2):
        with pytest.raises(openai.InternalServerError) as info:
            await ask(sdk, msgs(SELECT_SYS))
        assert info.value.status_code == 503
        assert isinstance(info.value.body, dict) and "message" in info.value.body
    assert await ask(sdk, msgs(SELECT_SYS)) == "{}"


async def test_fail_maps_to_sdk_error_types(llm_fake: FakeLLM, sdk: openai.AsyncOpenAI) -> None:
    expected = {
        400: openai.BadRequestError,
        401: openai.AuthenticationError,
        404: openai.NotFoundError,
        429: openai.RateLimitError,
    }
    for status, kind in expected.items():
        llm_fake.fail(status)
        with pytest.raises(kind):
            await ask(sdk, msgs(None))


async def test_reject_response_format(llm_fake: FakeLLM, sdk: openai.AsyncOpenAI) -> None:
    llm_fake.reject_response_format = True
    with pytest.raises(openai.BadRequestError):
        await ask(sdk, msgs(PLAN_SYS), response_format={"type": "json_object"})
    assert await ask(sdk, msgs(PLAN_SYS)) == "[]"


async def test_requests_are_served_side_by_side(llm_fake: FakeLLM, sdk: openai.AsyncOpenAI) -> None:
    llm_fake.gate = asyncio.Event()
    asks = [asyncio.create_task(ask(sdk, msgs(None))) for _ in range(4)]
    async with asyncio.timeout(10), llm_fake.in_flight_changed:  # a bound against a hang
        await llm_fake.in_flight_changed.wait_for(lambda: llm_fake.in_flight == 4)
    llm_fake.gate.set()
    assert await asyncio.gather(*asks) == ["ok"] * 4
    assert llm_fake.in_flight == 0


async def test_make_llm_fake_outside_the_fixture() -> None:
    async with make_llm_fake() as fake:
        llm = fake.client()
        usage = Usage()
        answer = await llm.complete([{"role": "system", "content": ANSWER_SYS}], usage=usage)
        assert answer == "Here is the answer."
        assert usage.llm_calls == 1
    # Stopped: the port no longer answers.
    client = openai.AsyncOpenAI(api_key="x", base_url=fake.base_url, max_retries=0, timeout=2)
    try:
        with pytest.raises(openai.APIConnectionError):
            await client.models.list()
    finally:
        await client.close()


async def test_weak_model_overflow_and_props_as_llama_server(
    llm_fake: FakeLLM, sdk: openai.AsyncOpenAI
) -> None:
    llm_fake.weak = WeakModel(n_ctx=64)
    with pytest.raises(openai.BadRequestError) as info:
        await ask(sdk, msgs(PLAN_SYS, "x" * 400))
    body = info.value.body
    assert isinstance(body, dict)
    assert body["type"] == "exceed_context_size_error"
    assert body["n_ctx"] == 64 and body["n_prompt_tokens"] >= 64
    props = await sdk.get(llm_fake.base_url.removesuffix("/v1") + "/props", cast_to=object)
    assert props["default_generation_settings"]["n_ctx"] == 64  # type: ignore[index]


async def test_weak_model_loops_until_the_cap(llm_fake: FakeLLM, sdk: openai.AsyncOpenAI) -> None:
    llm_fake.weak = WeakModel(loop=True)
    response = await sdk.chat.completions.create(
        model="m", messages=msgs(ANSWER_SYS), max_completion_tokens=12
    )
    assert response.choices[0].finish_reason == "length"
    assert response.usage is not None and response.usage.completion_tokens == 12


async def test_router_unknown_model_and_no_credits(
    llm_fake: FakeLLM, sdk: openai.AsyncOpenAI
) -> None:
    llm_fake.router_models = {"openai/gpt-oss-120b"}
    with pytest.raises(openai.BadRequestError) as info:
        await ask(sdk, msgs(None))
    assert (info.value.code, info.value.param) == ("model_not_supported", "model")
    llm_fake.router_models = None
    llm_fake.credits_exhausted = True
    with pytest.raises(openai.APIStatusError) as status:
        await ask(sdk, msgs(None))
    assert status.value.status_code == 402
