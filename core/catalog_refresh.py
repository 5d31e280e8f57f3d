"""Refresh the model catalog from the Hub's model list (``models refresh``).

For each task we ask ``HfApi.list_models`` for the most downloaded models with
that pipeline tag.  For the tasks Inference Providers serve
(:data:`core.experts.providers.SERVED_TASKS`) the query asks only for models
some provider serves (``inference_provider``, or the one ``HF_PROVIDER``
names) with their ``inferenceProviderMapping``, and a model is kept only with
its *live* mappings for the task we call it with, of providers the installed
client can speak to: a refreshed catalog offers nothing that then fails with
"not served".  The chat tasks are ``text-generation`` models mapped for
``conversational``; image-to-text and visual/document question answering are
vision-language chat models (``image-text-to-text``).  The other tasks (no
provider serves them) list the most downloaded models, for local inference.

Two tasks are not plain pipeline tags on today's Hub:

* ``conversational`` — the Hub retired that pipeline tag; chat models are
  ``text-generation`` models tagged ``conversational``, so we filter on both.
* ``controlnet-sd`` — ControlNets carry no pipeline tag of their own (some say
  text-to-image, many nothing), so we search ids for "controlnet" among models
  tagged ``diffusers``: that finds lllyasviel/sd-controlnet-* and its peers and
  skips the LoRAs and pipelines that only mention ControlNet in their cards.

``HfApi`` is synchronous, so each query runs in a worker thread, a few at a
time, after one quick probe: ``HfApi`` retries connection errors with
backoff for about 25 s, so a wrong ``HF_ENDPOINT`` or a missing network is
reported at once instead.  Descriptions are generated from the pipeline tag, library and the
meaningful tags (not copied from model cards).
"""

from __future__ import annotations

import asyncio
import os
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import httpx2
from huggingface_hub import HfApi, get_session
from huggingface_hub.errors import HfHubHTTPError, OfflineModeIsEnabled

from core.catalog import Catalog, ModelInfo
from core.errors import BotError, ConfigError, ErrorCode, RunFailed
from core.experts.providers import (
    AUTO,
    SERVED_TASKS,
    VISION_CHAT_TASKS,
    client_serves,
    client_task,
)
from core.tasks import canonical_task

# Extra list_models arguments per task; the default is {"pipeline_tag": task}.
QUERIES: dict[str, dict[str, Any]] = {
    "conversational": {"pipeline_tag": "text-generation", "filter": "conversational"},
    "controlnet-sd": {"search": "controlnet", "filter": "diffusers"},
}
# The same, for the tasks asked of Inference Providers.
SERVED_QUERIES: dict[str, dict[str, Any]] = {
    "conversational": {"pipeline_tag": "text-generation"},
    "text-generation": {"pipeline_tag": "text-generation"},
    "text2text-generation": {"pipeline_tag": "text-generation"},
    **{task: {"pipeline_tag": "image-text-to-text"} for task in VISION_CHAT_TASKS},
}
EXPAND = ["inferenceProviderMapping", "downloads", "likes", "pipeline_tag", "library_name", "tags"]

# Tags that say nothing about what a model does.
_NOISE_PREFIXES = ("license:", "region:", "arxiv:", "dataset:", "base_model:", "doi:", "co2_eq")
_NOISE = {
    "transformers", "pytorch", "tf", "jax", "safetensors", "onnx", "endpoints_compatible",
    "autotrain_compatible", "has_space", "text-generation-inference", "inference_endpoints",
    "deploy:azure", "model-index", "tensorboard", "generated_from_trainer", "custom_code",
}  # fmt: skip
_DESCRIPTION_MAX = 200


def useful_tags(tags: Sequence[str], *, drop: Sequence[str] = ()) -> list[str]:
    """The tags worth showing: no licences, regions, papers, formats or repeats."""
    out: list[str] = []
    for tag in tags:
        if tag in _NOISE or tag in drop or tag in out or tag.startswith(_NOISE_PREFIXES):
            continue
        out.append(tag)
    return out


def describe(task: str, pipeline_tag: str | None, library: str | None, tags: Sequence[str]) -> str:
    """A one-line generated description, e.g. "image-classification model
    (timm); tags: vision, imagenet-1k"."""
    head = f"{pipeline_tag or task} model"
    if library:
        head += f" ({library})"
    shown = useful_tags(tags, drop=(task, pipeline_tag or "", library or ""))[:6]
    text = f"{head}; tags: {', '.join(shown)}" if shown else head
    return text if len(text) <= _DESCRIPTION_MAX else text[: _DESCRIPTION_MAX - 1] + "…"


def live_providers(task: str, info: Any, wanted: str = AUTO) -> tuple[str, ...]:
    """The providers with a *live* mapping of ``info`` for ``task`` that the
    installed client can speak to (and ``wanted`` names, unless ``auto``), in
    the Hub's order."""
    out: list[str] = []
    for m in getattr(info, "inference_provider_mapping", None) or ():
        provider = str(getattr(m, "provider", ""))
        if (
            getattr(m, "status", None) == "live"
            and getattr(m, "task", None) == client_task(task)
            and client_serves(provider, task)
            and (wanted == AUTO or provider == wanted)
            and provider not in out
        ):
            out.append(provider)
    return tuple(out)


