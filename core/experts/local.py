"""The local backend: transformers and diffusers pipelines on this machine.

Models load lazily from directories already on disk (``ModelInfo.local`` or
``LOCAL_MODELS_DIR``), never from the network, and stay in an LRU cache of at
most ``max_loaded`` pipelines, because a few image models fill a GPU.  A
per-model lock makes concurrent first calls load once and keeps two calls
from sharing one pipeline at the same time (diffusers schedulers keep
per-call state).  Loading and inference run in a worker thread so the event
loop keeps serving other requests.

torch, transformers and diffusers are the optional ``local`` extra: this
module imports them only inside functions, so the base install can import it
and learn through :meth:`LocalExpert.available` that it cannot run anything.
"""

from __future__ import annotations

import asyncio
import gc
import importlib.util
import logging
import time
from collections import OrderedDict
from pathlib import Path
from typing import Any

from core.catalog import ModelInfo
from core.errors import TaskFailed
from core.experts.local_diffusion import DIFFUSERS_ADAPTERS
from core.experts.local_direct import DIRECT_ADAPTERS
from core.experts.local_tasks import PIPELINE_ADAPTERS, Adapter, LoadContext
from core.results import TaskInputs, TaskResult

log = logging.getLogger(__name__)

DEFAULT_CONTROLNET_BASE = "stable-diffusion-v1-5/stable-diffusion-v1-5"
_MARKERS = ("config.json", "model_index.json")
ADAPTERS: dict[str, Adapter] = {**PIPELINE_ADAPTERS, **DIRECT_ADAPTERS, **DIFFUSERS_ADAPTERS}


