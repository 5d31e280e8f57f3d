"""Weights of the local backend from the Hugging Face Hub: found in the HF cache,
or downloaded into it on first use, the way ``transformers`` does it.

* **Lookup** (:meth:`HubWeights.cached`) never touches the network: the
  standard cache layout (``models--owner--name/refs/main`` → ``snapshots/<commit>``),
  checked against the tree listing ``snapshot_download`` caches beside it so an
  interrupted download is not taken for a model.
* **Download** (:meth:`HubWeights.fetch`) asks the Hub for the repo's files
  and sizes (``model_info(files_metadata=True)``), picks the files a pipeline
  needs (configs, tokenizer and processor files, and one weight format —
  safetensors when there are any, else PyTorch ``.bin`` — never other
  frameworks' weights, ONNX, fp16 variants or training checkpoints), refuses
  when their total is over ``LOCAL_DOWNLOAD_MAX_GB``, then runs
  ``snapshot_download`` pinned to the commit it measured.  It runs in a daemon
  thread (never on the event loop, and a task timeout does not lose a
  half-done download: the next call finds it), one per model at a time:
  concurrent callers wait for the same future.

Nothing here imports torch.
"""

from __future__ import annotations

import asyncio
import fnmatch
import glob
import json
import logging
import os
import re
import shutil
import threading
import time
import uuid
from collections.abc import Collection, Mapping, Sequence
from concurrent.futures import Future
from pathlib import Path
from typing import Any, Literal

import httpx2
from huggingface_hub import HfApi, constants, hf_hub_download, snapshot_download
from huggingface_hub.errors import (
    CachedRepoTreeNotFoundError,
    GatedRepoError,
    HfHubHTTPError,
    LocalEntryNotFoundError,
    OfflineModeIsEnabled,
    RepositoryNotFoundError,
    RevisionNotFoundError,
)
from huggingface_hub.utils.tqdm import tqdm as hf_tqdm

from core.errors import TaskCode, TaskFailed

log = logging.getLogger(__name__)

MARKERS = ("config.json", "model_index.json")
Where = Literal["on disk", "cached", "will download"]

# Hub ids: ``name`` or ``owner/name`` (no ``--`` or ``..``: those are paths and cache folders)
_REPO_ID = re.compile(r"^[A-Za-z0-9][\w.-]{0,95}(/[A-Za-z0-9][\w.-]{0,95})?$")
# configs, tokenizer and processor files: everything a pipeline reads besides weights
_CONFIG_SUFFIXES = (".json", ".txt", ".model", ".spm", ".jinja", ".tiktoken")
# ``model.safetensors``, ``model-00001-of-00002.safetensors``, ``model.safetensors.index.json``,
# ``diffusion_pytorch_model.fp16.safetensors`` (a variant), ``….safetensors.index.fp16.json``
_WEIGHT = re.compile(
    r"^(?P<stem>.+?)(?:-\d{5}-of-\d{5})?\.(?P<fmt>safetensors|bin)"
    r"(?P<index>\.index(?:\.(?P<ivariant>[\w-]+))?\.json)?$"
)
_NOT_WEIGHTS = ("training_args", "optimizer", "scheduler", "rng_state", "trainer_state")
_FORMATS = ("safetensors", "bin")  # preferred first
_GB = 1e9  # the Hub shows decimal gigabytes
_META_TIMEOUT = 30.0


def is_model_dir(path: Path) -> bool:
    return any((path / marker).is_file() for marker in MARKERS)


def hub_snapshot(cache_dir: Path) -> Path | None:
    """The snapshot a Hugging Face cache folder (``models--owner--name``) points at."""
    ref = cache_dir / "refs" / "main"
    if ref.is_file():
        snap = cache_dir / "snapshots" / ref.read_text(encoding="utf-8").strip()
        if snap.is_dir():
            return snap
    snaps = sorted((cache_dir / "snapshots").glob("*"), key=lambda p: p.stat().st_mtime)
    return snaps[-1] if snaps else None


def is_repo_id(ref: str) -> bool:
    return bool(_REPO_ID.match(ref)) and "--" not in ref and ".." not in ref


