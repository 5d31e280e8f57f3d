"""The hosted client's session: built in a worker thread (two TLS contexts:
CPU, no I/O), ahead of the first call when the expert is told a request is
coming (``prepare``), and one for every call that arrives while it is built.
The real client against the HF fake."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

import httpx2
import pytest
from aiohttp import web

from core.catalog import ModelInfo
from core.experts import remote
from core.experts.remote import RemoteExpert
from core.http_client import Connections
from core.results import TaskInputs
from tests.fakes.hf_fake import FakeHF
from tests.fakes.loopback import serve

MODEL = "acme/summarization-a"


@pytest.fixture
def built(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The thread each session was built on (the build counted, not replaced)."""
    threads: list[int] = []
    real = remote._new_session

    def counting(pool: Connections | None = None) -> tuple[httpx2.AsyncClient, httpx2.AsyncClient]:
        threads.append(threading.get_ident())
        return real(pool)

    monkeypatch.setattr(remote, "_new_session", counting)
    return threads


async def summarise(expert: RemoteExpert, text: str) -> str | None:
    result = await expert.run(
        "summarization", ModelInfo(MODEL, "summarization"), TaskInputs(text=text)
    )
    return result.text


async def test_prepare_builds_the_session_ahead_off_the_loop_and_the_first_calls_share_it(
    hf_fake: FakeHF, built: list[int]
) -> None:
    hf_fake.serve(MODEL, "summarization")
    expert = RemoteExpert(token="hf_test", base_url=hf_fake.base_url)
    try:
        expert.prepare()
        expert.prepare()  # a second request before the first call: still one
        texts = await asyncio.gather(*(summarise(expert, f"note {i}") for i in range(4)))
        expert.prepare()  # the client has its session: nothing more is built
        await summarise(expert, "once more")
    finally:
        await expert.aclose()
    assert all(texts)
    assert len(hf_fake.calls_for(MODEL)) == 5
    assert len(built) == 1  # four simultaneous first calls, one session
    assert built[0] != threading.get_ident()  # not on the event loop


async def test_without_prepare_the_first_calls_build_one_session_in_a_thread(
    hf_fake: FakeHF, built: list[int]
) -> None:
    hf_fake.serve(MODEL, "summarization")
    expert = RemoteExpert(token="hf_test", base_url=hf_fake.base_url)
    try:
        await asyncio.gather(*(summarise(expert, f"note {i}") for i in range(3)))
    finally:
        await expert.aclose()
    assert len(built) == 1
    assert built[0] != threading.get_ident()


async def test_closing_an_expert_with_a_session_still_being_built_ahead(
    hf_fake: FakeHF, built: list[int]
) -> None:
    expert = RemoteExpert(token="hf_test", base_url=hf_fake.base_url)
    expert.prepare()
    await expert.aclose()  # no call was made: the session built ahead is closed or dropped
    assert len(built) <= 1
    assert hf_fake.calls == []


async def test_the_hub_headers_first_look_up_happens_while_the_session_is_built_not_in_a_call(
    hf_fake: FakeHF, built: list[int], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """huggingface_hub builds its first request headers with a blocking GET of
    the Hub's agent-harness list (once per process): that GET must come from
    the session's build in a worker thread, before any model call."""
    from huggingface_hub import constants
    from huggingface_hub.utils import _detect_agent

    seen: list[str] = []

    async def harnesses(request: web.Request) -> web.Response:
        seen.append(request.path)
        return web.json_response({"standardEnvVars": [], "harnesses": {}})

    app = web.Application()
    app.router.add_get("/api/agent-harnesses", harnesses)
    async with serve(app) as hub:
        monkeypatch.setattr(constants, "ENDPOINT", hub)
        monkeypatch.setattr(constants, "HF_HUB_DISABLE_TELEMETRY", False)
        monkeypatch.setattr(constants, "AGENT_HARNESSES_PATH", str(tmp_path / "harnesses.json"))
        monkeypatch.setattr(_detect_agent, "_registry", None)  # this process has not looked yet
        hf_fake.serve(MODEL, "summarization")
        expert = RemoteExpert(token="hf_test", base_url=hf_fake.base_url)
        try:
            expert.prepare()
            await expert._sessions.get()  # the build started by prepare
            assert seen == ["/api/agent-harnesses"]
            assert hf_fake.calls == []
            assert await summarise(expert, "a note")
        finally:
            await expert.aclose()
    assert seen == ["/api/agent-harnesses"]  # once: the call found it done
    assert all(thread != threading.get_ident() for thread in built)
