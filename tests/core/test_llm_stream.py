"""The streamed answer: core.llm.LLM with ``on_delta`` through the real openai
SDK against the loopback fake's server-sent events, and the agent's answer
stage as typed events (deltas, a discarded start, the fallback).

No wall-clock assertions: what the fake received and streamed, and counts."""

from __future__ import annotations

import json
from typing import Any

import pytest

from adapters.chat.messages import reply_text
from core.errors import RunFailed
from core.llm import BudgetExhausted
from core.types import (
    AnswerDelta,
    AnswerDiscarded,
    ConversationKey,
    Event,
    Finished,
    ReplyStatus,
    Request,
    Usage,
)
from tests.fakes.agent_fixture import AgentEnv
from tests.fakes.openai_fake import FakeLLM, WeakModel
from tests.said import raises_saying

ANSWER = [
    {"role": "system", "content": "#4 Response Generation Stage: answer."},
    {"role": "user", "content": "what did you do?"},
]
TEXT = "I drew a cat.\nIt is orange, and it sits on a mat in the sun."
KEY = ConversationKey("cli", "local", "stream", None)


class Deltas:
    def __init__(self) -> None:
        self.seen: list[str] = []

    async def __call__(self, text: str) -> None:
        self.seen.append(text)


async def test_the_answer_streams_in_pieces_and_its_usage_is_counted(llm_fake: FakeLLM) -> None:
    llm_fake.reply("answer", TEXT)
    llm_fake.stream_chunk_chars = 5
    deltas, usage = Deltas(), Usage()
    text = await llm_fake.client().complete(ANSWER, usage=usage, max_tokens=500, on_delta=deltas)
    assert text == TEXT and "".join(deltas.seen) == TEXT
    assert len(deltas.seen) == -(-len(TEXT) // 5)  # as the fake sent them, one by one
    (body,) = llm_fake.requests
    assert body["stream"] is True and body["stream_options"] == {"include_usage": True}
    assert body["max_completion_tokens"] == 500
    prompt = sum(len(m["content"]) for m in ANSWER) // 4
    assert (usage.llm_calls, usage.prompt_tokens, usage.completion_tokens) == (
        1,
        prompt,
        len(TEXT) // 4,
    )


async def test_reasoning_models_get_no_sampling_params_and_their_thinking_is_not_shown(
    llm_fake: FakeLLM,
) -> None:
    llm_fake.reasoning_rules = True
    llm_fake.stream_reasoning = "The user wants a cat; orange is nice."
    llm_fake.reply("answer", TEXT)
    llm = llm_fake.client(temperature=0.2)
    deltas, usage = Deltas(), Usage()
    assert await llm.complete(ANSWER, usage=usage, max_tokens=300, on_delta=deltas) == TEXT
    assert "".join(deltas.seen) == TEXT  # no reasoning in the answer
    refused, answered = llm_fake.requests
    assert refused["temperature"] == 0.2 and "temperature" not in answered  # learned once
    assert answered["stream"] is True and usage.llm_calls == 2


async def test_a_server_that_refuses_stream_options_is_asked_without_them(
    llm_fake: FakeLLM,
) -> None:
    llm_fake.reject_params = {"stream_options"}
    llm_fake.reply("answer", TEXT)
    deltas, usage = Deltas(), Usage()
    llm = llm_fake.client()
    assert await llm.complete(ANSWER, usage=usage, on_delta=deltas) == TEXT
    assert await llm.complete(ANSWER, usage=usage, on_delta=Deltas()) == "Here is the answer."
    assert ["stream_options" in b for b in llm_fake.requests] == [True, False, False]
    assert "".join(deltas.seen) == TEXT and usage.llm_calls == 3


async def test_a_server_that_ignores_stream_answers_whole(llm_fake: FakeLLM) -> None:
    llm_fake.ignore_stream = True
    llm_fake.reply("answer", TEXT)
    deltas, usage = Deltas(), Usage()
    assert await llm_fake.client().complete(ANSWER, usage=usage, on_delta=deltas) == TEXT
    assert deltas.seen == [] and usage.completion_tokens == len(TEXT) // 4


@pytest.mark.parametrize("how", ["drop", "error"])
async def test_a_stream_that_breaks_midway_is_not_retried(llm_fake: FakeLLM, how: str) -> None:
    llm_fake.reply("answer", TEXT, TEXT)
    llm_fake.stream_chunk_chars = 4
    llm_fake.break_stream(8, how=how)
    deltas, usage = Deltas(), Usage()
    with raises_saying(RunFailed, "stopped in the middle of its answer"):
        await llm_fake.client(max_retries=2).complete(ANSWER, usage=usage, on_delta=deltas)
    assert "".join(deltas.seen) == TEXT[:8]  # what went out before it broke
    assert len(llm_fake.requests) == 1 and usage.llm_calls == 1  # the words are out: no retry


async def test_a_failure_before_the_first_words_is_retried(llm_fake: FakeLLM) -> None:
    llm_fake.fail(500, times=1)
    llm_fake.reply("answer", TEXT)
    deltas, usage = Deltas(), Usage()
    assert (
        await llm_fake.client(max_retries=1).complete(ANSWER, usage=usage, on_delta=deltas) == TEXT
    )
    assert "".join(deltas.seen) == TEXT and usage.llm_calls == 2


async def test_a_stream_dropped_before_its_first_words_is_asked_again(
    llm_fake: FakeLLM,
) -> None:
    llm_fake.reply("answer", TEXT, TEXT)
    llm_fake.break_stream(0)
    deltas, usage = Deltas(), Usage()
    llm = llm_fake.client(max_retries=1)
    assert await llm.complete(ANSWER, usage=usage, on_delta=deltas) == TEXT
    assert "".join(deltas.seen) == TEXT and usage.llm_calls == 2


async def test_a_cap_spent_thinking_is_budget_exhausted_when_streamed(llm_fake: FakeLLM) -> None:
    llm_fake.reasoning_tokens = 1000
    with pytest.raises(BudgetExhausted):
        await llm_fake.client().complete(ANSWER, usage=Usage(), max_tokens=200, on_delta=Deltas())


# ------------------------------------------------------------ the agent's answer


def plan(*tasks: dict[str, Any]) -> str:
    return json.dumps(list(tasks))


def translate() -> str:
    return plan({"task": "translation", "id": 0, "dep": [-1], "args": {"text": "hello"}})


async def events_of(env: AgentEnv, text: str) -> list[Event]:
    seen: list[Event] = []
    async with env.agent.run(Request(KEY, "u1", text)) as run:
        async for event in run:
            seen.append(event)
    assert seen[-1] == Finished(run.reply)
    return seen


async def test_the_run_streams_the_answer_as_deltas(agent_env: AgentEnv) -> None:
    agent_env.llm.reply("plan", translate())
    agent_env.llm.reply("answer", TEXT)
    seen = await events_of(agent_env, "translate hello")
    reply = seen[-1].reply  # type: ignore[union-attr]
    assert reply.status is ReplyStatus.ANSWERED and reply_text(reply) == TEXT
    deltas = [e.text for e in seen if isinstance(e, AnswerDelta)]
    assert len(deltas) > 1 and "".join(deltas) == TEXT
    assert deltas[0] == TEXT[:16]  # an ordinary answer goes out with its first piece
    assert not any(isinstance(e, AnswerDiscarded) for e in seen)


async def test_a_stream_that_dies_midway_ends_in_one_fallback_answer(agent_env: AgentEnv) -> None:
    env = agent_env
    env.llm.reply("plan", translate())
    env.llm.reply("answer", TEXT)
    env.llm.stream_chunk_chars = 4
    env.llm.break_stream(20, stage="answer")
    seen = await events_of(env, "translate hello")
    reply = seen[-1].reply  # type: ignore[union-attr]
    assert reply.status is ReplyStatus.FALLBACK and not reply.error
    kinds = [type(e) for e in seen]
    # some words went out, then were withdrawn once, then the reply with the results
    assert AnswerDelta in kinds and kinds.count(AnswerDiscarded) == 1
    assert kinds.index(AnswerDiscarded) > max(i for i, k in enumerate(kinds) if k is AnswerDelta)
    assert "stopped in the middle of its answer" in reply_text(reply)
    assert "Bonjour" in reply_text(reply)  # the translation's result, from the fallback
    assert reply.usage.llm_calls == 3 and len(env.llm.calls("answer")) == 1


async def test_an_echoed_prompt_is_never_streamed(agent_env: AgentEnv) -> None:
    env = agent_env
    env.llm.weak = WeakModel(echo=True)
    env.llm.reply("plan", translate())
    seen = await events_of(env, "translate hello")
    assert not [e for e in seen if isinstance(e, AnswerDelta | AnswerDiscarded)]
    assert seen[-1].reply.status is ReplyStatus.FALLBACK  # type: ignore[union-attr]
