"""The shipped catalog, and refreshing a catalog from the (fake) Hub API."""

from __future__ import annotations

import json
import time
from importlib import resources
from pathlib import Path

import pytest

from core.catalog import Catalog
from core.catalog_refresh import describe, refresh_catalog, useful_tags, write_catalog
from core.errors import ConfigError, RunFailed
from core.tasks import TASKS
from tests.fakes.hf_fake import FakeHF

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
        assert set(row) == {"id", "task", "downloads", "likes", "description", "tags"}
        assert row["task"] in TASKS
        assert isinstance(row["downloads"], int) and isinstance(row["likes"], int)
        assert isinstance(row["tags"], list)
        assert (row["task"], row["id"]) not in seen
        seen.add((row["task"], row["id"]))


def test_default_catalog_ranks_by_downloads() -> None:
    catalog = Catalog.load()
    top = catalog.candidates("text-to-image", k=1)[0]
    assert top.id == "runwayml/stable-diffusion-v1-5"
    downloads = [m.downloads for m in catalog.models("summarization")]
    assert downloads == sorted(downloads, reverse=True)


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
    assert queries == [
        {"search": "controlnet", "filter": "diffusers", "sort": "downloads", "limit": "2"},
        {"pipeline_tag": "image-classification", "sort": "downloads", "limit": "2"},
        {"pipeline_tag": "text-classification", "sort": "downloads", "limit": "2"},
        {
            "pipeline_tag": "text-generation",
            "filter": "conversational",
            "sort": "downloads",
            "limit": "2",
        },
    ]
    assert all(h["Authorization"] == "Bearer hf_secret" for h in hub.hub_headers[1:])

    assert [m.id for m in catalog.models("image-classification")] == [
        "google/vit-base",
        "microsoft/resnet-50",
    ]
    assert [m.id for m in catalog.models("text-classification")] == ["distilbert/sst2"]
    assert [m.id for m in catalog.models("conversational")] == ["chat/llm"]
    assert [m.id for m in catalog.models("controlnet-sd")] == ["lllyasviel/sd-controlnet-canny"]
    vit = catalog.get("google/vit-base")
    assert vit is not None
    assert (vit.downloads, vit.likes, vit.tags) == (900, 9, ("vit",))
    assert vit.description == "image-classification model (transformers); tags: vit"


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
    assert words in str(info.value)
    assert "hf_secret" not in str(info.value)


async def test_refresh_unreachable_hub_fails_fast(unused_tcp_port: int) -> None:
    started = time.monotonic()
    with pytest.raises(RunFailed, match="could not reach the Hub"):
        await refresh_catalog(
            endpoint=f"http://127.0.0.1:{unused_tcp_port}", token=None, tasks=["summarization"]
        )
    assert time.monotonic() - started < 5  # no backoff retries


async def test_refresh_rejects_unknown_tasks_and_bad_sizes() -> None:
    with pytest.raises(ConfigError, match=r"unknown task.*: painting"):
        await refresh_catalog(endpoint="http://x", token=None, tasks=["painting", "ASR"])
    with pytest.raises(ConfigError, match="per_task"):
        await refresh_catalog(endpoint="http://x", token=None, tasks=["ASR"], per_task=0)


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
