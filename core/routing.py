"""Which backend serves a task: remote, local or both (JARVIS's inference_mode).

* ``remote`` – hosted inference only.
* ``local`` – local pipelines only: weights on disk, in the HF cache, or
  downloaded on first use (``LOCAL_DOWNLOAD``).
* ``hybrid`` – local when the chosen model's weights are already here (on
  disk or cached), remote otherwise (a model that would have to be downloaded
  goes remote first, with local as the fallback); when one side fails the
  other is tried.

The planner is shown only the tasks this router can serve, so the LLM never
plans work the deployment cannot do.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Literal

from core.catalog import Catalog, ModelInfo
from core.experts.base import Expert
from core.tasks import TASKS, canonical_task
from core.types import ModelChoice, TaskError

Mode = Literal["remote", "local", "hybrid"]


@dataclass(frozen=True, slots=True)
class TaskAvailability:
    task: str
    backends: tuple[str, ...]
    models: tuple[str, ...]
    why_not: str | None = None


class ExpertRouter:
    def __init__(self, mode: Mode, *, remote: Expert | None, local: Expert | None) -> None:
        self.mode = mode
        self.remote = remote
        self.local = local

    def backends_for(self, task: str, model: ModelInfo) -> list[Expert]:
        """Backends to try for ``model``, in order (the second is the fallback)."""
        remote_ok = (
            self.remote is not None
            and self.mode in ("remote", "hybrid")
            and self.remote.can_run(task, model)
        )
        local_ok = (
            self.local is not None
            and self.mode in ("local", "hybrid")
            and self.local.can_run(task, model)
        )
        order: list[Expert] = []
        if local_ok and self.local is not None:
            order.append(self.local)
        if remote_ok and self.remote is not None:
            if order and not self._weights_here(model):
                order.insert(0, self.remote)  # don't download what the service runs
            else:
                order.append(self.remote)
        return order

    def _weights_here(self, model: ModelInfo) -> bool:
        where = getattr(self.local, "where", None)
        return not callable(where) or where(model) in ("on disk", "cached")

    def usable_models(self, task: str, models: list[ModelInfo]) -> list[ModelInfo]:
        return [m for m in models if self.backends_for(task, m)]

    def availability(self, catalog: Catalog) -> list[TaskAvailability]:
        """Every task of the table with what will serve it, or why nothing can."""
        out: list[TaskAvailability] = []
        for task in TASKS:
            models = catalog.models(task)
            if not models:
                out.append(TaskAvailability(task, (), (), "no model in the catalog"))
                continue
            usable = self.usable_models(task, models)
            if not usable:
                out.append(TaskAvailability(task, (), (), self._why_not(task)))
                continue
            names = sorted({b.name for m in usable for b in self.backends_for(task, m)})
            out.append(TaskAvailability(task, tuple(names), tuple(m.id for m in usable)))
        return out

    def choices(self, catalog: Catalog, task: str | None, k: int) -> dict[str, list[ModelChoice]]:
        """The top ``k`` candidates per task (one task when named, by name or
        alias), each with the backends that would run it."""
        names = [canonical_task(task)] if task else catalog.tasks()
        return {
            name: [
                ModelChoice(
                    m.id,
                    m.task,
                    m.downloads,
                    m.description,
                    ",".join(b.name for b in self.backends_for(name, m)) or None,
                )
                for m in catalog.candidates(name, k)
            ]
            for name in names
            if name
        }

    async def verify(self, catalog: Catalog, k: int) -> dict[str, tuple[TaskError, ...]]:
        """For each task offered with the hosted backend: () when one of its
        top ``k`` candidates is served live right now, else why none is, one
        error a candidate (asks the Hub, runs no model).  Tasks served only
        locally are left out."""
        check = getattr(self.remote, "check", None)
        if not callable(check):
            return {}
        gate = asyncio.Semaphore(8)

        async def one(task: str) -> tuple[TaskError, ...]:
            why: list[TaskError] = []
            for m in self.usable_models(task, catalog.models(task))[:k]:
                if self.remote is None or not self.remote.can_run(task, m):
                    continue
                async with gate:
                    problem = await check(task, m)
                if problem is None:
                    return ()
                why.append(problem)
            return tuple(why)

        tasks = [a.task for a in self.availability(catalog) if "remote" in a.backends]
        found = await asyncio.gather(*(one(t) for t in tasks))
        return dict(zip(tasks, found, strict=True))

    def runnable_tasks(self, catalog: Catalog) -> list[str]:
        """The tasks of the table some catalog model can run now (what the
        planner is offered).  It runs on every request, so it stops at each
        task's first usable model instead of building :meth:`availability`;
        the answer is the same, and fresh (a model put on the skip list, or
        weights that arrived, count at once)."""
        return [
            task for task in TASKS if any(self.backends_for(task, m) for m in catalog.ranked(task))
        ]

    def _why_not(self, task: str) -> str:
        reasons: list[str] = []
        if self.mode in ("remote", "hybrid"):
            why_remote = getattr(self.remote, "why_not", None)
            if self.remote is None:
                reasons.append("hosted inference is off")
            elif callable(why_remote):
                reasons.append(str(why_remote(task)))
            elif not self.remote.can_run(task):
                reasons.append("the hosted inference service does not serve this task")
            else:
                reasons.append("no catalog model is served remotely")
        if self.mode in ("local", "hybrid"):
            local_available = getattr(self.local, "available", None)
            if self.local is None or (callable(local_available) and not local_available()):
                reasons.append("local inference is not installed (pip install '.[local]')")
            elif not self.local.can_run(task):
                reasons.append("no local pipeline for this task")
            else:
                reasons.append(
                    "no catalog model has weights here (LOCAL_MODELS_DIR, the HF cache) "
                    "and downloads are off or refused (LOCAL_DOWNLOAD, LOCAL_DOWNLOAD_ALLOW)"
                )
        return "; ".join(reasons) or f"INFERENCE_MODE={self.mode} cannot serve it"
