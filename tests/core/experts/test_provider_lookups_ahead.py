"""A plan's Hub look-ups start when the plan is known, not when each task
starts: the real AsyncInferenceClient and huggingface_hub's own Hub calls
against the loopback emulation of the 2026 service (Hub + router + providers).

Ordering is read from what the fakes recorded (a later step's Hub look-up
arrives while the first step's model call is held open), never from timings.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator, Iterator
from concurrent.futures import ThreadPoolExecutor

import pytest

from core.catalog import ModelInfo
from core.errors import TaskCode, TaskFailed
from core.execution import Executor
from core.experts.base import LooksUpAhead
from core.experts.providers import configure
from core.experts.remote import RemoteExpert
from core.planning import PlannedTask
from core.results import Blob, TaskInputs
from core.routing import ExpertRouter
from core.tasks import TaskTimeouts
from core.types import TaskStatus
from tests.fakes.clock import FakeClock
from tests.fakes.hf_service import FakeHFService, HubQuery, RouterCall
from tests.said import raises_saying

TOKEN = "hf_test_token"
PAINTER = ModelInfo("org/painter", "text-to-image", providers=("fal-ai",))
CAPTIONER = ModelInfo("org/captioner", "image-to-text", providers=("together",))
SPEAKER = ModelInfo("org/speaker", "text-to-speech", providers=("fal-ai",))
CHAIN = [
    PlannedTask(0, "text-to-image", [], {"text": "a red fox on a hill"}),
    PlannedTask(1, "image-to-text", [0], {"image": "<resource>-0"}),
    PlannedTask(2, "text-to-speech", [1], {"text": "<resource>-1"}),
]


@pytest.fixture
def svc(hf_service: FakeHFService) -> Iterator[FakeHFService]:
    hf_service.add_model(
        PAINTER.id, "text-to-image", mappings={"fal-ai": ("fal-ai/painter", "text-to-image")}
    )
    hf_service.add_model(
        CAPTIONER.id,
        "image-text-to-text",
        mappings={"together": ("org/captioner-t", "conversational")},
    )
    hf_service.add_model(
        SPEAKER.id, "text-to-speech", mappings={"fal-ai": ("fal-ai/speaker", "text-to-speech")}
    )
    with hf_service.configure_client():
        configure(router_url=hf_service.router_url, hub_url=hf_service.hub_url)
        yield hf_service


@pytest.fixture
async def expert(svc: FakeHFService) -> AsyncIterator[RemoteExpert]:
    e = RemoteExpert(token=TOKEN, timeouts=TaskTimeouts(20, 20, 20), clock=FakeClock())
    yield e
    await e.aclose()


def mapping_lookups(svc: FakeHFService, model_id: str) -> list[float]:
    """When the Hub was asked for ``model_id``'s provider mapping."""
    return [
        q.time
        for q in svc.hub_queries
        if q.path == f"/api/models/{model_id}"
        and "inferenceProviderMapping" in q.params.get("expand", [])
    ]


async def no_file(handle: str) -> Blob:
    raise AssertionError(f"no stored file should be read ({handle})")


async def test_a_chains_later_lookups_happen_while_the_first_model_runs(
    svc: FakeHFService, expert: RemoteExpert
) -> None:
    later = (CAPTIONER.id, SPEAKER.id)

    async def hold_the_painter(call: RouterCall) -> None:
        # The first step's model call stays open until the Hub has been asked
        # for the later steps' models (bounded: a broken run fails below).
        if call.hub_id != PAINTER.id:
            return
        for _ in range(500):
            if all(mapping_lookups(svc, m) for m in later):
                return
            await asyncio.sleep(0.01)

    svc.hold = hold_the_painter
    assert isinstance(expert, LooksUpAhead)
    ex = Executor(ExpertRouter("remote", remote=expert, local=None))
    candidates = {0: [PAINTER], 1: [CAPTIONER], 2: [SPEAKER]}
    outcomes = await ex.run(CHAIN, candidates, load_handle=no_file)

    assert [outcomes[i].status for i in range(3)] == [TaskStatus.DONE] * 3, outcomes
    (painting,) = svc.calls_for(PAINTER.id)
    for model_id in later:
        (asked,) = mapping_lookups(svc, model_id)  # once, by the look-up ahead
        assert asked < painting.t_end, f"{model_id} was looked up after the first step"
    assert len(mapping_lookups(svc, PAINTER.id)) == 1
    # the router saw the steps in the plan's order
    steps = [c.hub_id for c in svc.calls if c.kind == "inference"]
    assert steps == [PAINTER.id, CAPTIONER.id, SPEAKER.id]


