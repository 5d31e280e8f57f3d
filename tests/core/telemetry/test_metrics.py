"""METRICS_PORT: Prometheus' /metrics, scraped over real HTTP."""

from __future__ import annotations

import asyncio
import logging
import socket
import subprocess
import sys
import textwrap
import urllib.request
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import aiohttp
import pytest
from prometheus_client.parser import text_string_to_metric_families

from core import telemetry
from core.telemetry import metrics
from core.types import (
    ConversationKey,
    Reply,
    ReplyStatus,
    Request,
    TaskRecord,
    TaskStatus,
    Timings,
    Usage,
)
from tests.fakes.agent_fixture import open_agent_env
from tests.fakes.clock import FakeClock
from tests.fakes.hf_fake import FakeHF
from tests.fakes.loopback import free_port
from tests.fakes.openai_fake import FakeLLM
from tests.fakes.process_env import ROOT, clean_env

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


@pytest.fixture
def metrics_on() -> Iterator[None]:
    metrics.disable()
    metrics.enable(process=False)
    try:
        yield
    finally:
        metrics.disable()


def parse(text: str) -> Samples:
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def value(samples: Samples, name: str, **labels: str) -> float:
    return samples[(name, frozenset(labels.items()))]


def scrape(url: str) -> Samples:
    with urllib.request.urlopen(url, timeout=5) as response:
        assert response.status == 200
        assert response.headers["Content-Type"].startswith("text/plain")
        return parse(response.read().decode())


def request(platform: str = "discord") -> Request:
    return Request(ConversationKey(platform, "g1", "c1"), "u1", "draw a fox")


def reply(status: ReplyStatus, *tasks: TaskRecord, total: float | None = 2.5) -> Reply:
    return Reply("…", tasks=tasks, timings=Timings(total=total), usage=Usage(), status=status)


def task(id: int, status: TaskStatus, model: str | None = "org/painter") -> TaskRecord:
    now = datetime.now(UTC)
    return TaskRecord(id, "text-to-image", model, status, now, now, backend="remote")


def test_metrics_endpoint_shows_what_was_observed() -> None:
    metrics.disable()
    server = metrics.serve(0)  # a free port, on 127.0.0.1 by default
    try:
        assert server.host == "127.0.0.1"
        metrics.observe_turn(reply(ReplyStatus.ANSWERED, task(0, TaskStatus.DONE)), request())
        metrics.observe_turn(
            reply(ReplyStatus.ANSWERED, task(0, TaskStatus.FAILED), task(1, TaskStatus.SKIPPED)),
            request(),
        )
        metrics.observe_turn(reply(ReplyStatus.FAILED, total=0.5), request("cli"))
        metrics.observe_stage("planning", 1.5)
        metrics.observe_stage("planning", 0.5)
        metrics.observe_llm_call("gpt-x", 0.8, prompt_tokens=120, completion_tokens=30)
        metrics.observe_llm_call("gpt-x", 0.2, outcome="error")
        metrics.observe_model_call("text-to-image", "org/painter", "remote", 4.0, outcome="timeout")
        metrics.set_queue_depth(waiting=3, in_flight=2)

        got = scrape(server.url)
    finally:
        server.close()
        metrics.disable()

    requests = "hugginggpt_requests_total"
    assert value(got, requests, platform="discord", outcome="answered") == 2
    assert value(got, requests, platform="cli", outcome="failed") == 1
    assert value(got, "hugginggpt_request_duration_seconds_count", platform="discord") == 2
    assert value(got, "hugginggpt_request_duration_seconds_sum", platform="discord") == 5.0
    tasks = "hugginggpt_tasks_total"
    labels = {"task": "text-to-image", "model": "org/painter", "provider": "remote"}
    assert value(got, tasks, **labels, status="done") == 1
    assert value(got, tasks, **labels, status="failed") == 1
    assert value(got, tasks, **labels, status="skipped") == 1
    assert value(got, "hugginggpt_stage_duration_seconds_count", stage="planning") == 2
    assert value(got, "hugginggpt_stage_duration_seconds_sum", stage="planning") == 2.0
    assert value(got, "hugginggpt_stage_duration_seconds_bucket", stage="planning", le="1.0") == 1
    assert value(got, "hugginggpt_llm_tokens_total", model="gpt-x", type="prompt") == 120
    assert value(got, "hugginggpt_llm_tokens_total", model="gpt-x", type="completion") == 30
    assert value(got, "hugginggpt_llm_calls_total", model="gpt-x", outcome="ok") == 1
    assert value(got, "hugginggpt_llm_calls_total", model="gpt-x", outcome="error") == 1
    assert value(got, "hugginggpt_llm_call_duration_seconds_sum", model="gpt-x") == 1.0
    assert value(got, "hugginggpt_model_calls_total", **labels, outcome="timeout") == 1
    assert value(got, "hugginggpt_queue_depth", state="waiting") == 3
    assert value(got, "hugginggpt_queue_depth", state="in_flight") == 2

    with pytest.raises(OSError):  # closed: nothing listens any more
        urllib.request.urlopen(server.url, timeout=5)


