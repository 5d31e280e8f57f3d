"""The model catalog: which Hugging Face models can serve each task.

A catalog is JSONL, one model a line: ``id``, ``task``, ``downloads``,
``likes``, ``description`` and optionally ``providers`` (the Inference
Providers serving it live, in preference order), ``provider`` (pin one of
them), ``endpoint`` (a URL that serves this model instead of the service) and
``local`` (a directory or id the local backend loads).  Extra fields are
ignored, so the 2023 Hub snapshot format loads as is.  Candidates are the
task's models ranked by downloads; ties keep the file's order.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from core.errors import ConfigError
from core.tasks import canonical_task

log = logging.getLogger(__name__)

DEFAULT_CATALOG = "default_catalog.jsonl"


@dataclass(frozen=True, slots=True)
class ModelInfo:
    id: str
    task: str
    downloads: int = 0
    likes: int = 0
    description: str = ""
    endpoint: str | None = None
    local: str | None = None
    tags: tuple[str, ...] = ()
    providers: tuple[str, ...] = ()  # Inference Providers serving it (live), preferred first
    provider: str | None = None  # pinned provider (overrides HF_PROVIDER for this model)

    def to_json(self) -> dict[str, object]:
        out: dict[str, object] = {
            "id": self.id,
            "task": self.task,
            "downloads": self.downloads,
            "likes": self.likes,
            "description": self.description,
        }
        if self.endpoint:
            out["endpoint"] = self.endpoint
        if self.local:
            out["local"] = self.local
        if self.tags:
            out["tags"] = list(self.tags)
        if self.providers:
            out["providers"] = list(self.providers)
        if self.provider:
            out["provider"] = self.provider
        return out


def _parse_line(raw: dict[str, object], where: str) -> ModelInfo | None:
    model_id = raw.get("id")
    task_name = raw.get("task") or raw.get("pipeline_tag")
    if not isinstance(model_id, str) or not isinstance(task_name, str):
        log.warning("catalog: %s lacks an id or task; skipped", where)
        return None
    task = canonical_task(task_name)
    if task is None:
        return None  # a task outside the table (e.g. sentence-similarity)
    desc = raw.get("description") or ""
    tags = raw.get("tags") or []
    meta = raw.get("meta")
    if not tags and isinstance(meta, dict):
        tags = meta.get("tags") or []
    providers = raw.get("providers")
    provider = raw.get("provider")
    return ModelInfo(
        id=model_id,
        task=task,
        downloads=int(raw.get("downloads") or 0),  # type: ignore[call-overload]
        likes=int(raw.get("likes") or 0),  # type: ignore[call-overload]
        description=" ".join(str(desc).split())[:300],
        endpoint=raw.get("endpoint") if isinstance(raw.get("endpoint"), str) else None,  # type: ignore[arg-type]
        local=raw.get("local") if isinstance(raw.get("local"), str) else None,  # type: ignore[arg-type]
        tags=tuple(str(t) for t in tags if isinstance(t, str))[:8]
        if isinstance(tags, list)
        else (),
        providers=tuple(str(p) for p in providers if isinstance(p, str))
        if isinstance(providers, list)
        else (),
        provider=provider if isinstance(provider, str) and provider else None,
    )


class Catalog:
    """Models by task, ranked by downloads (most first)."""

    def __init__(self, models: Iterable[ModelInfo]) -> None:
        self._by_task: dict[str, list[ModelInfo]] = {}
        seen: set[tuple[str, str]] = set()
        for m in models:
            if (m.task, m.id) in seen:
                continue
            seen.add((m.task, m.id))
            self._by_task.setdefault(m.task, []).append(m)
        for lst in self._by_task.values():
            lst.sort(key=lambda m: (-m.downloads, -m.likes))  # stable: ties keep file order

    @classmethod
    def from_jsonl_text(cls, text: str, source: str = "<catalog>") -> Catalog:
        models: list[ModelInfo] = []
        for n, line in enumerate(text.splitlines(), 1):
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            try:
                raw = json.loads(line)
            except json.JSONDecodeError as e:
                raise ConfigError(f"model catalog {source} line {n} is not JSON: {e}") from e
            if isinstance(raw, dict):
                m = _parse_line(raw, f"{source}:{n}")
                if m:
                    models.append(m)
        return cls(models)

    @classmethod
    def load(cls, path: str | Path | None = None) -> Catalog:
        """The catalog at ``path`` (MODEL_CATALOG), or the shipped default."""
        if path:
            p = Path(path)
            if not p.is_file():
                raise ConfigError(f"MODEL_CATALOG={p} does not exist; fix the path or unset it")
            return cls.from_jsonl_text(p.read_text(encoding="utf-8"), str(p))
        text = resources.files("core.data").joinpath(DEFAULT_CATALOG).read_text(encoding="utf-8")
        return cls.from_jsonl_text(text, DEFAULT_CATALOG)

    def tasks(self) -> list[str]:
        return sorted(self._by_task)

    def models(self, task: str) -> list[ModelInfo]:
        return list(self._by_task.get(task, ()))

    def ranked(self, task: str) -> Sequence[ModelInfo]:
        """The task's models, most downloaded first, without a copy (read only)."""
        return self._by_task.get(task, ())

    def candidates(self, task: str, k: int = 5) -> list[ModelInfo]:
        """The top ``k`` models for ``task`` by downloads."""
        return self._by_task.get(task, [])[: max(1, k)]

    def get(self, model_id: str, task: str | None = None) -> ModelInfo | None:
        for t, lst in self._by_task.items():
            if task and t != task:
                continue
            for m in lst:
                if m.id == model_id:
                    return m
        return None

    def all(self) -> list[ModelInfo]:
        return [m for t in sorted(self._by_task) for m in self._by_task[t]]

    def to_jsonl(self) -> str:
        return "".join(json.dumps(m.to_json(), ensure_ascii=False) + "\n" for m in self.all())
