"""Telemetry of real requests: the agent (built by bot.app) against the LLM and
HF fakes, with /metrics scraped over HTTP while a request runs, its spans
recorded by the OpenTelemetry SDK and its log lines written as JSON."""

from __future__ import annotations

import asyncio
import io
import json
import logging
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from prometheus_client.parser import text_string_to_metric_families

from core.telemetry import metrics, tracing
from core.telemetry.logs import ContextFilter, formatter
from core.types import ConversationKey, Request
from tests.fakes.agent_fixture import model_a, open_agent_env
from tests.fakes.hf_fake import FakeHF, HFCall
from tests.fakes.job_fixtures import KIND, RecordingRunner, submit
from tests.fakes.loopback import free_port
from tests.fakes.openai_fake import FakeLLM

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]
KEY = ConversationKey("discord", "g1", "c1", None)
STAGES = ("planning", "selection", "execution", "answer")


def plan(*tasks: dict[str, Any]) -> str:
    return json.dumps(list(tasks))


def step(id: int, task: str, dep: list[int] | None = None, **args: str) -> dict[str, Any]:
    return {"task": task, "id": id, "dep": dep or [-1], "args": args}


class Gate:
    """A model that answers once the test opens the gate."""

    def __init__(self, answer: Any) -> None:
        self.opened = asyncio.Event()
        self.answer = answer

    async def __call__(self, call: HFCall) -> Any:
        await self.opened.wait()
        return self.answer


async def until(predicate: Callable[[], Any], within: float = 20.0) -> None:
    async with asyncio.timeout(within):
        while True:
            if predicate():
                return
            await asyncio.sleep(0.02)


async def scrape(url: str) -> Samples:
    async with aiohttp.ClientSession() as http, http.get(url) as response:
        assert response.status == 200
        text = await response.text()
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def value(samples: Samples, name: str, **labels: str) -> float:
    return samples.get((name, frozenset(labels.items())), 0.0)


def total(samples: Samples, name: str, **labels: str) -> float:
    """The sum over every sample of ``name`` whose labels include ``labels``."""
    want = set(labels.items())
    return sum(v for (n, got), v in samples.items() if n == name and want <= got)


async def test_metrics_scraped_during_a_request_and_after_it(
    tmp_path: Path, llm_fake: FakeLLM, hf_fake: FakeHF
) -> None:
    metrics.disable()
    port = free_port()
    url = f"http://127.0.0.1:{port}/metrics"
    gate = Gate([{"translation_text": "bonjour"}])
    llm_fake.reply("plan", plan(step(0, "translation", text="hello")))
    try:
        async with open_agent_env(tmp_path, llm_fake, hf_fake, metrics_port=port) as env:
            hf_fake.serve(model_a("translation"), "translation", gate)
            env.agent.jobs.poll = 0.05
            runner = RecordingRunner(env.agent)
            env.agent.register_runner(KIND, runner)
            job = await submit(env.agent, KEY, "translate hello into French")
            processed = asyncio.create_task(env.agent.process(job))
            # planned, and the model is working (held by the gate)
            await until(lambda: hf_fake.calls_for(model_a("translation")))

            during = await scrape(url)
            assert value(during, "hugginggpt_queue_depth", state="in_flight") == 1
            assert value(during, "hugginggpt_stage_duration_seconds_count", stage="planning") == 1
            assert total(during, "hugginggpt_llm_tokens_total", type="prompt") > 0
            assert total(during, "hugginggpt_requests_total") == 0  # not answered yet

            gate.opened.set()
            assert await processed == "done"
            ((_, reply),) = runner.replies
            assert not reply.error, reply.text
            after = await scrape(url)
    finally:
        metrics.disable()

    assert value(after, "hugginggpt_requests_total", platform="discord", outcome="answered") == 1
    for stage in STAGES:
        assert value(after, "hugginggpt_stage_duration_seconds_count", stage=stage) == 1, stage
    assert total(after, "hugginggpt_tasks_total", task="translation", status="done") == 1
    assert total(after, "hugginggpt_model_calls_total", task="translation", outcome="ok") == 1
    # every LLM request and token the reply counted, and no more
    assert total(after, "hugginggpt_llm_calls_total") == reply.usage.llm_calls
    prompt = total(after, "hugginggpt_llm_tokens_total", type="prompt")
    completion = total(after, "hugginggpt_llm_tokens_total", type="completion")
    assert (prompt, completion) == (reply.usage.prompt_tokens, reply.usage.completion_tokens)
    assert value(after, "hugginggpt_queue_depth", state="in_flight") == 0
    assert value(after, "hugginggpt_queue_depth", state="waiting") == 0


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracing.configure(provider)
    try:
        yield exporter
    finally:
        tracing.shutdown()
        provider.shutdown()


