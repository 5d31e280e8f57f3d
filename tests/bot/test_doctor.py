"""``doctor`` with the Hub and the language model out of reach: one line per
failed check, with how much could not be checked, and no look-up per model.

Run in-process (real clients, loopback servers) so the waits can be small:
nothing here measures a duration, the tests count lines and requests.
"""

from __future__ import annotations

import asyncio
import io
import json
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from aiohttp import web

from bot import doctor
from bot.settings import Settings
from tests.fakes.loopback import free_port, serve
from tests.fakes.openai_fake import FakeLLM

# Two tasks Inference Providers serve, three models between them.
CATALOG = [
    {"id": "acme/draw-a", "task": "text-to-image", "providers": ["hf-inference"]},
    {"id": "acme/draw-b", "task": "text-to-image", "providers": ["fal-ai"]},
    {"id": "acme/label-a", "task": "image-classification", "providers": ["hf-inference"]},
]


@pytest.fixture(autouse=True)
def hub_client_restored() -> Iterator[None]:
    """doctor points ``huggingface_hub`` at HF_ENDPOINT (module constants):
    put them back for the tests that follow."""
    from huggingface_hub import constants
    from huggingface_hub.inference import _providers

    auto = _providers.CONVERSATIONAL_AUTO_ROUTER
    helpers = list(_providers.PROVIDERS["hf-inference"].values())
    saved = (
        constants.ENDPOINT,
        constants.INFERENCE_PROXY_TEMPLATE,
        constants.HUGGINGFACE_CO_URL_TEMPLATE,
        auto.base_url,
        [h.base_url for h in helpers],
    )
    yield
    (
        constants.ENDPOINT,
        constants.INFERENCE_PROXY_TEMPLATE,
        constants.HUGGINGFACE_CO_URL_TEMPLATE,
        auto.base_url,
        bases,
    ) = saved
    for helper, base in zip(helpers, bases, strict=True):
        helper.base_url = base


class Hanging:
    """A server that takes every request and never answers."""

    def __init__(self) -> None:
        self.paths: list[str] = []
        self.stop = asyncio.Event()

    async def handle(self, request: web.Request) -> web.Response:
        self.paths.append(request.path)
        await self.stop.wait()
        return web.Response(status=503)


@pytest.fixture
async def hanging() -> AsyncIterator[tuple[Hanging, str]]:
    fake = Hanging()
    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", fake.handle)
    async with serve(app) as url:
        try:
            yield fake, url
        finally:
            fake.stop.set()


def settings(tmp_path: Path, *, hub: str, llm: str, **extra: object) -> Settings:
    catalog = tmp_path / "catalog.jsonl"
    catalog.write_text("".join(json.dumps(m) + "\n" for m in CATALOG), encoding="utf-8")
    values: dict[str, object] = {
        "openai_api_key": "sk-test-doctor",
        "openai_base_url": f"{llm}/v1",
        "llm_model": "fake-model",
        "llm_max_retries": 0,
        "hf_token": "hf_test_doctor",
        "hf_endpoint": hub,
        "model_catalog": catalog,
        "data_dir": tmp_path,
        "database_url": f"sqlite+aiosqlite:///{tmp_path / 'bot.db'}",
    }
    return Settings(_env_file=None, **(values | extra))  # type: ignore[call-arg]


async def run_doctor(s: Settings, **waits: float) -> tuple[int, list[str]]:
    out = io.StringIO()
    code = await doctor.run(s, out, **waits)
    return code, out.getvalue().splitlines()


def lines_of(lines: list[str], check: str) -> list[str]:
    return [line for line in lines if line[4:].split("  ")[0].strip() == check]


async def test_nothing_listening_is_one_line_per_check(tmp_path: Path) -> None:
    closed = f"http://127.0.0.1:{free_port()}"
    code, lines = await run_doctor(settings(tmp_path, hub=closed, llm=closed))
    assert code == 1
    # every check once: llm, database, hf token, catalog, inference, discord, slack
    assert len(lines) == 7, lines
    (llm,) = lines_of(lines, "llm")
    assert llm.startswith("BAD") and "could not be reached" in llm
    assert "Is its server running?" in llm and "OPENAI_BASE_URL" in llm
    (token,) = lines_of(lines, "hf token")
    assert token.startswith("BAD hf token   not checked: the Hub at " + closed)
    assert "HTTPS_PROXY" in token and "HF_ENDPOINT" in token
    (inference,) = lines_of(lines, "inference")
    assert inference.startswith("BAD inference  not checked: the Hub at " + closed)
    assert "could not be reached (ConnectError) for 3 models of 2 tasks" in inference
    assert lines_of(lines, "database")[0].startswith("ok ")
    assert "hf_test_doctor" not in "".join(lines)


async def test_a_hub_that_hangs_is_asked_once(
    tmp_path: Path, hanging: tuple[Hanging, str], llm_fake: FakeLLM
) -> None:
    fake, url = hanging
    code, lines = await run_doctor(
        # long enough for the one question to reach the fake on a loaded machine
        # (at 0.2 s it sometimes timed out before the fake saw it: 1 run in 3 at load 7)
        settings(tmp_path, hub=url, llm=llm_fake.base_url.removesuffix("/v1")),
        hub_timeout=2.0,
    )
    assert code == 1
    assert len(lines) == 7, lines
    assert lines_of(lines, "llm")[0].startswith("ok  llm")
    (token,) = lines_of(lines, "hf token")
    assert f"the Hub at {url} did not answer within 2 s" in token
    (inference,) = lines_of(lines, "inference")
    assert "did not answer within 2 s for 3 models of 2 tasks" in inference
    # one question, not one per model
    assert fake.paths == ["/api/whoami-v2"]


async def test_a_language_model_that_hangs_is_one_line(
    tmp_path: Path, hanging: tuple[Hanging, str]
) -> None:
    fake, url = hanging
    s = settings(tmp_path, hub=url, llm=url, inference_mode="local", hf_token=None)
    code, lines = await run_doctor(s, llm_budget=0.3)
    assert code == 1
    (llm,) = lines_of(lines, "llm")
    assert llm == (
        f"BAD llm        The language model at {url.removeprefix('http://')} did not answer "
        "within 0.3 s: is its server stuck or overloaded?"
    )
    # one request at a time, none retried after the budget; local models and no
    # token: the Hub is not asked
    assert len(fake.paths) == 1 and not fake.paths[0].startswith("/api/"), fake.paths
    assert lines_of(lines, "hf token") == ["ok  hf token   not set (not needed here)"]
