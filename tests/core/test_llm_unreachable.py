"""A language model that cannot be reached: the message names the likely
causes and the setting to check, by where the server is (this machine, a
proxy, elsewhere).  The real client, nothing listening."""

from __future__ import annotations

import pytest

from adapters.chat.messages import error_text
from core.errors import RunFailed
from core.llm import LLM
from core.types import Usage
from tests.fakes.loopback import free_port

ASK = [{"role": "user", "content": "hi"}]


async def failure(**options: object) -> str:
    llm = LLM(api_key="sk-test-unreachable", model="m", max_retries=0, timeout=10, **options)  # type: ignore[arg-type]
    try:
        with pytest.raises(RunFailed) as info:
            await llm.complete(ASK, usage=Usage())
    finally:
        await llm.aclose()
    return error_text(info.value)


async def test_a_server_on_this_machine_that_is_not_running() -> None:
    port = free_port()
    message = await failure(base_url=f"http://127.0.0.1:{port}/v1")
    assert message == (
        f"The language model at 127.0.0.1:{port} could not be reached. Is its server running? "
        "Start it (llama-server, vllm serve, ollama serve), or set OPENAI_BASE_URL to the "
        f"address it listens on (now http://127.0.0.1:{port}/v1)"
    )


async def test_the_hugging_face_router_names_its_own_setting() -> None:
    message = await failure(base_url=f"http://localhost:{free_port()}/v1", hf_router=True)
    assert "Is its server running?" in message and "set HF_ROUTER_URL" in message


async def test_a_proxy_that_cannot_be_used(monkeypatch: pytest.MonkeyPatch) -> None:
    proxy = f"http://127.0.0.1:{free_port()}"
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy"):
        monkeypatch.setenv(name, proxy)
    for name in ("NO_PROXY", "no_proxy"):
        monkeypatch.delenv(name, raising=False)
    message = await failure(base_url="http://llm.example.invalid/v1")
    assert message == (
        "The language model at llm.example.invalid could not be reached through the proxy: "
        "the proxy HTTPS_PROXY names could not be used or refused the connection "
        "(check HTTPS_PROXY, and NO_PROXY for addresses reached directly)"
    )


async def test_a_remote_server_that_cannot_be_reached(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy"):
        monkeypatch.delenv(name, raising=False)
    message = await failure(base_url="http://llm.example.invalid/v1")  # a name that never resolves
    assert message.startswith("The language model at llm.example.invalid could not be reached")
    assert "Likely causes: no network here" in message
    assert "a proxy this process was not told of (set HTTPS_PROXY)" in message
    assert "a wrong address (http://llm.example.invalid/v1; check OPENAI_BASE_URL)" in message
