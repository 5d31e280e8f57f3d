"""The hosted-inference expert on Inference Providers: the real AsyncInferenceClient
against the loopback emulation of the 2026 service (Hub + router + providers)."""

from __future__ import annotations

import asyncio
import io
import threading
from collections.abc import AsyncIterator, Iterator
from typing import Any

import av
import pytest
import soundfile
from huggingface_hub import hf_api
from PIL import Image

from adapters.chat.messages import error_text
from core.catalog import Catalog, ModelInfo
from core.errors import TaskFailed
from core.experts import providers, remote
from core.experts.providers import SERVED_TASKS, configure
from core.experts.remote import RemoteExpert
from core.results import Blob, TaskInputs, TaskResult
from core.tasks import TASKS, TaskTimeouts
from tests.fakes.clock import FakeClock
from tests.fakes.hf_service import FakeHFService, ProviderMapping
from tests.fakes.samples import sample_png, sample_wav
from tests.said import raises_saying

TOKEN = "hf_test_token"


@pytest.fixture
def svc(hf_service: FakeHFService) -> Iterator[FakeHFService]:
    with hf_service.configure_client():
        configure(router_url=hf_service.router_url, hub_url=hf_service.hub_url)
        yield hf_service


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def sleeps(clock: FakeClock) -> list[float]:
    """How long the expert asked to wait, each time (on the fake clock)."""
    return clock.sleeps


@pytest.fixture
async def expert(svc: FakeHFService, clock: FakeClock) -> AsyncIterator[RemoteExpert]:
    e = RemoteExpert(token=TOKEN, timeouts=TaskTimeouts(20, 20, 20), clock=clock)
    yield e
    await e.aclose()


def png() -> Blob:
    return Blob("image", "image/png", sample_png(64, 48))


def inputs_for(task: str) -> TaskInputs:
    spec = TASKS[task]
    if "image" in spec.args:
        question = {
            "visual-question-answering": "What colour is it?",
            "document-question-answering": "What is the total?",
            "image-to-image": "make it blue",
        }.get(task)
        return TaskInputs(text=question, image=png())
    if "audio" in spec.args:
        return TaskInputs(audio=Blob("audio", "audio/wav", sample_wav()))
    texts = {
        "question-answering": "Who lives in Berkeley?\nMy name is Clara and I live in Berkeley.",
        "translation": "Translate to French: Hello world",
    }
    return TaskInputs(text=texts.get(task, "A cat sitting on a sunny windowsill."))


def assert_kind(task: str, result: TaskResult) -> None:
    """The result carries what the task promises, and media decodes."""
    output = TASKS[task].output
    if task == "object-detection":  # the drawn picture is made later (core.postprocess)
        assert result.boxes
    elif output == "image" and task != "image-segmentation":
        (blob,) = result.media
        assert blob.kind == "image"
        Image.open(io.BytesIO(blob.data)).verify()
    elif output == "audio":
        (blob,) = result.media
        assert blob.kind == "audio"
        data, rate = soundfile.read(io.BytesIO(blob.data))
        assert len(data) > 0 and rate > 0
    elif output == "video":
        (blob,) = result.media
        assert blob.kind == "video"
        with av.open(io.BytesIO(blob.data)) as container:
            assert sum(1 for _ in container.decode(video=0)) > 0
    elif task == "image-segmentation":
        assert result.segments and all(s.mask for s in result.segments)
    else:
        assert result.as_text(), result


# --- every served task, on the shipped catalog's first served model -----------------


@pytest.mark.parametrize("task", sorted(SERVED_TASKS))
async def test_every_served_task_runs_on_the_shipped_default(
    svc: FakeHFService, expert: RemoteExpert, task: str
) -> None:
    model = next(m for m in Catalog.load().models(task) if m.providers)
    assert expert.can_run(task, model)
    result = await expert.run(task, model, inputs_for(task))
    assert_kind(task, result)
    calls = svc.calls_for(model.id)
    assert calls, f"nothing reached the router for {model.id}"
    assert all(c.headers.get("authorization") == f"Bearer {TOKEN}" for c in calls)


# --- choosing the provider -----------------------------------------------------------


def add_t2i(svc: FakeHFService, model_id: str, mappings: dict[str, Any]) -> ModelInfo:
    svc.add_model(model_id, "text-to-image", mappings=mappings)
    return ModelInfo(model_id, "text-to-image", providers=tuple(mappings))


async def test_auto_takes_the_first_live_provider_the_client_speaks_to(
    svc: FakeHFService, expert: RemoteExpert
) -> None:
    model = add_t2i(
        svc,
        "org/painter",
        {
            "nscale": ProviderMapping("org/painter", "text-to-image", status="error"),
            "replicate": ProviderMapping("org/painter-r", "text-to-image"),
            "fal-ai": ProviderMapping("fal-ai/painter", "text-to-image"),
        },
    )
    await expert.run("text-to-image", model, TaskInputs(text="a fox"))
    (call,) = svc.calls_for("org/painter")
    assert call.provider == "replicate"


