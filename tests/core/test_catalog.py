"""The shipped catalog, and refreshing a catalog from the (fake) Hub API."""

from __future__ import annotations

import json
import time
from importlib import resources
from pathlib import Path

import pytest

from adapters.chat.messages import error_text
from core.catalog import Catalog
from core.catalog_refresh import describe, refresh_catalog, useful_tags, write_catalog
from core.errors import ConfigError, RunFailed
from core.experts.providers import SERVED_TASKS, client_serves
from core.tasks import TASKS
from tests.fakes.hf_fake import FakeHF
from tests.fakes.hf_service import FakeHFService, ProviderMapping
from tests.said import raises_saying

# --- the shipped default catalog -----------------------------------------


def test_default_catalog_covers_every_task() -> None:
    catalog = Catalog.load()
    assert set(catalog.tasks()) == set(TASKS)
    for task in TASKS:
        models = catalog.models(task)
        assert len(models) >= 3, task
        for m in models:
            assert 0 < len(m.description) <= 200, m.id
            assert "/" in m.id or m.id.replace("-", "").replace("_", "").isalnum(), m.id


def test_default_catalog_lines_have_the_documented_fields() -> None:
    text = resources.files("core.data").joinpath("default_catalog.jsonl").read_text("utf-8")
    seen: set[tuple[str, str]] = set()
    for line in text.splitlines():
        row = json.loads(line)
        assert {"id", "task", "downloads", "likes", "description"} <= set(row)
        assert set(row) <= {"id", "task", "downloads", "likes", "description", "tags", "providers"}
        assert row["task"] in TASKS
        assert isinstance(row["downloads"], int) and isinstance(row["likes"], int)
        assert isinstance(row.get("tags", []), list)
        for provider in row.get("providers", []):
            assert client_serves(provider, row["task"]), (row["id"], provider)
        assert (row["task"], row["id"]) not in seen
        seen.add((row["task"], row["id"]))


def test_default_catalog_ranks_by_downloads_ties_in_file_order() -> None:
    catalog = Catalog.load()
    for task in catalog.tasks():
        downloads = [m.downloads for m in catalog.models(task)]
        assert downloads == sorted(downloads, reverse=True), task
    # models with no known count keep the order the file gives them
    served = [m.id for m in catalog.models("text-to-image") if m.providers]
    assert served[:2] == ["black-forest-labs/FLUX.1-schnell", "black-forest-labs/FLUX.1-dev"]


def test_default_catalog_serves_every_provider_task_and_drops_deleted_repos() -> None:
    catalog = Catalog.load()
    for task in SERVED_TASKS:
        assert any(m.providers for m in catalog.models(task)), task
    ids = {m.id for m in catalog.all()}
    gone = {"runwayml/stable-diffusion-v1-5", "stabilityai/stable-diffusion-2-1", "gpt2", "t5-base"}
    assert not ids & gone


FACTS = Path(__file__).resolve().parents[1] / "data" / "inference_providers_2026.json"


def test_default_catalog_providers_are_documented() -> None:
    """Every provider the shipped catalog lists for a model is documented as serving it."""
    facts = json.loads(FACTS.read_text(encoding="utf-8"))
    documented: set[tuple[str, str]] = set()
    for info in facts["tasks"].values():
        documented |= {(e["hf_model_id"], e["provider"]) for e in info.get("examples", [])}
        documented |= {(a["hf_model_id"], a["provider"]) for a in info.get("assumed_models", [])}
    for m in Catalog.load().all():
        for provider in m.providers:
            assert (m.id, provider) in documented, (m.id, provider)


# --- refresh from the Hub --------------------------------------------------


def hub_model(model_id: str, tag: str | None, downloads: int, *tags: str, **extra) -> dict:
    return {
        "id": model_id,
        "pipeline_tag": tag,
        "downloads": downloads,
        "likes": downloads // 100,
        "tags": list(tags),
        "library_name": extra.pop("library_name", "transformers"),
        **extra,
    }


