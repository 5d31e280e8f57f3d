"""core.llm.LLM with the real openai SDK against the loopback fake.

No wall-clock assertions: what the fake received, and the counts."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import openai
import pytest

from adapters.chat.messages import error_text
from core.errors import ConfigError, RunFailed
from core.llm import HF_BILLING_URL, LLM, BudgetExhausted, JSONSchema, estimate_tokens
from core.types import Usage
from tests.fakes.loopback import free_port as closed_port
from tests.fakes.openai_fake import FakeLLM, WeakModel
from tests.said import raises_saying

KEY = "sk-test-secret"
PLAN = [
    {"role": "system", "content": "#1 Task Planning Stage: plan."},
    {"role": "user", "content": "draw a cat"},
]
ANSWER = [
    {"role": "system", "content": "#4 Response Generation Stage: answer."},
    {"role": "user", "content": "what did you do?"},
]
SCHEMA = JSONSchema(
    "plan",
    {
        "type": "object",
        "properties": {"tasks": {"type": "array", "items": {"type": "object"}}},
        "required": ["tasks"],
        "additionalProperties": False,
    },
)


def tokens_of(messages: list[dict[str, str]], reply: str) -> tuple[int, int]:
    """What the fake reports: characters // 4."""
    return sum(len(m["content"]) for m in messages) // 4, len(reply) // 4


def formats(fake: FakeLLM) -> list[str | None]:
    """The response_format type each request carried."""
    return [(b.get("response_format") or {}).get("type") for b in fake.requests]


# ----------------------------------------------------------------- basics


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


async def test_sends_model_cap_and_no_sampling_parameters(llm_fake: FakeLLM) -> None:
    llm = llm_fake.client(model="my-model")
    await llm.complete(PLAN, usage=Usage(), max_tokens=77)
    await llm.complete(PLAN, usage=Usage())
    first, second = llm_fake.requests
    assert first["model"] == "my-model"
    assert first["messages"] == PLAN
    assert first["max_completion_tokens"] == 77
    assert not first.get("stream")
    for body in (first, second):
        for absent in ("max_tokens", "temperature", "top_p", "reasoning_effort", "response_format"):
            assert absent not in body, absent
    assert "max_completion_tokens" not in second


async def test_temperature_and_reasoning_effort_only_when_set(llm_fake: FakeLLM) -> None:
    llm = llm_fake.client(temperature=0.3, reasoning_effort="low")
    await llm.complete(PLAN, usage=Usage(), max_tokens=50)
    (body,) = llm_fake.requests
    assert body["temperature"] == 0.3
    assert body["reasoning_effort"] == "low"
    assert body["max_completion_tokens"] == 50


async def test_counts_call_without_usage_block_and_null_content(llm_fake: FakeLLM) -> None:
    llm_fake.send_usage = False
    llm_fake.reply("answer", lambda body: None)
    usage = Usage()
    assert await llm_fake.client().complete(ANSWER, usage=usage) == ""
    assert usage == Usage(llm_calls=1, prompt_tokens=0, completion_tokens=0)


async def test_debug_line_per_call(llm_fake: FakeLLM, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.DEBUG, logger="core.llm"):
        await llm_fake.client().complete(ANSWER, usage=Usage())
    lines = [r.getMessage() for r in caplog.records if r.name == "core.llm"]
    assert len(lines) == 1
    assert "prompt_tokens=" in lines[0] and "latency=" in lines[0]


def test_missing_key_without_base_url_is_config_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    with pytest.raises(ConfigError, match="OPENAI_API_KEY") as info:
        LLM(api_key="", base_url=None, model="m")
    assert "HF_TOKEN" in str(info.value)


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
    assert len(llm_fake.requests) == 3


# ------------------------------------------- model: configured, or the server's first


async def test_no_model_uses_the_first_the_server_lists(llm_fake: FakeLLM) -> None:
    llm_fake.models = ["tiny-q4.gguf", "other.gguf"]
    llm = llm_fake.client(model=None, api_key="")
    await llm.complete(ANSWER, usage=Usage())
    await llm.complete(ANSWER, usage=Usage())
    assert [b["model"] for b in llm_fake.requests] == ["tiny-q4.gguf"] * 2
    assert llm.model == "tiny-q4.gguf"
    assert llm_fake.gets.count("/v1/models") >= 1


