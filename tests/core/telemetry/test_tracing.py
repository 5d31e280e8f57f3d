"""OpenTelemetry spans with the GenAI semantic conventions (the ``otel`` extra)."""

from __future__ import annotations

import asyncio
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest
from aiohttp import web
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

from core import telemetry
from core.errors import RunFailed
from core.telemetry import tracing
from core.types import ConversationKey, Reply, ReplyStatus, Request, Usage
from tests.fakes.loopback import serve
from tests.fakes.process_env import ROOT, clean_env


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    assert tracing.configure(provider)
    try:
        yield exporter
    finally:
        tracing.shutdown()
        provider.shutdown()


def request() -> Request:
    key = ConversationKey("slack", "T1", "C1", "171.1")
    return Request(key, "U1", "caption photo.png", request_id="r1")


def by_name(exporter: InMemorySpanExporter) -> dict[str, ReadableSpan]:
    return {s.name: s for s in exporter.get_finished_spans()}


def test_a_turn_nests_stage_llm_and_model_spans_with_genai_attributes(
    spans: InMemorySpanExporter,
) -> None:
    with telemetry.turn(request()) as t:
        with (
            telemetry.stage("planning") as s,
            telemetry.llm_call(
                "gpt-5-mini",
                provider="openai",
                url="http://127.0.0.1:8080/v1",
                max_tokens=2048,
                stream=False,
            ) as call,
        ):
            call.record(100, 20, finish_reasons=["stop"], response_model="gpt-5-mini-2025")
            s.note(tasks=1)
        with (
            telemetry.stage("execution"),
            telemetry.model_call("image-to-text", "Salesforce/blip", provider="remote"),
        ):
            pass
        t.finish(Reply("a cat", usage=Usage(1, 100, 20), request_id="r1"))

    got = by_name(spans)
    assert set(got) == {
        "invoke_agent hugginggpt",
        "stage planning",
        "chat gpt-5-mini",
        "stage execution",
        "image-to-text Salesforce/blip",
    }
    turn, planning, chat = (
        got["invoke_agent hugginggpt"],
        got["stage planning"],
        got["chat gpt-5-mini"],
    )
    execution, model = got["stage execution"], got["image-to-text Salesforce/blip"]
    # one trace: turn ⊃ stage ⊃ call
    assert len({s.context.trace_id for s in got.values()}) == 1
    assert turn.parent is None
    assert planning.parent.span_id == turn.context.span_id
    assert chat.parent.span_id == planning.context.span_id
    assert model.parent.span_id == execution.context.span_id

    assert turn.attributes["gen_ai.operation.name"] == "invoke_agent"
    assert turn.attributes["gen_ai.agent.name"] == "hugginggpt"
    assert turn.attributes["gen_ai.conversation.id"] == "slack:T1/C1/171.1"
    assert turn.attributes["gen_ai.usage.input_tokens"] == 100
    assert turn.attributes["gen_ai.usage.output_tokens"] == 20
    assert turn.attributes["hugginggpt.status"] == "answered"
    assert turn.status.status_code is StatusCode.UNSET

    assert planning.attributes["hugginggpt.stage"] == "planning"
    assert planning.attributes["hugginggpt.tasks"] == 1

    assert chat.kind is SpanKind.CLIENT
    assert dict(chat.attributes) == {
        "gen_ai.operation.name": "chat",
        "gen_ai.provider.name": "openai",
        "gen_ai.request.model": "gpt-5-mini",
        "gen_ai.request.max_tokens": 2048,
        "gen_ai.conversation.id": "slack:T1/C1/171.1",
        "hugginggpt.stream": False,
        "server.address": "127.0.0.1",
        "server.port": 8080,
        "gen_ai.usage.input_tokens": 100,
        "gen_ai.usage.output_tokens": 20,
        "gen_ai.response.finish_reasons": ("stop",),
        "gen_ai.response.model": "gpt-5-mini-2025",
    }

    assert model.kind is SpanKind.CLIENT
    assert model.attributes["gen_ai.operation.name"] == "image-to-text"
    assert model.attributes["gen_ai.request.model"] == "Salesforce/blip"
    assert model.attributes["gen_ai.provider.name"] == "remote"
    assert model.attributes["gen_ai.conversation.id"] == "slack:T1/C1/171.1"


class RateLimitError(Exception):
    """Stands in for the SDK error a RunFailed wraps."""