def _weight(name: str) -> tuple[str, bool] | None:
    """``(format, is_variant)`` of a weight file or weight index, else None."""
    m = _WEIGHT.match(name)
    if m is None or m["stem"].startswith(_NOT_WEIGHTS):
        return None
    return m["fmt"], "." in m["stem"] or m["ivariant"] is not None


def _folder_files(names: Sequence[str]) -> list[str]:
    """One folder's configs plus its weights in one format (no variants)."""
    configs = [n for n in names if n.endswith(_CONFIG_SUFFIXES) and _weight(n) is None]
    weights = {n: w for n in names if (w := _weight(n)) is not None and not w[1]}
    for fmt in _FORMATS:
        chosen = [n for n, (f, _) in weights.items() if f == fmt]
        if chosen:
            return configs + chosen
    return configs


def diffusers_components(model_index: Mapping[str, Any]) -> list[str]:
    """The component folders a diffusers ``model_index.json`` names (``unet``, ``vae``…)."""
    return [
        key
        for key, value in model_index.items()
        if not key.startswith("_")
        and isinstance(value, list | tuple)
        and len(value) == 2
        and value[0] is not None
    ]


def select_files(
    repo_id: str, files: Collection[str], components: Sequence[str] | None
) -> list[str]:
    """The files of ``repo_id`` a pipeline needs (see module doc).

    ``components`` are a diffusers pipeline's folders (from its
    ``model_index.json``); None for a transformers (or single diffusers model)
    repo, whose files are all at the top level.  Raises :class:`TaskFailed`
    when the repo has nothing the local pipelines can load.
    """
    by_folder: dict[str, list[str]] = {}
    for name in files:
        folder, _, base = name.rpartition("/")
        by_folder.setdefault(folder, []).append(base)
    top = by_folder.get("", [])
    if not any(m in top for m in MARKERS):
        raise TaskFailed(TaskCode.NOT_LOADABLE, retryable=False, model=repo_id)
    if components is None:
        chosen = _folder_files(top)
        chosen += [
            f"additional_chat_templates/{n}"
            for n in by_folder.get("additional_chat_templates", [])
            if n.endswith(".jinja")
        ]
    else:
        chosen = [n for n in top if n.endswith(".json")]
        for comp in components:
            chosen += [f"{comp}/{n}" for n in _folder_files(by_folder.get(comp, []))]
    if not any(_weight(n.rpartition("/")[2]) for n in chosen):
        raise TaskFailed(TaskCode.NO_TORCH_WEIGHTS, retryable=False, model=repo_id)
    return sorted(chosen)