async def test_no_model_and_none_listed_fails_clearly(llm_fake: FakeLLM) -> None:
    llm_fake.models = []
    with raises_saying(RunFailed, "lists no model: set LLM_MODEL"):
        await llm_fake.client(model=None, api_key="").complete(ANSWER, usage=Usage())
    assert llm_fake.requests == []


# ------------------------------------------------- current models' parameter rules


async def test_reasoning_rules_accept_what_we_send(llm_fake: FakeLLM) -> None:
    llm_fake.reasoning_rules = True
    llm = llm_fake.client()
    usage = Usage()
    assert await llm.complete(ANSWER, usage=usage, max_tokens=4096) == "Here is the answer."
    assert usage.llm_calls == 1 and len(llm_fake.requests) == 1


async def test_fake_reasoning_rules_refuse_old_parameters(llm_fake: FakeLLM) -> None:
    # The rules themselves, as the SDK sees them: what the bot used to send.
    llm_fake.reasoning_rules = True
    client = openai.AsyncOpenAI(api_key="x", base_url=llm_fake.base_url, max_retries=0)
    try:
        with pytest.raises(openai.BadRequestError) as info:
            await client.chat.completions.create(model="m", messages=ANSWER, temperature=0)  # type: ignore[arg-type]
        assert (info.value.code, info.value.param) == ("unsupported_value", "temperature")
        with pytest.raises(openai.BadRequestError) as info:
            await client.chat.completions.create(model="m", messages=ANSWER, max_tokens=5)  # type: ignore[arg-type]
        assert (info.value.code, info.value.param) == ("unsupported_parameter", "max_tokens")
    finally:
        await client.close()


async def test_refused_temperature_is_dropped_for_the_client(llm_fake: FakeLLM) -> None:
    llm_fake.reasoning_rules = True
    llm = llm_fake.client(temperature=0.0)
    usage = Usage()
    assert await llm.complete(ANSWER, usage=usage) == "Here is the answer."
    assert await llm.complete(ANSWER, usage=usage) == "Here is the answer."
    assert ["temperature" in b for b in llm_fake.requests] == [True, False, False]
    assert usage.llm_calls == 3  # the refused call counts too


async def test_server_without_max_completion_tokens_gets_max_tokens(llm_fake: FakeLLM) -> None:
    llm_fake.reject_params = {"max_completion_tokens"}
    llm = llm_fake.client()
    await llm.complete(PLAN, usage=Usage(), max_tokens=77)
    await llm.complete(PLAN, usage=Usage(), max_tokens=66)
    sent = [(b.get("max_completion_tokens"), b.get("max_tokens")) for b in llm_fake.requests]
    assert sent == [(77, None), (None, 77), (None, 66)]


async def test_a_server_refusing_both_cap_names_is_an_error(llm_fake: FakeLLM) -> None:
    llm_fake.reject_params = {"max_completion_tokens", "max_tokens"}
    with raises_saying(RunFailed, r"HTTP 400\): Unrecognized request argument"):
        await llm_fake.client().complete(PLAN, usage=Usage(), max_tokens=77)
    assert len(llm_fake.requests) == 2


async def test_refused_reasoning_effort_is_dropped(llm_fake: FakeLLM) -> None:
    llm_fake.reject_params = {"reasoning_effort"}
    llm = llm_fake.client(reasoning_effort="minimal")
    await llm.complete(PLAN, usage=Usage())
    await llm.complete(PLAN, usage=Usage())
    assert ["reasoning_effort" in b for b in llm_fake.requests] == [True, False, False]


async def test_a_cap_spent_on_reasoning_is_budget_exhausted(llm_fake: FakeLLM) -> None:
    llm_fake.reasoning_tokens = 100
    usage = Usage()
    with raises_saying(BudgetExhausted, "whole budget of 50 completion tokens"):
        await llm_fake.client().complete(ANSWER, usage=usage, max_tokens=50)
    assert usage.llm_calls == 1 and usage.completion_tokens == 50


# ------------------------------------------------------------ structured output


async def test_json_mode_sends_json_object(llm_fake: FakeLLM) -> None:
    await llm_fake.client().complete(PLAN, usage=Usage(), json_mode=True)
    assert llm_fake.requests[0]["response_format"] == {"type": "json_object"}