def _to_model(task: str, info: Any, providers: tuple[str, ...] = ()) -> ModelInfo:
    tags = [str(t) for t in (info.tags or [])]
    description = describe(task, info.pipeline_tag, info.library_name, tags)
    if providers:
        served = f"; served by {', '.join(providers)}"
        description = (description + served)[:_DESCRIPTION_MAX]
    return ModelInfo(
        id=str(info.id),
        task=task,
        downloads=int(info.downloads or 0),
        likes=int(info.likes or 0),
        description=description,
        tags=tuple(useful_tags(tags)[:8]),
        providers=providers,
    )


def _probe(endpoint: str) -> None:
    """Fail fast when nothing answers at ``endpoint`` (any HTTP answer will do:
    statuses are judged on the real queries, which retry transient ones)."""
    get_session().get(f"{endpoint}/api/models", params={"limit": 1}, timeout=10)


def _hub_error(error: Exception, endpoint: str, task: str) -> BotError:
    """Who is at fault, by exception type and status code."""
    if isinstance(error, OfflineModeIsEnabled):
        return ConfigError("HF_HUB_OFFLINE is set, so the Hub cannot be asked; unset it to refresh")
    if isinstance(error, HfHubHTTPError):
        status = getattr(getattr(error, "response", None), "status_code", None)
        if status in (401, 403):
            return ConfigError(
                f"the Hub at {endpoint} refused the credentials (HTTP {status}); check HF_TOKEN"
            )
        if status == 404:
            return ConfigError(
                f"{endpoint} does not serve the Hub API (HTTP 404 on /api/models); check HF_ENDPOINT"
            )
        return RunFailed(ErrorCode.HUB_HTTP, endpoint=endpoint, status=status, task=task)
    if isinstance(error, httpx2.HTTPError | httpx2.InvalidURL | OSError):
        return RunFailed(ErrorCode.HUB_UNREACHABLE, endpoint=endpoint, cause=type(error).__name__)
    return RunFailed(ErrorCode.HUB_UNREADABLE, endpoint=endpoint, task=task)


async def refresh_catalog(
    *,
    endpoint: str,
    token: str | None,
    tasks: Sequence[str],
    per_task: int = 5,
    concurrency: int = 4,
    keep: Catalog | None = None,
    provider: str = AUTO,
) -> Catalog:
    """The top ``per_task`` models by downloads for each of ``tasks`` (names or
    aliases); for the tasks providers serve, only models served live (by
    ``provider`` unless ``auto``), with their providers.  A task the Hub has no
    model for keeps ``keep``'s models, when given.  Raises ConfigError (bad
    token, endpoint, task names) or RunFailed (the Hub failed or could not be
    reached)."""
    if per_task < 1:
        raise ConfigError(f"per_task must be at least 1, not {per_task}")
    canonical = {t: canonical_task(t) for t in tasks}
    unknown = sorted(t for t, c in canonical.items() if c is None)
    if unknown:
        raise ConfigError(f"unknown task(s) for the catalog: {', '.join(unknown)}")
    wanted = list(dict.fromkeys(c for c in canonical.values() if c))
    endpoint = endpoint.rstrip("/")
    api = HfApi(endpoint=endpoint, token=token or None)
    gate = asyncio.Semaphore(max(1, concurrency))

    def fetch(task: str) -> list[ModelInfo]:
        if task not in SERVED_TASKS:
            query = QUERIES.get(task, {"pipeline_tag": task})
            found = api.list_models(**query, sort="downloads", limit=per_task)
            return [_to_model(task, m) for m in found]
        # Ask for more than we keep: some mappings are for another task, not
        # live, or of a provider the client cannot speak to.
        found = api.list_models(
            **SERVED_QUERIES.get(task, {"pipeline_tag": task}),
            inference_provider="all" if provider == AUTO else provider,  # type: ignore[arg-type]
            expand=EXPAND,  # type: ignore[arg-type]
            sort="downloads",
            limit=per_task * 4,
        )
        out: list[ModelInfo] = []
        for m in found:
            served = live_providers(task, m, provider)
            if served:
                out.append(_to_model(task, m, served))
            if len(out) == per_task:
                break
        return out

    async def one(task: str) -> list[ModelInfo]:
        async with gate:
            try:
                return await asyncio.to_thread(fetch, task)
            except Exception as e:  # classified by type and status in _hub_error
                raise _hub_error(e, endpoint, task) from e

    try:
        await asyncio.to_thread(_probe, endpoint)
    except (httpx2.HTTPError, httpx2.InvalidURL, OSError) as e:
        raise _hub_error(e, endpoint, wanted[0] if wanted else "any") from e
    try:
        async with asyncio.TaskGroup() as group:
            jobs = {task: group.create_task(one(task)) for task in wanted}
    except BaseExceptionGroup as eg:
        first = next((e for e in eg.exceptions if isinstance(e, BotError)), None)
        if first is None:
            raise
        raise first from None

    models: list[ModelInfo] = []
    for task, job in jobs.items():
        found = job.result()
        if not found and keep is not None:
            found = keep.models(task)
        models.extend(found)
    return Catalog(models)


def write_catalog(catalog: Catalog, path: str | Path) -> Path:
    """Write ``catalog`` as JSONL atomically (temp file in the same folder, then
    rename), so a reader never sees half a catalog."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(catalog.to_jsonl())
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return target
