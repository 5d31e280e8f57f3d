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
  worker thread of its own (not the loop's default executor, which provider
  polls can fill), and picks the first *live* provider (the Hub lists them in
  the user's order) whose client helper serves the task — or the pinned
  provider (a catalog entry's ``provider``, else ``HF_PROVIDER``).
  :meth:`ProviderDirectory.warm` then runs the helper's own mapping
  resolution in a thread, so the async client call that follows only hits
  the client's caches.  Both are done once per model and task: the client
  keeps the Hub's answer for the life of the process, so the route found is
  kept too, and later calls go out without a thread hop.
* :meth:`ProviderDirectory.look_up_ahead` does both for a task the plan
  will run later, in the background, the moment the plan is known
  (:class:`core.experts.base.LooksUpAhead`), so a chain's later steps do
  not pay a Hub round trip after the previous step's model call.  A
  look-up is never made twice at once: a call that comes while the same
  look-up (ahead or not) is under way waits for it.  A look-up ahead
  changes nothing by itself: its errors are dropped (a debug line), no
  model is marked dead for them; the call that needs the answer asks
  again and reports what it finds.
* Models the service answered "not served" / "gone" for (404, 410, an
  unknown repo, no mapping) go on a skip list for the rest of the process
  (:meth:`ProviderDirectory.mark_dead`), with one log line: one dead model
  costs one call, not one per request.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

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
from core.threads import in_hosted_thread

log = logging.getLogger(__name__)
K = TypeVar("K")
T = TypeVar("T")

DEFAULT_ROUTER = "https://router.huggingface.co"
AUTO = "auto"
HF_INFERENCE = "hf-inference"

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
        self._found: dict[str, list[Any]] = {}  # model id -> its mappings, as the Hub gave them
        # the Hub look-ups under way (in a thread), shared by whoever needs the same one
        self._fetching: dict[str, asyncio.Future[list[Any]]] = {}
        self._warming: dict[tuple[str, str, str], asyncio.Future[Any]] = {}

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
        live = _live(task, want, mappings)
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
        await self._hub(model_id, self._warming_of(key))

    async def mappings(self, model_id: str) -> list[Any]:
        """The model's provider mappings from the Hub (cached; in a thread)."""
        return await self._mappings(model_id)

    def start(
        self, task: str, model_id: str, pinned: str | None, providers: tuple[str, ...] = ()
    ) -> None:
        """Start the Hub look-ups :meth:`provider_for` and :meth:`warm` will
        wait for (returns at once).  On hf-inference the client's own
        look-up (the model's pipeline tag) does not need the mapping: when
        the route is likely hf-inference (pinned, or the first provider the
        catalog lists that serves ``task``: the catalog lists them in the
        order the router prefers), both are asked at once, not one after the
        other.  A look-up started here and not needed (the route was another
        provider after all: the person's own order of providers put another
        first) is one Hub request, and its failure is nobody's."""
        want = self.wanted(pinned)
        if (task in CHAT_TASKS and want == AUTO) or (task, model_id, want) in self._routes:
            return
        if model_id not in self._found:
            self._fetching_of(model_id)
        served = [p for p in providers if client_serves(p, task)]
        likely = want if want != AUTO else (served[0] if served else None)
        key = (HF_INFERENCE, client_task(task), model_id)
        if likely == HF_INFERENCE and client_serves(HF_INFERENCE, task) and key not in self._warm:
            self._warming_of(key)

    async def look_up_ahead(
        self, task: str, model_id: str, pinned: str | None, providers: tuple[str, ...] = ()
    ) -> None:
        """What :meth:`provider_for` and :meth:`warm` will ask the Hub for
        ``model_id`` on ``task``, asked now (see the module doc).  Never
        raises: a failure is the call's to find and report."""
        want = self.wanted(pinned)
        if (task in CHAT_TASKS and want == AUTO) or self.is_dead(model_id):
            return
        self.start(task, model_id, pinned, providers)
        try:
            route = self._routes.get((task, model_id, want))
            if route is None:
                found = self._found.get(model_id)
                if found is None:
                    found = await asyncio.shield(self._fetching_of(model_id))
                live = _live(task, want, found)
                if not live:
                    return  # the call says why (and puts the model on the skip list)
                route = Route(live[0].provider, live[0].provider_id)
            key = (route.provider, client_task(task), model_id)
            if key not in self._warm:
                await asyncio.shield(self._warming_of(key))
        except Exception as e:  # the call asks again and reports it
            log.debug("looking %s up ahead for %s failed: %r", model_id, task, e)

    async def _mappings(self, model_id: str) -> list[Any]:
        found = self._found.get(model_id)
        if found is None:
            found = await self._hub(model_id, self._fetching_of(model_id))
        return list(found)

    def _fetching_of(self, model_id: str) -> asyncio.Future[list[Any]]:
        """The model's mapping look-up under way, else a new one (in a thread)."""

        def fetch() -> list[Any]:
            return list(_fetch_inference_provider_mapping(model_id))

        def keep(found: list[Any]) -> None:
            self._found[model_id] = found

        return _shared(self._fetching, model_id, fetch, keep)

    def _warming_of(self, key: tuple[str, str, str]) -> asyncio.Future[Any]:
        """The client helper's own look-up for ``key`` under way, else a new one."""
        provider, task, model_id = key

        def prepare() -> Any:
            helper = hub_providers.get_provider_helper(provider, task, model_id)  # type: ignore[arg-type]
            return helper._prepare_mapping_info(model_id)

        return _shared(self._warming, key, prepare, lambda _: self._warm.add(key))

    async def _hub(self, model_id: str, running: asyncio.Future[Any]) -> Any:
        """What the look-up ``running`` found, its failure as a :class:`TaskFailed`."""
        try:
            # shielded: a caller that stops waiting leaves it to the others
            return await asyncio.shield(running)
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


def _live(task: str, want: str, mappings: list[Any]) -> list[Any]:
    """The mappings a call of ``task`` may name, the best first: live ones
    (else staging ones) of a provider the client serves ``task`` on, and
    the wanted provider's only, unless it is ``auto``."""
    wanted_task = client_task(task)
    usable = [
        m
        for m in mappings
        if m.task == wanted_task
        and m.status != "error"
        and client_serves(m.provider, task)
        and (want == AUTO or m.provider == want)
    ]
    return [m for m in usable if m.status == "live"] or usable


def _shared(
    table: dict[K, asyncio.Future[T]],
    key: K,
    call: Callable[[], T],
    on_success: Callable[[T], None],
) -> asyncio.Future[T]:
    """``call`` run in a thread of :data:`core.threads.HOSTED_THREADS`, once at a time per
    ``key``: the one under way in ``table``, else a new one, listed until it
    ends.  ``on_success`` runs with what it returns, before anyone waiting
    is woken."""
    running = table.get(key)
    if running is not None:
        return running
    running = asyncio.ensure_future(in_hosted_thread(call))
    table[key] = running

    def ended(done: asyncio.Future[T]) -> None:
        if table.get(key) is done:
            del table[key]
        if done.cancelled():
            return
        error = done.exception()  # read, so that nobody waiting is not an error
        if error is None:
            on_success(done.result())

    running.add_done_callback(ended)
    return running