async def test_schema_is_sent_as_json_schema(llm_fake: FakeLLM) -> None:
    await llm_fake.client().complete(PLAN, usage=Usage(), schema=SCHEMA)
    sent = llm_fake.requests[0]["response_format"]
    assert sent["type"] == "json_schema"
    assert sent["json_schema"] == {"name": "plan", "schema": dict(SCHEMA.schema), "strict": True}


async def test_schema_refused_steps_down_to_json_object_then_none(llm_fake: FakeLLM) -> None:
    llm_fake.reject_json_schema = True  # named in the message only, like llama.cpp
    llm = llm_fake.client()
    usage = Usage()
    assert await llm.complete(PLAN, usage=usage, schema=SCHEMA) == "[]"
    assert await llm.complete(PLAN, usage=usage, schema=SCHEMA) == "[]"
    assert formats(llm_fake) == ["json_schema", "json_object", "json_object"]
    llm_fake.reject_response_format = True
    assert await llm.complete(PLAN, usage=usage, schema=SCHEMA) == "[]"
    assert await llm.complete(PLAN, usage=usage, json_mode=True) == "[]"
    assert formats(llm_fake)[3:] == ["json_object", None, None]
    assert usage.llm_calls == 6  # refused calls count


async def test_json_mode_falls_back_once_on_400_and_remembers(llm_fake: FakeLLM) -> None:
    llm_fake.reject_response_format = True
    llm_fake.reply("plan", "[]", "[1]")
    llm = llm_fake.client()
    usage = Usage()
    assert await llm.complete(PLAN, usage=usage, json_mode=True) == "[]"
    assert await llm.complete(PLAN, usage=usage, json_mode=True) == "[1]"
    assert formats(llm_fake) == ["json_object", None, None]  # refused once, never sent again
    assert usage.llm_calls == 3


async def test_422_naming_response_format_steps_down(llm_fake: FakeLLM) -> None:
    # A pydantic server refusing the unknown field (FastAPI's 422 shape).
    llm_fake.fail_with(
        422,
        {"detail": [{"loc": ["body", "response_format"], "msg": "extra fields not permitted"}]},
    )
    assert await llm_fake.client().complete(PLAN, usage=Usage(), json_mode=True) == "[]"
    assert formats(llm_fake) == ["json_object", None]


@pytest.mark.parametrize("status", [400, 422])
async def test_other_refusals_never_turn_json_mode_off(llm_fake: FakeLLM, status: int) -> None:
    llm_fake.fail(status)
    llm = llm_fake.client()
    with raises_saying(RunFailed, rf"returned an error \(HTTP {status}\)"):
        await llm.complete(PLAN, usage=Usage(), schema=SCHEMA)
    await llm.complete(PLAN, usage=Usage(), schema=SCHEMA)
    assert formats(llm_fake) == ["json_schema", "json_schema"]


async def test_400_without_json_mode_is_an_error(llm_fake: FakeLLM) -> None:
    llm_fake.fail(400)
    with raises_saying(RunFailed, r"returned an error \(HTTP 400\)"):
        await llm_fake.client().complete(PLAN, usage=Usage())
    assert len(llm_fake.requests) == 1


# ------------------------------------------------------------------- errors


async def test_dead_endpoint(caplog: pytest.LogCaptureFixture) -> None:
    port = closed_port()
    llm = LLM(api_key=KEY, base_url=f"http://127.0.0.1:{port}/v1", model="m", max_retries=0)
    usage = Usage()
    try:
        with caplog.at_level(logging.DEBUG, logger="core.llm"), pytest.raises(RunFailed) as info:
            await llm.complete(PLAN, usage=usage)
    finally:
        await llm.aclose()
    message = error_text(info.value)
    assert message.startswith(
        f"The language model at 127.0.0.1:{port} could not be reached. Is its server running?"
    )
    assert KEY not in message
    assert KEY not in caplog.text
    assert any(r.levelno == logging.WARNING for r in caplog.records)
    assert usage.llm_calls == 1  # a failed call is a call


async def test_connection_failures_are_retried_up_to_max_retries() -> None:
    port = closed_port()
    llm = LLM(api_key=KEY, base_url=f"http://127.0.0.1:{port}/v1", model="m", max_retries=1)
    usage = Usage()
    try:
        with raises_saying(RunFailed, "could not be reached"):
            await llm.complete(PLAN, usage=usage)
    finally:
        await llm.aclose()
    assert usage.llm_calls == 2


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
    message = error_text(info.value)
    assert expected in message
    assert message.startswith("The language model at 127.0.0.1:")
    assert "\n" not in message
    assert KEY not in message and KEY not in caplog.text