async def test_a_pinned_provider_wins_and_hf_provider_applies_to_all(
    svc: FakeHFService, clock: FakeClock
) -> None:
    mappings = {
        "replicate": ProviderMapping("org/painter-r", "text-to-image"),
        "fal-ai": ProviderMapping("fal-ai/painter", "text-to-image"),
    }
    model = add_t2i(svc, "org/painter", mappings)
    pinned = ModelInfo(model.id, model.task, providers=model.providers, provider="fal-ai")
    only_fal = RemoteExpert(token=TOKEN, provider="fal-ai", clock=clock)
    auto = RemoteExpert(token=TOKEN, clock=clock)
    try:
        await auto.run("text-to-image", pinned, TaskInputs(text="a fox"))
        await only_fal.run("text-to-image", model, TaskInputs(text="a fox"))
        # HF_PROVIDER names a provider this model lacks: not offered at all
        other = add_t2i(svc, "org/other", {"replicate": ("org/other", "text-to-image")})
        assert not only_fal.can_run("text-to-image", other)
    finally:
        await auto.aclose()
        await only_fal.aclose()
    assert [c.provider for c in svc.calls_for("org/painter")] == ["fal-ai", "fal-ai"]


async def test_every_providers_calls_share_one_connection_to_the_router(
    svc: FakeHFService, expert: RemoteExpert
) -> None:
    """A picture on replicate, a summary on hf-inference, a picture again:
    each provider has a client of its own, and all go to the router's host
    on the expert's one session, so the second provider's first call finds
    the connection open (no TCP and TLS handshake on the plan's path)."""
    painter = add_t2i(svc, "org/painter", {"replicate": ("org/painter-r", "text-to-image")})
    summariser = next(m for m in Catalog.load().models("summarization") if m.providers)
    await expert.run("text-to-image", painter, TaskInputs(text="a fox"))
    await expert.run("summarization", summariser, inputs_for("summarization"))
    await expert.run("text-to-image", painter, TaskInputs(text="a hen"))
    calls = svc.calls_for(kind="inference")
    assert [c.provider for c in calls] == ["replicate", "hf-inference", "replicate"]
    assert all(c.peer is not None for c in calls)
    assert len({c.peer for c in calls}) == 1, [c.peer for c in calls]


async def test_closing_the_expert_closes_its_one_session(
    svc: FakeHFService, clock: FakeClock
) -> None:
    painter = add_t2i(svc, "org/painter", {"replicate": ("org/painter-r", "text-to-image")})
    summariser = next(m for m in Catalog.load().models("summarization") if m.providers)
    expert = RemoteExpert(token=TOKEN, clock=clock)
    await expert.run("text-to-image", painter, TaskInputs(text="a fox"))
    await expert.run("summarization", summariser, inputs_for("summarization"))
    session = await expert._sessions.get()
    clients = list(expert._clients.values())
    assert len(clients) == 2 and all(c._async_client is session for c in clients)
    await expert.aclose()
    assert session.is_closed


async def test_hub_lookups_never_run_on_the_event_loop(
    svc: FakeHFService, expert: RemoteExpert, monkeypatch: pytest.MonkeyPatch
) -> None:
    threads: list[str] = []
    real = hf_api.HfApi.model_info

    def observed(self: Any, *args: Any, **kwargs: Any) -> Any:
        threads.append(threading.current_thread().name)
        return real(self, *args, **kwargs)

    monkeypatch.setattr(hf_api.HfApi, "model_info", observed)
    for task in ("text-to-image", "summarization", "automatic-speech-recognition"):
        model = next(m for m in Catalog.load().models(task) if m.providers)
        await expert.run(task, model, inputs_for(task))
        await expert.run(task, model, inputs_for(task))  # cached: no new look-up
    assert threads, "the Hub was never asked"
    assert threading.main_thread().name not in threads
    # one mapping look-up per model (and hf-inference's own task check), then the cache
    assert len(threads) <= 5


