"""A language model that answers garbage or nothing, through the real Agent.

Unreadable HTTP 200 answers (an HTML page, JSON that does not parse, a
completion without choices) at each stage: planning fails with a clear
message, selection falls back to the most downloaded models, the answer stage
falls back to the structured summary; nothing crashes.  A hanging server
costs each stage one deadline (LLM_TIMEOUT, retries and re-asks included),
the message states the time really waited, and the user sees "still
waiting" progress meanwhile.
"""

from __future__ import annotations

import asyncio
import itertools
import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from adapters.chat.messages import error_text, reply_text
from core.types import (
    AnswerDelta,
    ConversationKey,
    Event,
    Finished,
    Request,
    Stage,
    StageStarted,
    StillWaiting,
    TaskStatus,
)
from tests.fakes.agent_fixture import AgentEnv, model_a, open_agent_env
from tests.fakes.hf_fake import FakeHF, HFCall, default_response
from tests.fakes.openai_fake import FakeLLM

KEY = ConversationKey("cli", "local", "faults", None)
CRASH = "Something went wrong on my side"

# (switch, what the user is told)
UNREADABLE = [
    ("serve_html", "sent an answer that could not be read (not a chat completion)"),
    ("garbage_json", "sent an answer that could not be read (JSONDecodeError)"),
    ("no_choices", "returned no answer"),
]


def plan(*tasks: dict[str, Any]) -> str:
    return json.dumps(list(tasks))


def step(id: int, task: str, **args: str) -> dict[str, Any]:
    return {"task": task, "id": id, "dep": [-1], "args": args}


def req(text: str) -> Request:
    return Request(KEY, "u1", text)


def unreadable(llm: FakeLLM, switch: str, stage: str, times: int = 1) -> None:
    getattr(llm, switch)(times=times, stage=stage)


# ------------------------------------------------------------ unreadable answers


@pytest.mark.parametrize(("switch", "said"), UNREADABLE)
async def test_unreadable_answer_at_planning_is_a_clear_error(
    agent_env: AgentEnv, switch: str, said: str
) -> None:
    env = agent_env
    unreadable(env.llm, switch, "plan")
    reply = await env.agent.handle(req("translate hello"))
    assert reply.error
    assert reply_text(reply).startswith("The language model at 127.0.0.1:")
    assert said in reply_text(reply) and CRASH not in reply_text(reply)
    assert len(env.llm.calls("plan")) == 1 and reply.usage.llm_calls == 1
    assert env.llm.calls("answer") == []
    # the turn is still stored, with the message
    history = await env.agent.repo.load_history(KEY)
    assert [t.role for t in history.turns] == ["user", "assistant"]


@pytest.mark.parametrize(("switch", "said"), UNREADABLE)
async def test_unreadable_answer_at_selection_falls_back_to_most_downloaded(
    agent_env: AgentEnv, switch: str, said: str
) -> None:
    env = agent_env
    env.llm.reply(
        "plan", plan(step(0, "translation", text="hi"), step(1, "summarization", text="x"))
    )
    unreadable(env.llm, switch, "select")
    reply = await env.agent.handle(req("translate and summarize"))
    assert not reply.error and not reply.fallback, reply_text(reply)
    assert len(env.llm.calls("select")) == 1
    assert [(t.model, t.status) for t in reply.tasks] == [
        (model_a("translation"), TaskStatus.DONE),
        (model_a("summarization"), TaskStatus.DONE),
    ]
    assert all("model selection failed" in (t.reason or "") for t in reply.tasks)


@pytest.mark.parametrize(("switch", "said"), UNREADABLE)
async def test_unreadable_answer_at_the_answer_stage_falls_back_with_the_results(
    agent_env: AgentEnv, switch: str, said: str
) -> None:
    env = agent_env
    env.llm.reply("plan", plan(step(0, "translation", text="hi")))
    unreadable(env.llm, switch, "answer")
    reply = await env.agent.handle(req("translate hi"))
    assert reply.fallback and not reply.error
    assert CRASH not in reply_text(reply)
    assert said in reply_text(reply)
    assert "task 0, translation on acme/translation-a: done" in reply_text(reply)
    assert reply.tasks[0].status is TaskStatus.DONE


@pytest.mark.parametrize("body", ["[1, 2, 3]", "null", '{"choices": [{"message": "hi"}]}'])
async def test_json_of_the_wrong_shape_is_unreadable_not_a_crash(
    agent_env: AgentEnv, body: str
) -> None:
    env = agent_env
    env.llm.garbage_json(stage="plan", body=body)
    reply = await env.agent.handle(req("translate hello"))
    assert reply.error and CRASH not in reply_text(reply)
    assert "could not be read" in reply_text(reply)


async def test_unreadable_plan_in_a_preview_is_an_error_note(agent_env: AgentEnv) -> None:
    env = agent_env
    env.llm.serve_html(stage="plan")
    preview = await env.agent.plan_only(req("draw a cat"))
    assert preview.error and preview.steps == ()
    assert "could not be read" in error_text(preview.failure)


# ------------------------------------------------------ one deadline per stage


@pytest.fixture
async def slow_env(tmp_path: Path, llm_fake: FakeLLM, hf_fake: FakeHF) -> Any:
    """LLM_TIMEOUT 1 s with two retries, as an operator might set it."""
    async with open_agent_env(
        tmp_path, llm_fake, hf_fake, llm_timeout=1.0, llm_max_retries=2
    ) as env:
        yield env