async def test_unknown_model_at_the_hf_router_names_llm_model(llm_fake: FakeLLM) -> None:
    llm_fake.router_models = {"openai/gpt-oss-120b"}
    llm = llm_fake.client(model="acme/retired-chat-model", hf_router=True, max_retries=2)
    with pytest.raises(RunFailed) as info:
        await llm.complete(PLAN, usage=Usage())
    message = error_text(info.value)
    assert "acme/retired-chat-model" in message and "LLM_MODEL" in message
    assert "openai/gpt-oss-120b" in message  # a model that is served
    assert "\n" not in message
    assert len(llm_fake.requests) == 1  # not retried


async def test_hf_router_402_says_where_to_top_up(llm_fake: FakeLLM) -> None:
    llm_fake.credits_exhausted = True
    usage = Usage()
    with pytest.raises(RunFailed) as info:
        await llm_fake.client(hf_router=True, max_retries=2).complete(PLAN, usage=usage)
    message = error_text(info.value)
    assert "credits" in message and HF_BILLING_URL in message
    assert len(llm_fake.requests) == 1 and usage.llm_calls == 1


async def test_hf_router_401_names_hf_token(llm_fake: FakeLLM) -> None:
    llm_fake.fail(401)
    with raises_saying(RunFailed, r"check HF_TOKEN"):
        await llm_fake.client(hf_router=True).complete(PLAN, usage=Usage())


async def test_html_page_with_200_is_run_failed(llm_fake: FakeLLM) -> None:
    llm_fake.serve_html()
    usage = Usage()
    with raises_saying(RunFailed, "could not be read"):
        await llm_fake.client().complete(PLAN, usage=usage)
    assert usage.llm_calls == 1


async def test_completion_without_choices_is_run_failed(llm_fake: FakeLLM) -> None:
    llm_fake.no_choices()
    with raises_saying(RunFailed, "returned no answer"):
        await llm_fake.client().complete(PLAN, usage=Usage())


# --------------------------------------------------------- context overflows


async def test_llama_cpp_overflow_names_the_sizes_and_keeps_json_mode(llm_fake: FakeLLM) -> None:
    llm_fake.weak = WeakModel(n_ctx=400, props=False)  # the client cannot know beforehand
    llm = llm_fake.client()
    big = [PLAN[0], {"role": "user", "content": "x" * 2000}]
    counted = sum(len(m["content"]) for m in big) // 4  # what the server counts
    with pytest.raises(RunFailed) as info:
        await llm.complete(big, usage=Usage(), schema=SCHEMA, max_tokens=500)
    message = error_text(info.value)
    assert "too long" in message
    assert f"the prompt is {counted} tokens but its context holds 400" in message
    assert "HTTP 400" not in message
    assert len(llm_fake.requests) == 1
    # JSON mode stays on; and the size is learned: the next too-long prompt is not sent
    await llm.complete(PLAN, usage=Usage(), schema=SCHEMA)
    with raises_saying(RunFailed, "holds 400"):
        await llm.complete(big, usage=Usage(), schema=SCHEMA)
    assert formats(llm_fake) == ["json_schema", "json_schema"]


async def test_openai_context_length_exceeded(llm_fake: FakeLLM) -> None:
    llm_fake.fail_with(
        400,
        {
            "error": {
                "message": "This model's maximum context length is 128000 tokens. However, "
                "your messages resulted in 130001 tokens. Please reduce the length.",
                "type": "invalid_request_error",
                "param": "messages",
                "code": "context_length_exceeded",
            }
        },
    )
    llm = llm_fake.client()
    with raises_saying(RunFailed, r"the prompt is 130001 tokens but its context holds 128000"):
        await llm.complete(PLAN, usage=Usage(), json_mode=True)
    await llm.complete(PLAN, usage=Usage(), json_mode=True)
    assert formats(llm_fake) == ["json_object", "json_object"]


