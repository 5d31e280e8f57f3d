"""Inference Providers: where the service is, which provider serves a model,
and which models are known dead.

``huggingface_hub`` does the routing and speaks each provider's protocol
(fal-ai's queue, replicate's predictions, polled video jobs…); this module
only decides *which* provider to name for a call, and keeps the client's
blocking Hub look-ups off the event loop:

* :func:`configure` points the client at the router and the Hub (settings
  ``HF_ROUTER_URL`` and ``HF_ENDPOINT``).  The client reads both from module
  constants (the conversational auto-router and the hf-inference helpers keep
  their own copies of the router's base URL, made at import), so this is set
  once, at start-up, by the composition root.
* :meth:`ProviderDirectory.provider_for` fetches a model's
  ``inferenceProviderMapping`` with the client's own cached look-up, in a
  worker thread, and picks the first *live* provider (the Hub lists them in
  the user's order) whose client helper serves the task — or the pinned
  provider (a catalog entry's ``provider``, else ``HF_PROVIDER``).
  :meth:`ProviderDirectory.warm` then runs the helper's own mapping
  resolution in a thread, so the async client call that follows only hits
  the client's caches.  Both are done once per model and task: the client
  keeps the Hub's answer for the life of the process, so the route found is
  kept too, and later calls go out without a thread hop.
* Models the service answered "not served" / "gone" for (404, 410, an
  unknown repo, no mapping) go on a skip list for the rest of the process
  (:meth:`ProviderDirectory.mark_dead`), with one log line: one dead model
  costs one call, not one per request.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from typing import Any

import httpx2
from huggingface_hub import constants
from huggingface_hub.errors import (
    GatedRepoError,
    HfHubHTTPError,
    RepositoryNotFoundError,
)
from huggingface_hub.inference import _providers as hub_providers
from huggingface_hub.inference._providers._common import _fetch_inference_provider_mapping

from core.errors import TaskCode, TaskFailed

log = logging.getLogger(__name__)

DEFAULT_ROUTER = "https://router.huggingface.co"
AUTO = "auto"

# The client task our task is called with on Inference Providers.  The chat
# tasks and the vision-language ones go through chat completion.
CHAT_TASKS = frozenset({"conversational", "text-generation", "text2text-generation"})
VISION_CHAT_TASKS = frozenset(
    {"image-to-text", "visual-question-answering", "document-question-answering"}
)
PROVIDER_TASKS = frozenset(
    {
        "text-to-image",
        "image-to-image",
        "text-to-video",
        "text-to-speech",
        "automatic-speech-recognition",
        "image-segmentation",
        # the classic tasks hf-inference still serves
        "text-classification",
        "token-classification",
        "summarization",
        "translation",
        "question-answering",
        "image-classification",
        "object-detection",
    }
)
SERVED_TASKS = CHAT_TASKS | VISION_CHAT_TASKS | PROVIDER_TASKS


def client_task(task: str) -> str:
    """The task name the client (and the Hub's provider mapping) uses for ``task``."""
    return "conversational" if task in CHAT_TASKS | VISION_CHAT_TASKS else task


def client_serves(provider: str, task: str) -> bool:
    """Whether the installed client has a helper for ``task`` on ``provider``."""
    return client_task(task) in hub_providers.PROVIDERS.get(provider, {})  # type: ignore[call-overload]


def configure(*, router_url: str | None, hub_url: str | None) -> None:
    """Point ``huggingface_hub`` at the router and the Hub (once, at start-up)."""
    if router_url:
        router = router_url.rstrip("/")
        constants.INFERENCE_PROXY_TEMPLATE = router + "/{provider}"
        hub_providers.CONVERSATIONAL_AUTO_ROUTER.base_url = router
        # the hf-inference helpers compute their base from the template at import
        for helper in hub_providers.PROVIDERS["hf-inference"].values():
            helper.base_url = f"{router}/hf-inference"
    if hub_url:
        hub = hub_url.rstrip("/")
        constants.ENDPOINT = hub
        # downloads build their URLs from this template (also read at import)
        constants.HUGGINGFACE_CO_URL_TEMPLATE = hub + "/{repo_id}/resolve/{revision}/{filename}"


def router_base() -> str:
    """The router's base URL as the client will use it."""
    return constants.INFERENCE_PROXY_TEMPLATE.removesuffix("/{provider}")


@dataclass(frozen=True, slots=True)
class Route:
    """Where one call goes: the provider to name (``auto`` only for chat,
    where the router itself picks) and the provider-side model id."""

    provider: str
    provider_model: str | None = None


class ProviderDirectory:
    """Provider choice and the dead-model list, for one process."""

    def __init__(self, provider: str = AUTO) -> None:
        self.provider = provider or AUTO
        self._dead: dict[str, str] = {}  # model id -> why
        self._routes: dict[tuple[str, str, str], Route] = {}  # (task, model, wanted) -> route
        self._warm: set[tuple[str, str, str]] = set()  # (provider, client task, model) looked up

    # --- the skip list ------------------------------------------------------------
    def is_dead(self, model_id: str) -> bool:
        return model_id in self._dead

    def why_dead(self, model_id: str) -> str | None:
        return self._dead.get(model_id)

    def mark_dead(self, model_id: str, why: str) -> None:
        if model_id not in self._dead:
            self._dead[model_id] = why
            log.warning("model %s skipped from now on: %s", model_id, why)
        self._routes = {k: v for k, v in self._routes.items() if k[1] != model_id}

    # --- choosing a provider ------------------------------------------------------
    def wanted(self, pinned: str | None) -> str:
        return pinned or self.provider

    def may_serve(self, task: str, providers: tuple[str, ...], pinned: str | None) -> bool:
        """Whether a catalog model listing ``providers`` can be offered for
        ``task`` under the current provider setting (no network)."""
        usable = [p for p in providers if client_serves(p, task)]
        want = self.wanted(pinned)
        return bool(usable) and (want == AUTO or want in usable)

    async def provider_for(self, task: str, model_id: str, pinned: str | None) -> Route:
        """The provider to name for ``model_id`` on ``task`` (see module doc)."""
        want = self.wanted(pinned)
        if task in CHAT_TASKS and want == AUTO:
            return Route(AUTO)  # the router picks, in the user's order; no Hub look-up
        known = self._routes.get((task, model_id, want))
        if known is not None:
            return known
        mappings = await self._mappings(model_id)
        wanted_task = client_task(task)
        usable = [
            m
            for m in mappings
            if m.task == wanted_task
            and m.status != "error"
            and client_serves(m.provider, task)
            and (want == AUTO or m.provider == want)
        ]
        live = [m for m in usable if m.status == "live"] or usable
        if not live:
            providers = tuple(sorted({m.provider for m in mappings}))
            if want != AUTO:
                raise TaskFailed(
                    TaskCode.PROVIDER_NOT_SERVING,
                    retryable=True,
                    model=model_id,
                    provider=want,
                    task=task,
                    choices=providers,
                )
            listed = ", ".join(providers) or "none"
            self.mark_dead(model_id, f"no provider serves it for {task} (providers: {listed})")
            raise TaskFailed(TaskCode.NO_PROVIDER, model=model_id, task=task)
        route = Route(live[0].provider, live[0].provider_id)
        self._routes[(task, model_id, want)] = route
        return route

    async def warm(self, task: str, model_id: str, route: Route) -> None:
        """Run the client's own (blocking, cached) look-ups for this call in a
        thread, so the async call that follows finds them cached."""
        key = (route.provider, client_task(task), model_id)
        if route.provider == AUTO or key in self._warm:
            return
        helper = hub_providers.get_provider_helper(route.provider, client_task(task), model_id)  # type: ignore[arg-type]
        await self._hub(model_id, lambda: helper._prepare_mapping_info(model_id))
        self._warm.add(key)

    async def mappings(self, model_id: str) -> list[Any]:
        """The model's provider mappings from the Hub (cached; in a thread)."""
        return await self._mappings(model_id)

    async def _mappings(self, model_id: str) -> list[Any]:
        found = await self._hub(model_id, lambda: _fetch_inference_provider_mapping(model_id))
        return list(found)

    async def _hub(self, model_id: str, call: Any) -> Any:
        try:
            return await asyncio.to_thread(call)
        except RepositoryNotFoundError as e:
            if isinstance(e, GatedRepoError):
                raise TaskFailed(TaskCode.MODEL_GATED, retryable=True, model=model_id) from e
            self.mark_dead(model_id, "the Hub has no such model (deleted or renamed)")
            raise TaskFailed(TaskCode.MODEL_GONE, model=model_id) from e
        except HfHubHTTPError as e:
            status = getattr(getattr(e, "response", None), "status_code", None)
            if status in (401, 403):
                raise TaskFailed(
                    TaskCode.HUB_TOKEN_REFUSED, retryable=False, model=model_id, status=status
                ) from e
            raise TaskFailed(TaskCode.HUB_LOOKUP_HTTP, model=model_id, status=status) from e
        except ValueError as e:  # the client's own "no mapping" / "not supported" errors
            self.mark_dead(model_id, f"not served: {e}")
            raise TaskFailed(TaskCode.NO_PROVIDER, model=model_id) from e
        except (OSError, httpx2.HTTPError) as e:
            cause = type(e).__name__
            raise TaskFailed(TaskCode.HUB_LOOKUP_UNREACHABLE, model=model_id, cause=cause) from e