def ancestors(span: ReadableSpan, by_id: dict[int, ReadableSpan]) -> list[str]:
    names = []
    while span.parent is not None:
        span = by_id[span.parent.span_id]
        names.append(span.name)
    return names


async def test_a_request_is_one_trace_with_genai_spans(
    tmp_path: Path, llm_fake: FakeLLM, hf_fake: FakeHF, spans: InMemorySpanExporter
) -> None:
    llm_fake.reply("plan", plan(step(0, "translation", text="hello")))
    async with open_agent_env(tmp_path, llm_fake, hf_fake) as env:
        reply = await env.agent.handle(Request(KEY, "u1", "translate hello into French"))
    assert not reply.error, reply.text

    finished = spans.get_finished_spans()
    by_id = {s.context.span_id: s for s in finished}
    assert len({s.context.trace_id for s in finished}) == 1
    (turn,) = [s for s in finished if s.name == "invoke_agent hugginggpt"]
    assert turn.attributes["hugginggpt.request_id"] == reply.request_id
    assert turn.attributes["gen_ai.usage.input_tokens"] == reply.usage.prompt_tokens
    assert {f"stage {s}" for s in STAGES} <= {s.name for s in finished}

    chats = [s for s in finished if s.attributes.get("gen_ai.operation.name") == "chat"]
    assert len(chats) == reply.usage.llm_calls
    assert sum(c.attributes["gen_ai.usage.input_tokens"] for c in chats) == (
        reply.usage.prompt_tokens
    )
    for chat in chats:
        assert chat.name == "chat fake-model"
        assert chat.attributes["gen_ai.request.model"] == "fake-model"
        assert chat.attributes["gen_ai.provider.name"] == "openai"
        assert chat.attributes["gen_ai.response.finish_reasons"] == ("stop",)
        assert chat.attributes["server.address"] == "127.0.0.1"
        assert chat.attributes["gen_ai.conversation.id"] == str(KEY)
        assert "invoke_agent hugginggpt" in ancestors(chat, by_id)

    (call,) = [s for s in finished if s.attributes.get("gen_ai.operation.name") == "translation"]
    assert call.attributes["gen_ai.request.model"] == reply.tasks[0].model
    assert call.attributes["gen_ai.provider.name"] == "remote"
    assert "stage execution" in ancestors(call, by_id)


async def test_every_line_of_a_request_names_it_in_json(
    tmp_path: Path, llm_fake: FakeLLM, hf_fake: FakeHF
) -> None:
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(formatter("json"))
    handler.addFilter(ContextFilter())
    core_log = logging.getLogger("core")
    level = core_log.level
    core_log.addHandler(handler)
    core_log.setLevel(logging.INFO)
    llm_fake.reply("plan", plan(step(0, "translation", text="hello")))
    try:
        async with open_agent_env(tmp_path, llm_fake, hf_fake) as env:
            request = Request(KEY, "u1", "translate hello into French")
            reply = await env.agent.handle(request)
    finally:
        core_log.removeHandler(handler)
        core_log.setLevel(level)

    lines = [json.loads(line) for line in stream.getvalue().splitlines()]
    ours = [line for line in lines if line.get("request_id") == reply.request_id]
    stages = {line["stage"]: line for line in ours if line["logger"] == "core.stage"}
    assert set(stages) == set(STAGES)
    for line in stages.values():
        assert line["conversation"] == "discord:g1/c1"
        assert (line["user"], line["platform"], line["server"]) == ("u1", "discord", "g1")
        assert line["seconds"] >= 0
    assert stages["planning"]["tasks"] == 1
    # the request's own lines (its outcome among them) all carry its context
    assert any("done in" in line["message"] for line in ours)
    assert not [line for line in lines if reply.request_id in line["message"] and line not in ours]