def fake_clock(*times: float) -> FakeClock:
    return FakeClock(readings=times)


def test_the_scopes_time_and_count_each_call(metrics_on: None) -> None:
    with telemetry.turn(request()) as t:
        with telemetry.stage("selection", clock=fake_clock(10.0, 10.25)) as s:
            s.note(tasks=2)
        with telemetry.llm_call("gpt-x", clock=fake_clock(0.0, 1.5)) as call:
            call.record(100, 7, finish_reasons=["stop"])
        with telemetry.llm_call("gpt-x", clock=fake_clock(0.0, 0.5)) as call:
            call.fail("RateLimitError")  # retried: no answer recorded
        for failure in (TimeoutError(), asyncio.CancelledError(), ValueError("bad output")):
            with (
                pytest.raises(type(failure)),
                telemetry.model_call("image-to-text", "org/cap", provider="local"),
            ):
                raise failure
        with telemetry.model_call("image-to-text", "org/cap", provider="local"):
            pass
        t.finish(reply(ReplyStatus.FALLBACK, total=3.0))
        t.finish(reply(ReplyStatus.FALLBACK, total=3.0))  # counted once
    assert s.seconds == 0.25

    got = parse(metrics.render().decode())
    assert value(got, "hugginggpt_stage_duration_seconds_sum", stage="selection") == 0.25
    assert value(got, "hugginggpt_llm_call_duration_seconds_sum", model="gpt-x") == 2.0
    assert value(got, "hugginggpt_llm_calls_total", model="gpt-x", outcome="ok") == 1
    assert value(got, "hugginggpt_llm_calls_total", model="gpt-x", outcome="error") == 1
    assert value(got, "hugginggpt_llm_tokens_total", model="gpt-x", type="completion") == 7
    calls = {"task": "image-to-text", "model": "org/cap", "provider": "local"}
    for outcome in ("ok", "timeout", "cancelled", "error"):
        assert value(got, "hugginggpt_model_calls_total", **calls, outcome=outcome) == 1
    assert value(got, "hugginggpt_requests_total", platform="discord", outcome="fallback") == 1


async def test_the_bot_serves_metrics_while_its_agent_is_open(
    tmp_path: Path, llm_fake: FakeLLM, hf_fake: FakeHF
) -> None:
    metrics.disable()
    port = free_port()
    url = f"http://127.0.0.1:{port}/metrics"
    try:
        async with open_agent_env(tmp_path, llm_fake, hf_fake, metrics_port=port):
            async with aiohttp.ClientSession() as http, http.get(url) as response:
                assert response.status == 200
                got = parse(await response.text())
            assert value(got, "hugginggpt_queue_depth", state="in_flight") == 0
            assert any(name == "process_cpu_seconds_total" for name, _ in got)
        with pytest.raises(aiohttp.ClientConnectionError):  # stopped with the agent
            async with aiohttp.ClientSession() as http, http.get(url):
                pass
    finally:
        metrics.disable()


def test_a_port_in_use_is_a_warning_not_a_failure(caplog: pytest.LogCaptureFixture) -> None:
    metrics.disable()
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with (
            caplog.at_level(logging.WARNING, "core.telemetry"),
            telemetry.serving(metrics_port=port, traces=False) as server,
        ):
            assert server is None
    metrics.disable()
    assert f"cannot listen on 127.0.0.1:{port}" in caplog.text
    assert "METRICS_PORT" in caplog.text


def test_nothing_is_imported_or_counted_until_enabled(tmp_path: Path) -> None:
    """The CLI's start-up pays for neither prometheus_client nor opentelemetry."""
    script = textwrap.dedent(
        """
        import sys
        from core import telemetry
        from core.telemetry import metrics
        from core.types import ConversationKey, Reply, Request

        req = Request(ConversationKey("cli", "local", "default"), "me", "hi")
        with telemetry.serving(metrics_port=None) as server, telemetry.turn(req) as t:
            with telemetry.stage("planning") as s, telemetry.llm_call("m") as call:
                call.record(1, 2, finish_reasons=["stop"])
            with telemetry.model_call("summarization", "m2", provider="remote"):
                pass
            metrics.set_queue_depth(waiting=1, in_flight=1)
            t.finish(Reply("ok"))
        assert server is None and metrics.render() == b"" and not metrics.enabled()
        loaded = [m for m in sys.modules if m.startswith(("prometheus_client", "opentelemetry"))]
        print(loaded)
        """
    )
    env = clean_env(tmp_path)
    env = {k: v for k, v in env.items() if not k.startswith("OTEL_")}
    done = subprocess.run(
        [sys.executable, "-c", script],
        env=env | {"OTEL_EXPORTER_OTLP_ENDPOINT": ""},
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"