def test_failures_mark_their_spans(spans: InMemorySpanExporter) -> None:
    with telemetry.turn(request()) as t:
        with pytest.raises(RunFailed), telemetry.llm_call("m1", url="https://api.openai.com/v1"):
            raise RunFailed("The language model is busy") from RateLimitError()
        with telemetry.llm_call("m2") as retried:
            retried.fail(RateLimitError())  # a retried attempt: no exception leaves it
        with (
            pytest.raises(TimeoutError),
            telemetry.model_call("text-to-video", "org/v", provider="remote"),
        ):
            raise TimeoutError
        t.finish(Reply("no", request_id="r1", status=ReplyStatus.FAILED))

    got = by_name(spans)
    m1 = got["chat m1"]
    assert m1.status.status_code is StatusCode.ERROR
    assert m1.attributes["error.type"] == "RateLimitError"  # the cause, not RunFailed
    assert (m1.attributes["server.address"], m1.attributes["server.port"]) == (
        "api.openai.com",
        443,
    )
    assert got["chat m2"].status.status_code is StatusCode.ERROR
    assert got["chat m2"].attributes["error.type"] == "RateLimitError"
    video = got["text-to-video org/v"]
    assert video.status.status_code is StatusCode.ERROR
    assert video.attributes["error.type"] == "TimeoutError"
    turn = got["invoke_agent hugginggpt"]
    assert turn.status.status_code is StatusCode.ERROR
    assert turn.attributes["error.type"] == "failed"


def test_without_an_otlp_endpoint_spans_are_off() -> None:
    tracing.shutdown()
    assert not tracing.configure(environ={})
    assert not tracing.configure(environ={"OTEL_EXPORTER_OTLP_ENDPOINT": ""})
    assert not tracing.configure(
        environ={
            "OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318",
            "OTEL_SDK_DISABLED": "true",
        }
    )
    assert not tracing.enabled()
    with telemetry.turn(request()) as t, tracing.span("anything") as handle:
        assert not handle.recording
        handle.set({"a": 1})
        handle.fail("nothing happens")
        t.finish(Reply("ok"))


@pytest.mark.parametrize("given", ["environment", "settings"])
async def test_spans_reach_the_otlp_collector_that_is_named(tmp_path: Path, given: str) -> None:
    """The production path: OTEL_EXPORTER_OTLP_ENDPOINT in the environment (the
    exporter reads it) or in the settings (.env), the OTLP/HTTP exporter,
    batches flushed at shutdown, to a collector on 127.0.0.1."""
    received: list[ExportTraceServiceRequest] = []

    async def traces(request: web.Request) -> web.Response:
        assert request.content_type == "application/x-protobuf"
        received.append(ExportTraceServiceRequest.FromString(await request.read()))
        body = ExportTraceServiceResponse().SerializeToString()
        return web.Response(body=body, content_type="application/x-protobuf")

    app = web.Application()
    app.router.add_post("/v1/traces", traces)
    script = textwrap.dedent(
        """
        import sys
        from core import telemetry
        from core.telemetry import tracing
        from core.types import ConversationKey, Reply, Request

        assert tracing.configure(endpoint=sys.argv[1] or None)
        req = Request(ConversationKey("cli", "local", "default"), "me", "hi", request_id="r9")
        with telemetry.turn(req) as t:
            with telemetry.llm_call("tiny", provider="openai") as call:
                call.record(3, 4, finish_reasons=["stop"])
            t.finish(Reply("ok", request_id="r9"))
        tracing.shutdown()
        """
    )
    async with serve(app) as base_url:
        env = {k: v for k, v in clean_env(tmp_path).items() if not k.startswith("OTEL_")}
        if given == "environment":
            env["OTEL_EXPORTER_OTLP_ENDPOINT"] = base_url
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-c",
            script,
            base_url if given == "settings" else "",
            env=env,
            cwd=ROOT,
            stderr=asyncio.subprocess.PIPE,
        )
        _, stderr = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode == 0, stderr.decode()

    resources = [rs for r in received for rs in r.resource_spans]
    names = {a.key: a.value.string_value for rs in resources for a in rs.resource.attributes}
    assert names["service.name"] == "hugginggpt-bot"
    exported = {s.name: s for rs in resources for ss in rs.scope_spans for s in ss.spans}
    assert set(exported) == {"invoke_agent hugginggpt", "chat tiny"}
    chat = {a.key: a.value for a in exported["chat tiny"].attributes}
    assert chat["gen_ai.operation.name"].string_value == "chat"
    assert chat["gen_ai.usage.output_tokens"].int_value == 4
    assert chat["gen_ai.conversation.id"].string_value == "cli:local/default"
    assert exported["chat tiny"].parent_span_id == exported["invoke_agent hugginggpt"].span_id