async def test_vllm_prompt_plus_cap_over_the_limit_lowers_the_cap(llm_fake: FakeLLM) -> None:
    llm_fake.vllm_max_model_len = 1000
    llm = llm_fake.client()
    assert await llm.complete(ANSWER, usage=Usage(), max_tokens=4096) == "Here is the answer."
    await llm.complete(ANSWER, usage=Usage(), max_tokens=4096)
    prompt = sum(len(m["content"]) for m in ANSWER) // 4
    caps = [b["max_completion_tokens"] for b in llm_fake.requests]
    assert caps[0] == 4096 and caps[1] == 1000 - prompt
    assert caps[2] <= 1000 - prompt  # learned: no refused call the second time
    assert len(caps) == 3


async def test_vllm_prompt_over_the_limit_is_clear(llm_fake: FakeLLM) -> None:
    llm_fake.vllm_max_model_len = 50
    big = [ANSWER[0], {"role": "user", "content": "y" * 400}]
    with raises_saying(RunFailed, r"the prompt is \d+ tokens but its context holds 50"):
        await llm_fake.client().complete(big, usage=Usage(), max_tokens=100)


async def test_prompt_too_big_for_the_reported_context_is_not_sent(llm_fake: FakeLLM) -> None:
    llm_fake.weak = WeakModel(n_ctx=300)  # reported on GET /props, like llama-server
    big = [ANSWER[0], {"role": "user", "content": "z" * 2000}]
    usage = Usage()
    with pytest.raises(RunFailed) as info:
        await llm_fake.client().complete(big, usage=usage, max_tokens=100)
    assert f"about {estimate_tokens(big)} tokens" in error_text(info.value)
    assert "holds 300" in error_text(info.value)
    assert llm_fake.requests == [] and usage.llm_calls == 0
    assert "/props" in llm_fake.gets


async def test_cap_is_lowered_to_what_the_reported_context_leaves(llm_fake: FakeLLM) -> None:
    llm_fake.weak = WeakModel(n_ctx=2048)
    await llm_fake.client().complete(ANSWER, usage=Usage(), max_tokens=4096)
    assert llm_fake.requests[0]["max_completion_tokens"] == 2048 - estimate_tokens(ANSWER)


async def test_context_is_looked_up_once(llm_fake: FakeLLM) -> None:
    llm_fake.weak = WeakModel(n_ctx=2048)
    llm = llm_fake.client()
    for _ in range(3):
        await llm.complete(ANSWER, usage=Usage(), max_tokens=10)
    assert llm_fake.gets.count("/props") == 1
    assert await llm.context_window() == 2048


async def test_llama_cpp_gets_json_calls_at_temperature_zero_unless_one_is_set(
    llm_fake: FakeLLM,
) -> None:
    """A server that answers GET /props (llama.cpp) samples at 0.8 unless told: a
    plan or a choice of models goes out greedy, an answer keeps the server's way;
    LLM_TEMPERATURE wins; a server that answers no /props is sent nothing."""
    llm_fake.weak = WeakModel(n_ctx=4096)
    llm = llm_fake.client()
    await llm.complete(PLAN, usage=Usage(), schema=SCHEMA)
    await llm.complete(PLAN, usage=Usage(), json_mode=True)
    await llm.complete(ANSWER, usage=Usage())
    assert [r.get("temperature") for r in llm_fake.requests] == [0.0, 0.0, None]
    await llm_fake.client(temperature=0.7).complete(PLAN, usage=Usage(), schema=SCHEMA)
    assert llm_fake.requests[-1]["temperature"] == 0.7


async def test_no_temperature_for_a_server_that_does_not_say_it_is_llama_cpp(
    llm_fake: FakeLLM,
) -> None:
    await llm_fake.client().complete(PLAN, usage=Usage(), schema=SCHEMA)
    assert "temperature" not in llm_fake.requests[0]


async def test_greedy_json_calls_stop_when_the_server_refuses_temperature(
    llm_fake: FakeLLM,
) -> None:
    llm_fake.weak = WeakModel(n_ctx=4096)
    llm_fake.reasoning_rules = True  # temperature other than 1: HTTP 400
    llm = llm_fake.client()
    usage = Usage()
    await llm.complete(PLAN, usage=usage, schema=SCHEMA)
    await llm.complete(PLAN, usage=usage, schema=SCHEMA)
    assert [r.get("temperature") for r in llm_fake.requests] == [0.0, None, None]


# -------------------------------------------------------------- bounded time


