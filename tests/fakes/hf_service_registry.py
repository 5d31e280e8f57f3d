"""The fake Hub's registry: models, their Inference Providers mappings, deleted
and renamed repos, and the JSON the Hub API answers with.

Shapes follow hub-docs ``docs/inference-providers/hub-api.md`` and what
``huggingface_hub.hf_api.ModelInfo`` parses: ``inferenceProviderMapping`` is a
dict keyed by provider on ``GET /api/models/{id}`` and a list of objects with a
``provider`` key on ``GET /api/models``. With ``expand`` the Hub answers only
``_id``, ``id`` and the expanded fields.

:meth:`Registry.load_facts` seeds the documented facts of
``tests/data/inference_providers_2026.json``. Download and like counts of
seeded models are made up (deterministic, from a hash of the id): they are
plausible, not real.
"""

from __future__ import annotations

import hashlib
import json
import zlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from functools import lru_cache
from pathlib import Path
from typing import Any, Literal

TEST_DATA = Path(__file__).resolve().parents[1] / "data"
FACTS_PATH = TEST_DATA / "inference_providers_2026.json"
# id and pipeline tag, in the 2023 Hub snapshot, of the repos the facts say were renamed
SNAPSHOT_2023 = TEST_DATA / "hub_models_2023_renamed.jsonl"

Status = Literal["live", "staging", "error"]

# The documented service task -> the task name of the client's provider helper.
CLIENT_TASK = {"text-generation": "conversational", "image-text-to-text": "conversational"}
# Media-generating pipelines are diffusers repos on the Hub; the rest transformers.
_DIFFUSERS = {"text-to-image", "image-to-image", "text-to-video", "image-to-video"}


@dataclass(frozen=True)
class ProviderMapping:
    """One provider's entry in a model's ``inferenceProviderMapping``."""

    provider_id: str
    task: str
    status: Status = "live"
    adapter: str | None = None
    adapter_weights_path: str | None = None
    is_model_author: bool = False

    def as_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "status": self.status,
            "providerId": self.provider_id,
            "task": self.task,
            "isModelAuthor": self.is_model_author,
        }
        if self.adapter is not None:
            out["adapter"] = self.adapter
        if self.adapter_weights_path is not None:
            out["adapterWeightsPath"] = self.adapter_weights_path
        return out


MappingSpec = ProviderMapping | tuple[str, str]


def _crc(text: str) -> int:
    return zlib.crc32(text.encode())


def plausible_downloads(hub_id: str) -> int:
    """Made-up but deterministic: 1k..5M, log-spread."""
    return int(10 ** (3 + (_crc(hub_id) % 10_000) / 10_000 * 3.7))