async def test_a_call_that_comes_during_the_lookup_ahead_waits_for_it(
    svc: FakeHFService, expert: RemoteExpert
) -> None:
    expert.look_up_ahead("text-to-image", PAINTER)
    await asyncio.sleep(0)  # the look-up ahead is under way
    result = await expert.run("text-to-image", PAINTER, TaskInputs(text="a fox"))
    assert result.media
    # two calls of another model at once, with no look-up ahead
    both = await asyncio.gather(
        expert.run("text-to-speech", SPEAKER, TaskInputs(text="one")),
        expert.run("text-to-speech", SPEAKER, TaskInputs(text="two")),
    )
    assert all(r.media for r in both)
    assert len(mapping_lookups(svc, PAINTER.id)) == 1
    assert len(mapping_lookups(svc, SPEAKER.id)) == 1
    # once looked up, a later look-up ahead asks nothing
    before = len(svc.hub_queries)
    await expert.directory.look_up_ahead("text-to-image", PAINTER.id, None)
    assert len(svc.hub_queries) == before


async def test_a_failed_lookup_ahead_changes_nothing_and_the_call_asks_again(
    svc: FakeHFService, expert: RemoteExpert
) -> None:
    svc.fail_hub(503)
    await expert.directory.look_up_ahead("text-to-image", PAINTER.id, None)  # no error
    assert expert.can_run("text-to-image", PAINTER)
    result = await expert.run("text-to-image", PAINTER, TaskInputs(text="a fox"))
    assert result.media
    assert len(mapping_lookups(svc, PAINTER.id)) == 2


async def test_a_call_that_joins_a_failing_lookup_ahead_reports_it_as_today(
    svc: FakeHFService, expert: RemoteExpert
) -> None:
    svc.fail_hub(500)
    expert.look_up_ahead("text-to-image", PAINTER)
    await asyncio.sleep(0)  # the look-up ahead is under way; the call waits for it
    with pytest.raises(TaskFailed) as info:
        await expert.run("text-to-image", PAINTER, TaskInputs(text="a fox"))
    assert info.value.code is TaskCode.HUB_LOOKUP_HTTP
    assert info.value.fields["status"] == 500
    assert len(mapping_lookups(svc, PAINTER.id)) == 1
    assert not expert.directory.is_dead(PAINTER.id)  # a 5xx is not "gone"


async def test_an_unknown_model_is_put_on_the_skip_list_by_its_call_not_ahead(
    svc: FakeHFService, expert: RemoteExpert
) -> None:
    gone = ModelInfo("org/never-was", "text-to-image", providers=("fal-ai",))
    blip = ModelInfo("Salesforce/blip-image-captioning-base", "image-to-text", providers=("x",))
    await expert.directory.look_up_ahead("text-to-image", gone.id, None)
    await expert.directory.look_up_ahead("image-to-text", blip.id, None)
    assert expert.can_run("text-to-image", gone) and not expert.directory.is_dead(blip.id)
    with raises_saying(TaskFailed, "no longer exists on the Hub"):
        await expert.run("text-to-image", gone, TaskInputs(text="x"))
    with raises_saying(TaskFailed, "no inference provider serves"):
        await expert.run("image-to-text", blip, TaskInputs(text="x"))
    assert expert.directory.is_dead(gone.id) and expert.directory.is_dead(blip.id)
    assert svc.calls_for(gone.id) == [] and svc.calls_for(blip.id) == []


async def test_nothing_is_looked_up_ahead_for_a_task_api_url_or_routed_chat(
    svc: FakeHFService,
) -> None:
    hosted = RemoteExpert(token=TOKEN, base_url=svc.router_url + "/hf-inference")
    routed = RemoteExpert(token=TOKEN)
    chat = ModelInfo("openai/gpt-oss-120b", "conversational", providers=("together",))
    try:
        hosted.look_up_ahead("text-to-image", PAINTER)
        routed.look_up_ahead("conversational", chat)
        await asyncio.sleep(0)
        await asyncio.gather(*hosted._ahead, *routed._ahead)
    finally:
        await hosted.aclose()
        await routed.aclose()
    assert svc.hub_queries == []