async def test_cap_stops_a_looping_model(llm_fake: FakeLLM) -> None:
    llm_fake.weak = WeakModel(loop=True)
    usage = Usage()
    text = await llm_fake.client().complete(ANSWER, usage=usage, max_tokens=50)
    assert text.startswith("la la")
    assert llm_fake.requests[0]["max_completion_tokens"] == 50
    assert usage.completion_tokens == 50


async def test_timeout_is_named_and_not_retried(llm_fake: FakeLLM) -> None:
    llm_fake.weak = WeakModel(loop=True)  # uncapped: it stalls until we give up
    usage = Usage()
    llm = llm_fake.client(timeout=0.3, max_retries=2)
    with raises_saying(RunFailed, r"did not answer within 0\.3 s"):
        await llm.complete(ANSWER, usage=usage)
    assert len(llm_fake.requests) == 1
    assert usage.llm_calls == 1


async def test_500_is_retried(llm_fake: FakeLLM) -> None:
    llm_fake.fail(500, times=1)
    usage = Usage()
    answer = await llm_fake.client(max_retries=1).complete(ANSWER, usage=usage)
    assert answer == "Here is the answer."
    assert len(llm_fake.requests) == 2
    assert usage.llm_calls == 2  # the failed attempt counts


async def test_500_after_retries_is_run_failed(llm_fake: FakeLLM) -> None:
    llm_fake.fail(500, times=5)
    usage = Usage()
    with raises_saying(RunFailed, r"HTTP 500"):
        await llm_fake.client(max_retries=1).complete(ANSWER, usage=usage)
    assert len(llm_fake.requests) == 2 and usage.llm_calls == 2


async def test_429_waits_what_retry_after_asks(llm_fake: FakeLLM) -> None:
    llm_fake.fail(429, times=1)  # the fake sends retry-after-ms: 10
    await llm_fake.client(max_retries=1).complete(ANSWER, usage=Usage())
    assert len(llm_fake.requests) == 2


async def test_429_asking_for_a_long_wait_is_not_retried(llm_fake: FakeLLM) -> None:
    llm_fake.retry_after_ms = 10 * 60 * 1000
    llm_fake.fail(429, times=1)
    with raises_saying(RunFailed, "rate limiting"):
        await llm_fake.client(max_retries=2).complete(ANSWER, usage=Usage())
    assert len(llm_fake.requests) == 1


async def test_client_errors_are_not_retried(llm_fake: FakeLLM) -> None:
    llm_fake.fail(400, times=3)
    with pytest.raises(RunFailed):
        await llm_fake.client(max_retries=2).complete(ANSWER, usage=Usage())
    assert len(llm_fake.requests) == 1


# ------------------------------------------------------ one deadline per stage


async def test_garbage_json_with_200_is_run_failed(llm_fake: FakeLLM) -> None:
    llm_fake.garbage_json()
    usage = Usage()
    with raises_saying(RunFailed, r"could not be read \(JSONDecodeError\)"):
        await llm_fake.client().complete(PLAN, usage=usage)
    assert usage.llm_calls == 1


async def test_calls_in_one_stage_share_its_deadline(llm_fake: FakeLLM) -> None:
    llm = llm_fake.client(timeout=1.0, max_retries=2)
    llm_fake.hang(stage="answer")
    with llm.stage() as deadline:
        await llm.complete(PLAN, usage=Usage())  # answered at once
        with raises_saying(RunFailed, r"did not answer within 1 s \(2 attempts\)$"):
            await llm.complete(ANSWER, usage=Usage())
        # nothing is left for a third call: it is not even sent
        with raises_saying(RunFailed, r"took too long: 1 s \(2 attempts\) of the 1 s"):
            await llm.complete(PLAN, usage=Usage())
    assert deadline.attempts == 2 and len(llm_fake.requests) == 2
    # a new stage has its own deadline
    with llm.stage():
        assert await llm.complete(ANSWER, usage=Usage()) == "Here is the answer."


async def test_retries_stop_where_the_deadline_would_pass(llm_fake: FakeLLM) -> None:
    llm_fake.retry_after_ms = 600
    llm_fake.fail(500, times=10)
    with raises_saying(RunFailed, r"HTTP 500.*\(3 attempts in [0-9.]+ s\)$"):
        await llm_fake.client(timeout=2.0, max_retries=10).complete(PLAN, usage=Usage())
    # at 0, 0.6 and 1.2 s; one at 1.8 s would have less than a quarter of the budget
    assert len(llm_fake.requests) == 3