async def test_hanging_llm_after_a_retry_is_bounded_by_the_stage_deadline(
    slow_env: AgentEnv,
) -> None:
    env = slow_env
    env.llm.fail(503, times=1, stage="plan")  # retried (the fake asks for 10 ms)
    env.llm.hang(stage="plan")  # the retry never answers
    reply = await env.agent.handle(req("translate hello"))
    assert reply.error
    assert "did not answer within 1 s (2 attempts)" in reply_text(reply)
    # one deadline for both attempts: no third attempt, no second full timeout
    assert len(env.llm.calls("plan")) == 2
    assert reply.usage.llm_calls == 2


async def test_retries_never_start_an_attempt_the_deadline_cannot_fit(
    slow_env: AgentEnv,
) -> None:
    env = slow_env
    env.agent.llm.max_retries = 5
    env.llm.retry_after_ms = 500  # the server asks for half the budget each time
    env.llm.fail(503, times=10, stage="plan")
    reply = await env.agent.handle(req("translate hello"))
    assert reply.error
    assert "HTTP 503" in reply_text(reply) and "(2 attempts in " in reply_text(reply)
    # 0 s and 0.5 s; a third at 1 s could not finish before the deadline
    assert len(env.llm.calls("plan")) == 2


async def test_a_reask_shares_the_planning_deadline(slow_env: AgentEnv) -> None:
    env = slow_env

    async def never(body: dict[str, Any]) -> str:
        await asyncio.sleep(60)
        return "[]"

    env.llm.reply("plan", "Sure! Let me think about it.", never)  # invalid, then hangs
    reply = await env.agent.handle(req("translate hello"))
    assert reply.error
    assert "did not answer within 1 s (2 attempts)" in reply_text(reply)
    assert len(env.llm.calls("plan")) == 2


async def test_hanging_selection_and_answer_each_cost_one_deadline(
    slow_env: AgentEnv,
) -> None:
    env = slow_env
    env.llm.reply(
        "plan", plan(step(0, "translation", text="hi"), step(1, "summarization", text="x"))
    )
    env.llm.hang(times=10, stage="select")
    env.llm.hang(times=10, stage="answer")
    reply = await env.agent.handle(req("translate and summarize"))
    assert reply.fallback and not reply.error
    assert len(env.llm.calls("select")) == 1 and len(env.llm.calls("answer")) == 1
    assert [t.model for t in reply.tasks] == [model_a("translation"), model_a("summarization")]
    assert "did not answer within 1 s (1 attempt)" in reply_text(reply)
    assert "task 0, translation on acme/translation-a: done" in reply_text(reply)


# ------------------------------------------------------------- still waiting


async def test_a_slow_llm_sends_still_waiting_progress(agent_env: AgentEnv) -> None:
    env = agent_env
    env.agent.config = replace(env.agent.config, llm_wait_notice=0.1)
    env.llm.delay = 0.45  # every call
    env.llm.reply("plan", plan(step(0, "translation", text="hi")))
    # the model answers once the selection is being answered: a task that finished
    # first would end the selection call early (core.execution)
    selecting = asyncio.Event()

    async def choice(body: dict[str, Any]) -> str:
        selecting.set()
        return "{}"

    async def translate(call: HFCall) -> Any:
        await selecting.wait()
        return default_response("translation", call)

    env.llm.reply("select", choice)
    env.hf.serve(model_a("translation"), "translation", translate)
    seen: list[Event] = []

    async def sink(p: Event) -> None:
        seen.append(p)

    reply = await env.agent.handle(req("translate hi"), sink)
    assert not reply.error, reply_text(reply)
    waiting = [p for p in seen if isinstance(p, StillWaiting)]
    by_stage = {s: [p for p in waiting if p.stage is s] for s in Stage}
    # (selection runs alongside the tasks, and is called off when they finish
    # first: it may have nothing to wait for)
    for stage in (Stage.PLANNING, Stage.ANSWERING):
        notices = by_stage[stage]
        assert 2 <= len(notices) <= 5, (stage, notices)
        assert all(p.attempt == 1 for p in notices)
        waited = [p.waited for p in notices]
        # at most one notice per interval, counting from the stage's start
        assert all(b - a >= 0.09 for a, b in itertools.pairwise(waited))
        assert waited[0] >= 0.09
    # the answer stage's notices keep the task lines of the status message
    assert by_stage[Stage.ANSWERING][0].tasks[0].status is TaskStatus.DONE
    # nothing is sent after the stage ended: the notices come before the next stage's event
    index = {id(p): i for i, p in enumerate(seen)}
    # (selection runs alongside the tasks: its notices end before the answer starts)
    answering = next(
        i for i, p in enumerate(seen) if isinstance(p, StageStarted) and p.stage is Stage.ANSWERING
    )
    assert all(index[id(p)] < answering for p in by_stage[Stage.SELECTING])
    # once the answer's first words arrive, the model is no longer waited for
    first_words = next(i for i, p in enumerate(seen) if isinstance(p, AnswerDelta))
    assert all(index[id(p)] < first_words for p in by_stage[Stage.ANSWERING])
    assert isinstance(seen[-1], Finished)


async def test_no_still_waiting_progress_for_a_fast_llm(agent_env: AgentEnv) -> None:
    env = agent_env
    seen: list[Event] = []

    async def sink(p: Event) -> None:
        seen.append(p)

    await env.agent.handle(req("hi"), sink)
    assert [p for p in seen if isinstance(p, StillWaiting)] == []