@pytest.fixture
def hub(hf_fake: FakeHF) -> FakeHF:
    hf_fake.hub_models = [
        hub_model("google/vit-base", "image-classification", 900, "vit", "license:apache-2.0"),
        hub_model("microsoft/resnet-50", "image-classification", 500, "resnet", "region:us"),
        hub_model("tiny/img", "image-classification", 5, "vit"),
        hub_model("distilbert/sst2", "text-classification", 800, "sentiment", "pytorch"),
        hub_model("chat/llm", "text-generation", 700, "conversational", "text-generation"),
        hub_model("plain/gpt", "text-generation", 9000, "text-generation"),
        hub_model(
            "lllyasviel/sd-controlnet-canny", None, 300, "diffusers", "controlnet",
            library_name="diffusers",
        ),
        hub_model(
            "someone/controlnet-lora", "text-to-image", 100, "lora", library_name="peft"
        ),
    ]  # fmt: skip
    return hf_fake


async def test_refresh_queries_the_hub_per_task(hub: FakeHF) -> None:
    catalog = await refresh_catalog(
        endpoint=hub.base_url,
        token="hf_secret",
        tasks=["image-classification", "Text-CLS", "conversational", "controlnet-sd"],
        per_task=2,
    )
    probe, *rest = hub.hub_queries
    assert probe == {"limit": "1"}  # the quick reachability check
    queries = sorted(rest, key=lambda q: (q.get("pipeline_tag", ""), q.get("search", "")))
    # no provider serves ControlNets: the most downloaded, for local inference
    assert queries[0] == {
        "search": "controlnet",
        "filter": "diffusers",
        "sort": "downloads",
        "limit": "2",
    }
    # the served tasks ask only for models some provider serves, with their mappings
    served = {q["pipeline_tag"]: q for q in queries[1:]}
    assert set(served) == {"image-classification", "text-classification", "text-generation"}
    for q in served.values():
        assert q["inference_provider"] == "all" and q["sort"] == "downloads"
        assert q["expand"] == "inferenceProviderMapping"  # (the first of the repeated keys)
    assert all(h["Authorization"] == "Bearer hf_secret" for h in hub.hub_headers[1:])

    # this Hub lists no provider mappings: nothing is offered that would fail
    assert catalog.models("image-classification") == []
    assert catalog.models("conversational") == []
    (canny,) = catalog.models("controlnet-sd")
    assert canny.id == "lllyasviel/sd-controlnet-canny"
    assert (canny.downloads, canny.likes, canny.providers) == (300, 3, ())
    assert canny.description == "controlnet-sd model (diffusers); tags: controlnet"


async def test_refresh_keeps_old_models_for_tasks_the_hub_lacks(hub: FakeHF) -> None:
    old = Catalog.load()
    catalog = await refresh_catalog(
        endpoint=hub.base_url, token=None, tasks=["video-classification"], keep=old
    )
    assert catalog.models("video-classification") == old.models("video-classification")


async def test_refresh_writes_a_loadable_catalog(hub: FakeHF, tmp_path: Path) -> None:
    catalog = await refresh_catalog(endpoint=hub.base_url, token=None, tasks=list(TASKS))
    target = write_catalog(catalog, tmp_path / "sub" / "catalog.jsonl")
    assert list(target.parent.iterdir()) == [target]  # no temp file left behind
    loaded = Catalog.load(target)
    assert loaded.all() == catalog.all()
    assert len(hub.hub_queries) == 1 + len(TASKS)


@pytest.mark.parametrize(
    ("status", "error", "words"),
    [
        (401, ConfigError, "refused the credentials (HTTP 401); check HF_TOKEN"),
        (404, ConfigError, "does not serve the Hub API (HTTP 404"),
        (400, RunFailed, "answered HTTP 400 while listing image-classification models"),
    ],
)
async def test_refresh_errors(hub: FakeHF, status: int, error: type, words: str) -> None:
    hub.fail_hub(status, times=2)  # the probe ignores statuses; the query reports them
    with pytest.raises(error) as info:
        await refresh_catalog(
            endpoint=hub.base_url, token="hf_secret", tasks=["image-classification"]
        )
    said = error_text(info.value) if isinstance(info.value, RunFailed) else str(info.value)
    assert words in said
    assert "hf_secret" not in said and "hf_secret" not in str(info.value)