async def test_a_models_route_is_found_once_then_calls_go_out_without_a_thread_hop(
    svc: FakeHFService, expert: RemoteExpert, monkeypatch: pytest.MonkeyPatch
) -> None:
    hops: list[str] = []
    real = asyncio.to_thread
    real_hosted = providers.in_hosted_thread

    async def counted(func: Any, /, *args: Any, **kwargs: Any) -> Any:
        hops.append(getattr(func, "__qualname__", repr(func)))
        return await real(func, *args, **kwargs)

    async def counted_hosted(func: Any) -> Any:
        hops.append(getattr(func, "__qualname__", repr(func)))
        return await real_hosted(func)

    monkeypatch.setattr(asyncio, "to_thread", counted)
    # the Hub look-ups and the session, on the hosted calls' own threads
    monkeypatch.setattr(providers, "in_hosted_thread", counted_hosted)
    monkeypatch.setattr(remote, "in_hosted_thread", counted_hosted)
    model = next(m for m in Catalog.load().models("summarization") if m.providers)
    await expert.run("summarization", model, inputs_for("summarization"))
    first = list(hops)
    assert first  # the provider mapping (and the helper's own look-up), off the loop
    hops.clear()
    for _ in range(3):
        result = await expert.run("summarization", model, inputs_for("summarization"))
        assert result.text
    assert hops == []
    assert len(svc.calls_for(model.id)) == 4


async def test_chat_with_auto_lets_the_router_choose_without_asking_the_hub(
    svc: FakeHFService, expert: RemoteExpert
) -> None:
    model = next(m for m in Catalog.load().models("conversational") if m.providers)
    before = len(svc.hub_queries)
    result = await expert.run("conversational", model, TaskInputs(text="Say hello"))
    assert result.text
    (call,) = svc.calls_for(model.id)
    assert call.path == "/v1/chat/completions" and call.json["model"] == model.id
    assert len(svc.hub_queries) == before


async def test_vision_tasks_send_the_image_in_the_chat_message(
    svc: FakeHFService, expert: RemoteExpert
) -> None:
    model = next(m for m in Catalog.load().models("visual-question-answering") if m.providers)
    result = await expert.run(
        "visual-question-answering", model, TaskInputs(text="What colour?", image=png())
    )
    # the fake names the size of the image it decoded from the data URL
    assert "64x48" in result.answers[0].answer
    (call,) = svc.calls_for(model.id)
    parts = call.json["messages"][0]["content"]
    assert parts[0]["type"] == "text" and "What colour?" in parts[0]["text"]
    assert parts[1]["image_url"]["url"].startswith("data:image/png;base64,")


# --- the service's answers -----------------------------------------------------------


async def test_a_deleted_repo_costs_one_lookup_then_is_skipped(
    svc: FakeHFService, expert: RemoteExpert
) -> None:
    gone = ModelInfo("runwayml/stable-diffusion-v1-5", "text-to-image", providers=("hf-inference",))
    assert expert.can_run("text-to-image", gone)
    with raises_saying(TaskFailed, "no longer exists on the Hub"):
        await expert.run("text-to-image", gone, TaskInputs(text="x"))
    assert not expert.can_run("text-to-image", gone)
    assert svc.calls_for(gone.id) == []


async def test_a_model_no_provider_serves_is_skipped(
    svc: FakeHFService, expert: RemoteExpert
) -> None:
    blip = ModelInfo("Salesforce/blip-image-captioning-base", "image-to-text", providers=("x",))
    with raises_saying(TaskFailed, "no inference provider serves"):
        await expert.run("image-to-text", blip, TaskInputs(image=png()))
    assert expert.directory.is_dead(blip.id)


async def test_not_found_on_hf_inference_marks_the_model_dead(
    svc: FakeHFService, expert: RemoteExpert
) -> None:
    model = next(m for m in Catalog.load().models("summarization") if m.providers)
    svc.fail(model.id, 404)
    with raises_saying(TaskFailed, r"not served by the inference service \(HTTP 404\)"):
        await expert.run("summarization", model, TaskInputs(text="long text"))
    assert not expert.can_run("summarization", model)


@pytest.mark.parametrize(("status", "waited"), [(503, 20.0), (429, 2.0)])
async def test_loading_and_rate_limits_wait_as_told_then_succeed(
    svc: FakeHFService, expert: RemoteExpert, sleeps: list[float], status: int, waited: float
) -> None:
    model = next(m for m in Catalog.load().models("text-to-image") if m.providers)
    svc.fail(model.id, status)
    result = await expert.run("text-to-image", model, TaskInputs(text="a fox"))
    assert result.media
    assert sleeps == [waited]


async def test_out_of_credits_is_final_and_says_where_to_top_up(
    svc: FakeHFService, expert: RemoteExpert
) -> None:
    model = next(m for m in Catalog.load().models("text-to-speech") if m.providers)
    svc.fail(model.id, 402)
    with pytest.raises(TaskFailed) as info:
        await expert.run("text-to-speech", model, TaskInputs(text="hello"))
    assert info.value.final
    said = error_text(info.value)
    assert "credits" in said and "settings/billing" in said
    assert TOKEN not in str(info.value) and TOKEN not in error_text(info.value)
