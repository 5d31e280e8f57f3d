"""Which backend runs a model: the router's order and its reasons (no network)."""

from __future__ import annotations

from dataclasses import dataclass, field

from core.catalog import Catalog, ModelInfo
from core.experts.remote import RemoteExpert
from core.results import TaskInputs, TaskResult
from core.routing import ExpertRouter


@dataclass
class LocalStandIn:
    """A local backend that knows where each model's weights are."""

    places: dict[str, str] = field(default_factory=dict)  # model id -> where()
    name: str = "local"

    def can_run(self, task: str, model: ModelInfo | None = None) -> bool:
        return model is None or model.id in self.places

    def where(self, model: ModelInfo) -> str | None:
        return self.places.get(model.id)

    def available(self) -> bool:
        return True

    async def run(self, task: str, model: ModelInfo, inputs: TaskInputs) -> TaskResult:
        raise AssertionError("not called")

    async def aclose(self) -> None:
        return None


SERVED = ModelInfo("org/served", "image-classification", providers=("hf-inference",))


def test_hybrid_runs_weights_that_are_here_locally_first() -> None:
    for where in ("on disk", "cached"):
        router = ExpertRouter(
            "hybrid", remote=RemoteExpert(token=None), local=LocalStandIn({SERVED.id: where})
        )
        assert [b.name for b in router.backends_for(SERVED.task, SERVED)] == ["local", "remote"]


def test_hybrid_does_not_download_what_the_service_runs() -> None:
    router = ExpertRouter(
        "hybrid", remote=RemoteExpert(token=None), local=LocalStandIn({SERVED.id: "will download"})
    )
    assert [b.name for b in router.backends_for(SERVED.task, SERVED)] == ["remote", "local"]


def test_local_mode_downloads_and_remote_mode_never_runs_locally() -> None:
    local = LocalStandIn({SERVED.id: "will download"})
    assert [
        b.name
        for b in ExpertRouter("local", remote=None, local=local).backends_for(SERVED.task, SERVED)
    ] == ["local"]
    remote_only = ExpertRouter("remote", remote=RemoteExpert(token=None), local=local)
    assert [b.name for b in remote_only.backends_for(SERVED.task, SERVED)] == ["remote"]


def test_unserved_tasks_are_not_offered_and_say_why() -> None:
    catalog = Catalog(
        [
            SERVED,
            ModelInfo("org/tab", "tabular-classification"),
            ModelInfo("org/old", "image-to-text"),  # no provider serves it
        ]
    )
    router = ExpertRouter("remote", remote=RemoteExpert(token=None), local=None)
    assert router.runnable_tasks(catalog) == ["image-classification"]
    why = {a.task: a.why_not for a in router.availability(catalog)}
    assert why["tabular-classification"] == (
        "no inference provider serves this task (run it locally, or give a model an endpoint)"
    )
    assert why["image-to-text"] == "no catalog model is served by an inference provider"
    pinned = ExpertRouter("remote", remote=RemoteExpert(token=None, provider="fal-ai"), local=None)
    assert pinned.runnable_tasks(catalog) == []
    assert {a.task: a.why_not for a in pinned.availability(catalog)}["image-classification"] == (
        "no catalog model is served by HF_PROVIDER=fal-ai for this task"
    )


def test_runnable_tasks_follow_the_skip_list_at_once() -> None:
    """What the planner is offered, computed per request without building the
    whole availability table: the same answer, and a model put on the skip
    list counts from the next request on."""
    only = ModelInfo("org/only", "image-classification", providers=("hf-inference",))
    other = ModelInfo("org/other", "summarization", providers=("hf-inference",))
    catalog = Catalog([only, other])
    remote = RemoteExpert(token=None)
    for router in (
        ExpertRouter("remote", remote=remote, local=None),
        ExpertRouter("hybrid", remote=remote, local=LocalStandIn({other.id: "on disk"})),
        ExpertRouter("local", remote=None, local=LocalStandIn({only.id: "cached"})),
    ):
        expected = [a.task for a in router.availability(catalog) if a.backends]
        assert router.runnable_tasks(catalog) == expected
    router = ExpertRouter("remote", remote=remote, local=None)
    assert sorted(router.runnable_tasks(catalog)) == ["image-classification", "summarization"]
    remote.directory.mark_dead(only.id, "gone")
    assert router.runnable_tasks(catalog) == ["summarization"]