@pytest.mark.parametrize(
    ("task", "listed"),
    [("summarization", ("hf-inference",)), ("text-to-image", ("hf-inference", "fal-ai"))],
    ids=["only", "first"],
)
async def test_on_hf_inference_the_two_hub_lookups_go_out_together(
    svc: FakeHFService, expert: RemoteExpert, task: str, listed: tuple[str, ...]
) -> None:
    # The client's hf-inference helper asks the Hub for the model's pipeline
    # tag after the mapping; it does not need the mapping, so both are asked
    # at once when hf-inference is the provider the catalog lists first.
    svc.add_model(
        "org/summer",
        task,
        mappings={
            p: ("org/summer" if p == "hf-inference" else f"{p}/summer", task) for p in listed
        },
    )
    model = ModelInfo("org/summer", task, providers=listed)
    together: list[bool] = []

    def asked() -> int:
        return len([q for q in svc.hub_queries if q.path == f"/api/models/{model.id}"])

    async def hold_until_both(query: HubQuery) -> None:
        for _ in range(500):
            if asked() >= 2:
                break
            await asyncio.sleep(0.01)
        together.append(asked() >= 2)

    svc.hub_hold = hold_until_both
    await expert.run(task, model, TaskInputs(text="a long text"))
    assert [c.provider for c in svc.calls_for(model.id)] == ["hf-inference"]
    assert together == [True, True]  # neither was answered before the other arrived
    assert len(mapping_lookups(svc, model.id)) == 1


async def test_another_provider_listed_first_is_not_second_guessed(
    svc: FakeHFService, expert: RemoteExpert
) -> None:
    """fal-ai first in the catalog, hf-inference second: the call runs on
    fal-ai, and the Hub is asked for the mapping alone (no pipeline tag)."""
    svc.add_model(
        "org/flux",
        "text-to-image",
        mappings={
            "fal-ai": ("fal-ai/flux", "text-to-image"),
            "hf-inference": ("org/flux", "text-to-image"),
        },
    )
    model = ModelInfo("org/flux", "text-to-image", providers=("fal-ai", "hf-inference"))
    await expert.run("text-to-image", model, TaskInputs(text="a fox"))
    assert [c.provider for c in svc.calls_for(model.id)] == ["fal-ai"]
    asked = [q for q in svc.hub_queries if q.path == f"/api/models/{model.id}"]
    assert len(asked) == 1 and "inferenceProviderMapping" in asked[0].params.get("expand", [])


async def test_lookups_do_not_wait_for_the_loops_default_threads(
    svc: FakeHFService, expert: RemoteExpert
) -> None:
    # The client polls a queued job (fal-ai, wavespeed, together's videos) in
    # a thread of the loop's default executor for the whole generation; with
    # every one of those threads taken, a model's look-ups still go out, and
    # a first call on hf-inference (its client's session built) still runs.
    svc.add_model(
        "org/summer", "summarization", mappings={"hf-inference": ("org/summer", "summarization")}
    )
    summer = ModelInfo("org/summer", "summarization", providers=("hf-inference",))
    loop = asyncio.get_running_loop()
    busy = ThreadPoolExecutor(max_workers=1)
    loop.set_default_executor(busy)
    release = threading.Event()
    polling = loop.run_in_executor(None, release.wait)
    try:
        async with asyncio.timeout(10):  # a bound, not a measurement: stuck otherwise
            await expert.directory.look_up_ahead("text-to-speech", SPEAKER.id, None)
            route = await expert.directory.provider_for("text-to-speech", SPEAKER.id, None)
            result = await expert.run("summarization", summer, TaskInputs(text="a long text"))
        assert route.provider == "fal-ai" and result.text
        assert not polling.done()
    finally:
        release.set()
        await polling  # the loop shuts its default executor down as it closes
    assert len(mapping_lookups(svc, SPEAKER.id)) == 1