@dataclass
class HubModel:
    id: str
    pipeline_tag: str | None
    mappings: dict[str, ProviderMapping] = field(default_factory=dict)
    downloads: int = 0
    likes: int = 0
    tags: tuple[str, ...] = ()
    library_name: str | None = None

    @property
    def author(self) -> str | None:
        return self.id.split("/", 1)[0] if "/" in self.id else None

    def all_tags(self) -> list[str]:
        out = [t for t in (self.library_name, self.pipeline_tag) if t]
        out += [t for t in self.tags if t not in out]
        return [*out, "region:us"]

    def _fields(self) -> dict[str, Any]:
        digest = hashlib.sha1(self.id.encode()).hexdigest()
        created = datetime(2023, 1, 1, tzinfo=UTC) + timedelta(days=_crc(self.id) % 1000)
        stamp = lambda d: d.strftime("%Y-%m-%dT%H:%M:%S.000Z")  # noqa: E731
        live = any(m.status == "live" for m in self.mappings.values())
        return {
            "_id": digest[:24],
            "id": self.id,
            "author": self.author,
            "sha": digest,
            "createdAt": stamp(created),
            "lastModified": stamp(created + timedelta(days=30)),
            "private": False,
            "gated": False,
            "disabled": False,
            "downloads": self.downloads,
            "downloadsAllTime": self.downloads * 12,
            "likes": self.likes,
            "trendingScore": self.likes // 10,
            "library_name": self.library_name,
            "tags": self.all_tags(),
            "pipeline_tag": self.pipeline_tag,
            "siblings": [{"rfilename": n} for n in (".gitattributes", "README.md", "config.json")],
            "spaces": [],
            **({"inference": "warm"} if live else {}),
        }

    def info_json(self, expand: list[str]) -> dict[str, Any]:
        """``GET /api/models/{id}``: everything, or ``_id``/``id`` plus ``expand``."""
        fields = self._fields()
        if not expand:
            keep = [
                k for k in fields if k not in ("downloadsAllTime", "trendingScore", "inference")
            ]
            return {**{k: fields[k] for k in keep}, "modelId": self.id}
        return self._expanded(fields, expand, as_list=False)

    def list_json(self, expand: list[str]) -> dict[str, Any]:
        """One entry of ``GET /api/models``."""
        fields = self._fields()
        if not expand:
            keys = ("_id", "id", "likes", "trendingScore", "private", "downloads", "tags")
            keys += ("pipeline_tag", "library_name", "createdAt")
            return {**{k: fields[k] for k in keys if fields[k] is not None}, "modelId": self.id}
        return self._expanded(fields, expand, as_list=True)

    def _expanded(
        self, fields: dict[str, Any], expand: list[str], *, as_list: bool
    ) -> dict[str, Any]:
        out: dict[str, Any] = {"_id": fields["_id"], "id": self.id}
        for key in expand:
            if key == "inferenceProviderMapping":
                out[key] = (
                    [{"provider": p, **m.as_json()} for p, m in self.mappings.items()]
                    if as_list
                    else {p: m.as_json() for p, m in self.mappings.items()}
                )
            elif key in fields and fields[key] is not None:
                out[key] = fields[key]
        return out