async def test_refresh_unreachable_hub_fails_fast(
    unused_tcp_port: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    # HfApi backs off with time.sleep between connection retries: none may happen.
    slept: list[float] = []
    monkeypatch.setattr(time, "sleep", slept.append)
    with raises_saying(RunFailed, "could not reach the Hub"):
        await refresh_catalog(
            endpoint=f"http://127.0.0.1:{unused_tcp_port}", token=None, tasks=["summarization"]
        )
    assert slept == []  # no backoff retries


async def test_refresh_rejects_unknown_tasks_and_bad_sizes() -> None:
    with pytest.raises(ConfigError, match=r"unknown task.*: painting"):
        await refresh_catalog(endpoint="http://x", token=None, tasks=["painting", "ASR"])
    with pytest.raises(ConfigError, match="per_task"):
        await refresh_catalog(endpoint="http://x", token=None, tasks=["ASR"], per_task=0)


async def test_refresh_keeps_only_live_mappings_the_client_can_use(
    hf_service: FakeHFService,
) -> None:
    svc = hf_service
    svc.add_model(
        "org/staging-only",
        "text-to-image",
        downloads=10**9,
        mappings={"fal-ai": ProviderMapping("fal-ai/x", "text-to-image", status="staging")},
    )
    svc.add_model(
        "org/asr-together",  # the service lists together for ASR; the client has no helper
        "automatic-speech-recognition",
        downloads=10**9,
        mappings={"together": ProviderMapping("org/asr", "automatic-speech-recognition")},
    )
    catalog = await refresh_catalog(
        endpoint=svc.hub_url,
        token="hf_test_token",
        tasks=["text-to-image", "automatic-speech-recognition", "image-to-text", "summarization"],
        per_task=3,
    )
    ids = {m.id for m in catalog.all()}
    assert "org/staging-only" not in ids and "org/asr-together" not in ids
    for task in ("text-to-image", "automatic-speech-recognition", "image-to-text"):
        models = catalog.models(task)
        assert models, task
        assert [m.downloads for m in models] == sorted((m.downloads for m in models), reverse=True)
        for m in models:
            assert m.providers and all(client_serves(p, task) for p in m.providers), m
            assert "served by" in m.description
    # image-to-text is asked of vision-language chat models
    vlm = catalog.models("image-to-text")[0]
    assert svc.models[vlm.id].pipeline_tag == "image-text-to-text"
    whisper = catalog.get("openai/whisper-large-v3", "automatic-speech-recognition")
    assert whisper is not None and "together" not in whisper.providers
    assert set(whisper.providers) >= {"fal-ai", "hf-inference"}


async def test_refresh_for_one_provider_keeps_only_its_models(
    hf_service: FakeHFService,
) -> None:
    catalog = await refresh_catalog(
        endpoint=hf_service.hub_url,
        token="hf_test_token",
        tasks=["text-to-image"],
        per_task=5,
        provider="fal-ai",
    )
    models = catalog.models("text-to-image")
    assert models and all(m.providers == ("fal-ai",) for m in models)
    query = next(q for q in hf_service.hub_queries if q.param("pipeline_tag") == "text-to-image")
    assert query.param("inference_provider") == "fal-ai"


def test_generated_descriptions() -> None:
    tags = [
        "timm",
        "image-classification",
        "license:mit",
        "dataset:imagenet-1k",
        "vision",
        "vision",
    ]
    assert useful_tags(tags) == ["timm", "image-classification", "vision"]
    assert describe("image-classification", "image-classification", "timm", tags) == (
        "image-classification model (timm); tags: vision"
    )
    long = describe("translation", None, None, [f"tag{i:03d}" * 10 for i in range(6)])
    assert len(long) <= 200 and long.endswith("…")
    assert describe("controlnet-sd", None, None, []) == "controlnet-sd model"