def _importable(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False


def _is_model_dir(path: Path) -> bool:
    return any((path / marker).is_file() for marker in _MARKERS)


def _hub_snapshot(cache_dir: Path) -> Path | None:
    """The snapshot a Hugging Face cache folder (``models--owner--name``) points at."""
    ref = cache_dir / "refs" / "main"
    if ref.is_file():
        snap = cache_dir / "snapshots" / ref.read_text(encoding="utf-8").strip()
        if snap.is_dir():
            return snap
    snaps = sorted((cache_dir / "snapshots").glob("*"), key=lambda p: p.stat().st_mtime)
    return snaps[-1] if snaps else None


class LocalExpert:
    """Runs tasks with pipelines loaded from local directories (see module doc)."""

    name = "local"

    def __init__(
        self,
        *,
        models_dir: Path | None,
        max_loaded: int = 2,
        device: str | None = None,
        controlnet_base: str = DEFAULT_CONTROLNET_BASE,
        diffusion_steps: int | None = None,
        depth_model: str | None = None,
        seg_model: str | None = None,
    ) -> None:
        self.models_dir = Path(models_dir).expanduser() if models_dir else None
        self.max_loaded = max(1, max_loaded)
        self.controlnet_base = controlnet_base
        self.diffusion_steps = diffusion_steps
        self.depth_model = depth_model or None  # id or directory, for depth ControlNets
        self.seg_model = seg_model or None  # id or directory, for seg ControlNets
        self._device = device
        self._cache: OrderedDict[tuple[str, str], Any] = OrderedDict()
        self._locks: dict[tuple[str, str], asyncio.Lock] = {}
        self._libs: dict[str, bool] = {}
        self.loads = 0  # how many pipelines were built (for stats and tests)

    # --- what can run -------------------------------------------------------------

    def _has(self, lib: str) -> bool:
        if lib not in self._libs:
            self._libs[lib] = _importable(lib)
        return self._libs[lib]

    def available(self) -> bool:
        """Whether the ``local`` extra (torch and transformers) is installed."""
        return self._has("torch") and self._has("transformers")

    def model_dir(self, ref: str) -> Path | None:
        """The directory holding model ``ref`` (a path, or an ``owner/name`` id
        under ``models_dir``, flat, ``owner--name`` or in a Hub cache layout)."""
        candidates: list[Path] = []
        direct = Path(ref).expanduser()
        if direct.is_absolute() or direct.exists():
            candidates.append(direct)
        if self.models_dir is not None and not direct.is_absolute():
            flat = ref.replace("/", "--")
            candidates += [self.models_dir / ref, self.models_dir / flat]
            snap = _hub_snapshot(self.models_dir / f"models--{flat}")
            if snap is not None:
                candidates.append(snap)
        return next((p for p in candidates if p.is_dir() and _is_model_dir(p)), None)

    def resolve(self, model: ModelInfo) -> Path | None:
        """Where ``model``'s weights are: its ``local`` field first, then its id."""
        for ref in (model.local, model.id):
            if ref:
                found = self.model_dir(ref)
                if found is not None:
                    return found
        return None

    def can_run(self, task: str, model: ModelInfo | None = None) -> bool:
        adapter = ADAPTERS.get(task)
        if adapter is None or not self.available() or not self._has(adapter.library):
            return False
        if model is None:
            return True
        path = self.resolve(model)
        if path is None:
            return False
        if task == "controlnet-sd" and not (path / "model_index.json").is_file():
            return self.model_dir(self.controlnet_base) is not None
        return True

    # --- running --------------------------------------------------------------------

    def device(self) -> str:
        """The torch device: the one given, else CUDA when present, else CPU."""
        if self._device is None:
            import torch

            self._device = "cuda" if torch.cuda.is_available() else "cpu"
        return self._device

    def cached(self) -> list[tuple[str, str]]:
        """The (task, directory) pairs loaded now, least recently used first."""
        return list(self._cache)

    def _missing(self, model: ModelInfo) -> TaskFailed:
        where = self.models_dir if self.models_dir is not None else "(unset)"
        return TaskFailed(
            f"model {model.id} is not available locally under LOCAL_MODELS_DIR={where}"
        )

    async def run(self, task: str, model: ModelInfo, inputs: TaskInputs) -> TaskResult:
        adapter = ADAPTERS.get(task)
        if adapter is None:
            raise TaskFailed(f"local inference cannot run {task}", retryable=False)
        if not self.available() or not self._has(adapter.library):
            raise TaskFailed(
                f"local inference of {task} needs torch, transformers and diffusers: "
                "pip install '.[local]'"
            )
        path = self.resolve(model)
        if path is None:
            raise self._missing(model)
        key = (task, str(path))
        lock = self._locks.setdefault(key, asyncio.Lock())
        try:
            async with lock:
                pipe = await self._get(key, model, path)
                started = time.perf_counter()
                result = await asyncio.to_thread(adapter.run, pipe, inputs)
                log.info(
                    "local %s with %s ran in %.2fs", task, model.id, time.perf_counter() - started
                )
                return result
        except TaskFailed:
            raise
        except Exception as exc:  # a backend's own errors never escape (see base.py)
            log.warning("local %s with %s failed: %r", task, model.id, exc)
            raise TaskFailed(f"local {task} with {model.id} failed: {exc}") from exc

    async def _get(self, key: tuple[str, str], model: ModelInfo, path: Path) -> Any:
        """The cached pipeline for ``key``, loading it (caller holds its lock)."""
        if key in self._cache:
            self._cache.move_to_end(key)
            return self._cache[key]
        ctx = LoadContext(
            device=self.device(),
            resolve=self.model_dir,
            controlnet_base=self.controlnet_base,
            steps=self.diffusion_steps,
            depth_model=self.depth_model,
            seg_model=self.seg_model,
        )
        started = time.perf_counter()
        try:
            pipe = await asyncio.to_thread(ADAPTERS[key[0]].load, path, ctx)
        except TaskFailed:
            raise
        except Exception as exc:
            raise TaskFailed(f"model {model.id} could not be loaded from {path}: {exc}") from exc
        self.loads += 1
        log.info(
            "local: loaded %s for %s in %.2fs", model.id, key[0], time.perf_counter() - started
        )
        self._cache[key] = pipe
        evicted: list[Any] = []
        while len(self._cache) > self.max_loaded:
            old_key = next(iter(self._cache))
            evicted.append(self._cache.pop(old_key))
            log.info("local: evicted %s (%s)", old_key[1], old_key[0])
        if evicted:
            await asyncio.to_thread(self._free, evicted)
        return pipe

    def _free(self, evicted: list[Any]) -> None:
        """Drop the last references and give the memory back (GPU too)."""
        evicted.clear()
        gc.collect()
        if self._device and self._device.startswith("cuda"):
            import torch

            torch.cuda.empty_cache()

    async def aclose(self) -> None:
        evicted = list(self._cache.values())
        self._cache.clear()
        self._locks.clear()
        if evicted:
            await asyncio.to_thread(self._free, evicted)
