"""The local backend: transformers and diffusers pipelines on this machine.

Models load lazily from a directory: one already on disk (``ModelInfo.local``
or under ``LOCAL_MODELS_DIR``), else the model's snapshot in the Hugging Face
cache, else (when ``download`` is on, the id passes ``download_allow`` and its
files fit ``download_max_gb``) a snapshot downloaded into that cache on first
use (:mod:`core.experts.local_hub`).  Every source ends as a directory handed
to the same loaders.  Pipelines stay in an LRU cache of at most
``max_loaded``, because a few image models fill a GPU.  A
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
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from core.catalog import ModelInfo
from core.errors import TaskCode, TaskFailed
from core.experts.local_diffusion import DIFFUSERS_ADAPTERS
from core.experts.local_direct import DIRECT_ADAPTERS
from core.experts.local_hub import HubWeights, Where, hub_snapshot, is_model_dir
from core.experts.local_tasks import PIPELINE_ADAPTERS, Adapter, LoadContext
from core.results import TaskInputs, TaskResult
from core.threads import work

log = logging.getLogger(__name__)

DEFAULT_CONTROLNET_BASE = "stable-diffusion-v1-5/stable-diffusion-v1-5"
ADAPTERS: dict[str, Adapter] = {**PIPELINE_ADAPTERS, **DIRECT_ADAPTERS, **DIFFUSERS_ADAPTERS}


def _importable(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False


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
        download: bool = False,
        download_max_gb: float = 20.0,
        download_allow: Sequence[str] = (),
        hub_endpoint: str | None = None,
        hub_token: str | None = None,
        hub_cache: Path | None = None,
    ) -> None:
        """``download`` and the ``hub_*`` arguments are for weights not on disk:
        the Hub API base (``HF_ENDPOINT``), its token, and the HF cache (None:
        the library's, from ``HF_HUB_CACHE``/``HF_HOME``)."""
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
        self.hub = HubWeights(
            cache_dir=hub_cache,
            endpoint=hub_endpoint,
            token=hub_token,
            download=download,
            max_gb=download_max_gb,
            allow=download_allow,
        )

    # --- what can run -------------------------------------------------------------

    def _has(self, lib: str) -> bool:
        if lib not in self._libs:
            self._libs[lib] = _importable(lib)
        return self._libs[lib]

    def available(self) -> bool:
        """Whether the ``local`` extra (torch and transformers) is installed."""
        return self._has("torch") and self._has("transformers")

    def _on_disk(self, ref: str) -> Path | None:
        """``ref`` as a path, or an ``owner/name`` id under ``models_dir`` (flat,
        ``owner--name`` or in a Hub cache layout)."""
        candidates: list[Path] = []
        direct = Path(ref).expanduser()
        if direct.is_absolute() or direct.exists():
            candidates.append(direct)
        if self.models_dir is not None and not direct.is_absolute():
            flat = ref.replace("/", "--")
            candidates += [self.models_dir / ref, self.models_dir / flat]
            snap = hub_snapshot(self.models_dir / f"models--{flat}")
            if snap is not None:
                candidates.append(snap)
        return next((p for p in candidates if p.is_dir() and is_model_dir(p)), None)

    def model_dir(self, ref: str) -> Path | None:
        """The directory holding model ``ref`` now: on disk (see :meth:`_on_disk`),
        else its snapshot in the Hugging Face cache.  No network."""
        return self._on_disk(ref) or self.hub.cached(ref)

    def resolve(self, model: ModelInfo) -> Path | None:
        """Where ``model``'s weights are now: its ``local`` field first, then its id."""
        for ref in (model.local, model.id):
            if ref:
                found = self.model_dir(ref)
                if found is not None:
                    return found
        return None

    def where(self, model: ModelInfo) -> Where | None:
        """Whether ``model``'s weights are ``"on disk"`` (``local`` or
        ``LOCAL_MODELS_DIR``), ``"cached"`` (the HF cache) or ``"will download"``
        on first use; None when it cannot run locally.  No network."""
        refs = [r for r in (model.local, model.id) if r]
        if any(self._on_disk(r) is not None for r in refs):
            return "on disk"
        if any(self.hub.cached(r) is not None for r in refs):
            return "cached"
        return "will download" if self.hub.refusal(model.id) is None else None

    def _reachable(self, ref: str) -> bool:
        """Whether model ``ref`` is here or may be downloaded (no network)."""
        return self.model_dir(ref) is not None or self.hub.refusal(ref) is None

    def can_run(self, task: str, model: ModelInfo | None = None) -> bool:
        """Whether ``task`` has a local pipeline and ``model``'s weights are here or
        may be downloaded on first use.  No network: it runs on every request."""
        adapter = ADAPTERS.get(task)
        if adapter is None or not self.available() or not self._has(adapter.library):
            return False
        if model is None:
            return True
        path = self.resolve(model)
        if path is None and self.hub.refusal(model.id) is not None:
            return False
        if task == "controlnet-sd" and (path is None or not (path / "model_index.json").is_file()):
            return self._reachable(self.controlnet_base)  # a bare ControlNet needs its base
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

    def _missing(self, model: ModelInfo, why: TaskFailed) -> TaskFailed:
        where = self.models_dir if self.models_dir is not None else "(unset)"
        return TaskFailed(
            TaskCode.LOCAL_NOT_AVAILABLE,
            retryable=why.retryable,
            model=model.id,
            path=str(where),
            cache=str(self.hub.cache_dir),
            inner={"code": str(why.code), "fields": why.fields},
        )

    async def _weights(self, model: ModelInfo) -> Path:
        """``model``'s directory, downloaded into the HF cache first if need be."""
        path = self.resolve(model)
        if path is not None:
            return path
        why = self.hub.refusal(model.id)
        if why is not None:
            raise self._missing(model, why)
        return await self.hub.fetch(model.id)

    def _helper(self, ref: str) -> Path | None:
        """A loader's other model (ControlNet base, depth or seg model), downloaded
        if need be; loaders run in a worker thread, so this may block."""
        found = self.model_dir(ref)
        if found is not None or self.hub.refusal(ref) is not None:
            return found
        return self.hub.fetch_blocking(ref)

    async def download(self, model_id: str) -> Path:
        """Fetch ``model_id`` into the HF cache now (no-op when it is there)."""
        found = self.model_dir(model_id)
        return found if found is not None else await self.hub.fetch(model_id)

    async def run(self, task: str, model: ModelInfo, inputs: TaskInputs) -> TaskResult:
        adapter = ADAPTERS.get(task)
        if adapter is None:
            raise TaskFailed(TaskCode.LOCAL_CANNOT_RUN, retryable=False, task=task)
        if not self.available() or not self._has(adapter.library):
            raise TaskFailed(TaskCode.LOCAL_NEEDS_TORCH, task=task)
        path = await self._weights(model)
        key = (task, str(path))
        lock = self._locks.setdefault(key, asyncio.Lock())
        try:
            async with lock:
                pipe = await self._get(key, model, path)
                started = time.perf_counter()
                result = await work(adapter.run, pipe, inputs)
                log.info(
                    "local %s with %s ran in %.2fs", task, model.id, time.perf_counter() - started
                )
                return result
        except TaskFailed:
            raise
        except Exception as exc:  # a backend's own errors never escape (see base.py)
            log.warning("local %s with %s failed: %r", task, model.id, exc)
            raise TaskFailed(
                TaskCode.LOCAL_FAILED, task=task, model=model.id, said=str(exc)
            ) from exc

    async def _get(self, key: tuple[str, str], model: ModelInfo, path: Path) -> Any:
        """The cached pipeline for ``key``, loading it (caller holds its lock)."""
        if key in self._cache:
            self._cache.move_to_end(key)
            return self._cache[key]
        ctx = LoadContext(
            device=self.device(),
            resolve=self._helper,
            controlnet_base=self.controlnet_base,
            steps=self.diffusion_steps,
            depth_model=self.depth_model,
            seg_model=self.seg_model,
        )
        started = time.perf_counter()
        try:
            pipe = await work(ADAPTERS[key[0]].load, path, ctx)
        except TaskFailed:
            raise
        except Exception as exc:
            raise TaskFailed(
                TaskCode.LOAD_FAILED, model=model.id, path=str(path), said=str(exc)
            ) from exc
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
            await work(self._free, evicted)
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
            await work(self._free, evicted)