class Registry:
    """Models by hub id (insertion order is the Hub's mapping order)."""

    def __init__(self) -> None:
        self.models: dict[str, HubModel] = {}
        self.deleted: set[str] = set()
        self.renamed: dict[str, str] = {}

    # -- editing -----------------------------------------------------------

    def add(
        self,
        hub_id: str,
        pipeline_tag: str | None,
        *,
        mappings: Mapping[str, MappingSpec] | None = None,
        downloads: int = 0,
        likes: int = 0,
        tags: Iterable[str] = (),
        library_name: str | None = None,
    ) -> HubModel:
        parsed = {
            provider: spec if isinstance(spec, ProviderMapping) else ProviderMapping(*spec)
            for provider, spec in (mappings or {}).items()
        }
        model = HubModel(hub_id, pipeline_tag, parsed, downloads, likes, tuple(tags), library_name)
        self.models[hub_id] = model
        self.deleted.discard(hub_id)
        return model

    def delete(self, hub_id: str) -> None:
        self.models.pop(hub_id, None)
        self.deleted.add(hub_id)

    def rename(self, old: str, new: str) -> None:
        self.renamed[old] = new

    # -- lookups -----------------------------------------------------------

    def get(self, hub_id: str) -> HubModel | None:
        return None if hub_id in self.deleted else self.models.get(hub_id)

    def serving(self, provider: str, provider_id: str) -> list[HubModel]:
        """Models whose mapping for ``provider`` has this provider-side id."""
        return [
            m
            for m in self.models.values()
            if provider in m.mappings and m.mappings[provider].provider_id == provider_id
        ]

    def serving_version(self, provider: str, version: str) -> list[HubModel]:
        """Replicate ``owner/name:version`` ids, found by their version alone."""
        return [
            m
            for m in self.models.values()
            if provider in m.mappings and m.mappings[provider].provider_id.endswith(f":{version}")
        ]

    def list(self, query: Mapping[str, list[str]]) -> list[dict[str, Any]]:
        """``GET /api/models`` filtered, sorted (descending) and cut like the Hub."""
        one = lambda name: (query.get(name) or [None])[0]  # noqa: E731
        models = [m for m in self.models.values() if m.id not in self.deleted]
        if tag := one("pipeline_tag"):
            models = [m for m in models if m.pipeline_tag == tag]
        for tag in query.get("filter", []):
            models = [m for m in models if tag in m.all_tags() or tag == m.id]
        if author := one("author"):
            models = [m for m in models if m.author == author]
        if search := one("search"):
            models = [m for m in models if search.casefold() in m.id.casefold()]
        if one("inference") == "warm":
            models = [m for m in models if any(v.status == "live" for v in m.mappings.values())]
        wanted = {p for value in query.get("inference_provider", []) for p in value.split(",") if p}
        if wanted:
            models = [
                m for m in models if m.mappings and ("all" in wanted or wanted & set(m.mappings))
            ]
        if sort := one("sort"):
            key = {"downloads": "downloads", "likes": "likes", "trendingScore": "likes"}.get(sort)
            if key is not None:
                models.sort(key=lambda m: getattr(m, key), reverse=True)
            elif sort in ("createdAt", "lastModified"):
                models.sort(key=lambda m: m._fields()[sort], reverse=True)
        if limit := one("limit"):
            models = models[: int(limit)]
        expand = query.get("expand", []) + query.get("expand[]", [])
        return [m.list_json(expand) for m in models]

    # -- documented facts --------------------------------------------------

    def load_facts(self, path: Path | str | None = None) -> None:
        """Seed every documented mapping (status live), the text-to-speech
        ``assumed_models``, the known unserved repos (no mapping), deleted repos
        (404) and renamed repos (redirects; their targets exist)."""
        facts = _read_facts(str(path or FACTS_PATH))
        pipelines: dict[str, str | None] = {}
        mappings: dict[str, dict[str, ProviderMapping]] = {}

        def note(hub_id: str, provider: str, provider_id: str, service_task: str) -> None:
            # A VLM documented for chat too is an image-text-to-text repo.
            if hub_id not in pipelines or service_task == "image-text-to-text":
                pipelines[hub_id] = service_task
            task = CLIENT_TASK.get(service_task, service_task)
            mappings.setdefault(hub_id, {}).setdefault(provider, ProviderMapping(provider_id, task))

        for task in facts["tasks"].values():
            for ex in task.get("examples", []):
                note(ex["hf_model_id"], ex["provider"], ex["provider_model_id"], ex["service_task"])
            for am in task.get("assumed_models", []):
                note(am["hf_model_id"], am["provider"], am["provider_model_id"], "text-to-speech")
        for ex in facts.get("feature_extraction_examples", []):
            note(ex["hf_model_id"], ex["provider"], ex["provider_model_id"], ex["service_task"])
        for hub_id, pipeline in pipelines.items():
            self._seed(hub_id, pipeline, mappings[hub_id])

        hub = facts["hub"]
        for repo in hub.get("known_unserved_repos", []):
            if repo["id"] not in self.models:
                self._seed(repo["id"], repo.get("pipeline_tag"), {})
        for repo in hub.get("deleted_repos", []):
            self.delete(repo["id"])
        old_tasks = _snapshot_tasks()
        for old, new in hub.get("renamed_repos", {}).items():
            self.rename(old, new)
            if new not in self.models:
                self._seed(new, old_tasks.get(old) or old_tasks.get(new), {})

    def _seed(self, hub_id: str, pipeline: str | None, maps: dict[str, ProviderMapping]) -> None:
        downloads = plausible_downloads(hub_id)
        library = "diffusers" if pipeline in _DIFFUSERS else "transformers" if pipeline else None
        tags = ("text-generation-inference",) if pipeline == "text-generation" else ()
        likes = downloads // 700 + _crc(hub_id) % 50
        self.add(hub_id, pipeline, mappings=maps, downloads=downloads, likes=likes, tags=tags,
                 library_name=library)  # fmt: skip


@lru_cache(maxsize=4)
def _read_facts(path: str) -> dict[str, Any]:
    return json.loads(Path(path).read_text())


@lru_cache(maxsize=1)
def _snapshot_tasks() -> dict[str, str]:
    """Pipeline tags of the renamed repos in the 2023 Hub snapshot (a fact file), by id."""
    rows = (json.loads(line) for line in SNAPSHOT_2023.read_text().splitlines() if line.strip())
    return {r["id"]: r.get("pipeline_tag") or r.get("task") for r in rows}


__all__ = [
    "CLIENT_TASK",
    "FACTS_PATH",
    "HubModel",
    "MappingSpec",
    "ProviderMapping",
    "Registry",
    "plausible_downloads",
]