class _Quiet(hf_tqdm):  # type: ignore[misc]
    """No progress bars in a server's logs: one line at the start and end instead."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs["disable"] = True
        super().__init__(*args, **kwargs)  # type: ignore[no-untyped-call]


def _write_ref(storage: Path, commit: str) -> None:
    """Point ``refs/main`` at ``commit`` (atomically), as the library does."""
    ref = storage / "refs" / "main"
    ref.parent.mkdir(parents=True, exist_ok=True)
    tmp = ref.with_name(f"main.{uuid.uuid4().hex[:8]}.tmp")
    tmp.write_text(commit, encoding="utf-8")
    os.replace(tmp, ref)


def _free_bytes(path: Path) -> float:
    """Free space where ``path`` is (or would be created)."""
    for candidate in (path, *path.parents):
        if candidate.exists():
            return float(shutil.disk_usage(candidate).free)
    return float("inf")


class HubWeights:
    """Where a Hub model's weights are in the HF cache, and fetching them there."""

    def __init__(
        self,
        *,
        cache_dir: Path | None = None,
        endpoint: str | None = None,
        token: str | None = None,
        download: bool = False,
        max_gb: float = 20.0,
        allow: Sequence[str] = (),
    ) -> None:
        self._cache_dir = Path(cache_dir).expanduser() if cache_dir else None
        self.endpoint = endpoint.rstrip("/") if endpoint else None
        self._token = token
        self.download = download
        self.max_gb = max_gb
        self.allow = tuple(p for p in allow if p)
        self._guard = threading.Lock()
        self._jobs: dict[str, Future[Path]] = {}
        self._refused: dict[str, TaskFailed] = {}  # non-retryable answers: not asked again
        self._complete: set[Path] = set()
        self.downloads = 0  # snapshot downloads run (for stats and tests)

    @property
    def cache_dir(self) -> Path:
        """The HF cache: the one given, else the library's (``HF_HUB_CACHE``/``HF_HOME``)."""
        return self._cache_dir or Path(constants.HF_HUB_CACHE)

    def _storage(self, repo_id: str) -> Path:
        return self.cache_dir / f"models--{repo_id.replace('/', '--')}"

    # --- the cache (no network) ------------------------------------------------------

    def cached(self, repo_id: str) -> Path | None:
        """The complete snapshot of ``repo_id``'s default branch in the cache, if any."""
        if not is_repo_id(repo_id):
            return None
        storage = self._storage(repo_id)
        ref = storage / "refs" / "main"
        if not ref.is_file():
            return None
        snap = storage / "snapshots" / ref.read_text(encoding="utf-8").strip()
        if not snap.is_dir() or not is_model_dir(snap):
            return None
        if snap in self._complete or self._is_complete(repo_id, snap):
            self._complete.add(snap)
            return snap
        return None

    def _is_complete(self, repo_id: str, snap: Path) -> bool:
        """Whether every file a pipeline needs is in ``snap``, by the cached tree
        listing; without one (another tool downloaded it) the snapshot is trusted."""
        from huggingface_hub import get_cached_repo_tree

        try:
            tree = get_cached_repo_tree(repo_id, revision=snap.name, cache_dir=self.cache_dir)
        except (CachedRepoTreeNotFoundError, OSError, ValueError):
            return True
        components = None
        index = snap / "model_index.json"
        if index.is_file():
            try:
                components = diffusers_components(json.loads(index.read_text(encoding="utf-8")))
            except (OSError, ValueError):
                return False
        try:
            needed = select_files(repo_id, [f.path for f in tree], components)
        except TaskFailed:
            return True  # nothing to compare with: the loader will say what is wrong
        return all((snap / name).is_file() for name in needed)

    # --- may it be downloaded (no network) ------------------------------------------------

    def refusal(self, repo_id: str) -> TaskFailed | None:
        """Why ``repo_id`` cannot be downloaded now, or None when it may be."""
        if not self.download:
            return TaskFailed(TaskCode.DOWNLOADS_OFF)
        if not is_repo_id(repo_id):
            return TaskFailed(TaskCode.NOT_REPO_ID, retryable=False, model=repo_id)
        if constants.is_offline_mode():
            return TaskFailed(TaskCode.OFFLINE)
        if self.allow and not any(
            fnmatch.fnmatchcase(repo_id.lower(), p.lower()) for p in self.allow
        ):
            return TaskFailed(
                TaskCode.NOT_ALLOWED, retryable=False, model=repo_id, choices=tuple(self.allow)
            )
        return self._refused.get(repo_id)

    # --- downloading (in a thread) ------------------------------------------------------

    def _job(self, repo_id: str) -> Future[Path]:
        """The running download of ``repo_id``, started if there is none."""
        with self._guard:
            job = self._jobs.get(repo_id)
            if job is not None:
                return job
            job = Future()
            job.set_running_or_notify_cancel()  # a waiter's cancellation cannot cancel it
            self._jobs[repo_id] = job
        threading.Thread(
            target=self._run_job, args=(repo_id, job), name=f"hub-download {repo_id}", daemon=True
        ).start()
        return job

    def _run_job(self, repo_id: str, job: Future[Path]) -> None:
        try:
            job.set_result(self._download(repo_id))
        except BaseException as exc:
            failure = exc if isinstance(exc, TaskFailed) else self._explain(repo_id, exc)
            if not failure.retryable:
                self._refused[repo_id] = failure
            job.set_exception(failure)
        finally:
            with self._guard:
                self._jobs.pop(repo_id, None)

    async def fetch(self, repo_id: str) -> Path:
        """``repo_id``'s snapshot, downloading it (once, whoever asks) if need be."""
        refused = self.refusal(repo_id)
        if refused is not None:
            raise refused
        return await asyncio.wrap_future(self._job(repo_id))

    def fetch_blocking(self, repo_id: str) -> Path:
        """:meth:`fetch` for code already in a worker thread (a loader's helper models)."""
        refused = self.refusal(repo_id)
        if refused is not None:
            raise refused
        return self._job(repo_id).result()

    def _download(self, repo_id: str) -> Path:
        found = self.cached(repo_id)  # finished between the caller's look and this job
        if found is not None:
            return found
        api = HfApi(endpoint=self.endpoint, token=self._token)
        info = api.model_info(repo_id, files_metadata=True, timeout=_META_TIMEOUT)
        commit = info.sha
        if not commit:
            raise TaskFailed(TaskCode.NO_COMMIT, model=repo_id)
        sizes = {s.rfilename: (s.lfs.size if s.lfs else s.size) or 0 for s in info.siblings or []}
        components = None
        if "model_index.json" in sizes:  # a diffusers pipeline: its index names the folders
            index = hf_hub_download(
                repo_id,
                "model_index.json",
                revision=commit,
                cache_dir=self.cache_dir,
                endpoint=self.endpoint,
                token=self._token,
            )
            components = diffusers_components(json.loads(Path(index).read_text(encoding="utf-8")))
        files = select_files(repo_id, list(sizes), components)
        total = sum(sizes[f] for f in files)
        if total > self.max_gb * _GB:
            raise TaskFailed(
                TaskCode.DOWNLOAD_TOO_LARGE,
                retryable=False,
                model=repo_id,
                size=total,
                max_gb=self.max_gb,
            )
        free = _free_bytes(self.cache_dir)
        if total > free:
            raise TaskFailed(
                TaskCode.DISK_FULL,
                model=repo_id,
                size=total,
                free=int(free),
                path=str(self.cache_dir),
            )
        log.info(
            "local: downloading %s (%d files, %.1f MB) into %s",
            repo_id,
            len(files),
            total / 1e6,
            self.cache_dir,
        )
        started = time.perf_counter()
        folder = snapshot_download(
            repo_id,
            revision=commit,
            allow_patterns=[glob.escape(f) for f in files],
            cache_dir=self.cache_dir,
            endpoint=self.endpoint,
            token=self._token,
            tqdm_class=_Quiet,
        )
        snap = Path(folder)
        missing = [f for f in files if not (snap / f).is_file()]
        if missing:
            raise TaskFailed(
                TaskCode.DOWNLOAD_INCOMPLETE, model=repo_id, count=len(missing), file=missing[0]
            )
        _write_ref(self._storage(repo_id), commit)
        self._complete.add(snap)
        with self._guard:
            self.downloads += 1
        log.info(
            "local: downloaded %s (%.1f MB) in %.1fs",
            repo_id,
            total / 1e6,
            time.perf_counter() - started,
        )
        return snap

    def _explain(self, repo_id: str, exc: BaseException) -> TaskFailed:
        """The Hub client's error as a code whose words say what to do (never the token)."""
        hub = self.endpoint or constants.ENDPOINT
        log.warning("local: download of %s failed: %r", repo_id, exc)
        if isinstance(exc, GatedRepoError):
            return TaskFailed(TaskCode.DOWNLOAD_GATED, retryable=False, model=repo_id)
        if isinstance(exc, RepositoryNotFoundError | RevisionNotFoundError):
            return TaskFailed(
                TaskCode.DOWNLOAD_NOT_FOUND, retryable=False, model=repo_id, endpoint=hub
            )
        if isinstance(exc, OfflineModeIsEnabled):
            return TaskFailed(TaskCode.OFFLINE, model=repo_id)
        if isinstance(exc, HfHubHTTPError):
            status = exc.response.status_code if exc.response is not None else None
            if status in (401, 403):
                return TaskFailed(
                    TaskCode.DOWNLOAD_REFUSED, retryable=False, model=repo_id, status=status
                )
            return TaskFailed(TaskCode.DOWNLOAD_HTTP, model=repo_id, status=status)
        if isinstance(exc, httpx2.TransportError | LocalEntryNotFoundError | ConnectionError):
            return TaskFailed(
                TaskCode.DOWNLOAD_UNREACHABLE, model=repo_id, endpoint=hub, said=str(exc)
            )
        return TaskFailed(TaskCode.DOWNLOAD_FAILED, model=repo_id, said=repr(exc))

    def where(self, repo_id: str) -> Where | None:
        """``"cached"`` or ``"will download"`` for a Hub id (no network), else None."""
        if self.cached(repo_id) is not None:
            return "cached"
        return "will download" if self.refusal(repo_id) is None else None
