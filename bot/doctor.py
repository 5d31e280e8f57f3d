"""``python -m bot doctor``: check each configured service and say what to fix.

One line per check (``ok `` or ``BAD``, the check, what was found); a check
with several problems has a line for each.  A service that cannot be reached
is said once, with how much could not be checked because of it, and in
bounded time: the Hub is asked once (``whoami``, with :data:`HUB_TIMEOUT`)
before any model is looked up, and when it cannot be reached, or refuses
``HF_TOKEN``, no model is looked up (each look-up would wait and fail on its
own); the language model gets :data:`LLM_BUDGET` for its whole check.
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
from dataclasses import dataclass
from typing import TextIO

import httpx2

from bot.app import llm_from_settings, open_store, router_from_settings
from bot.settings import Settings
from core.catalog import Catalog
from core.errors import ConfigError, InputRejected, RunFailed
from core.llm import LLM
from core.routing import ExpertRouter

HUB_TIMEOUT = 10.0  # seconds the Hub gets to answer doctor's one question
LLM_BUDGET = 30.0  # seconds for the language model's check, retries included
HUB_HINT = "no network here, or a proxy to name in HTTPS_PROXY? HF_ENDPOINT sets the Hub's address"


@dataclass(slots=True)
class Report:
    """The lines doctor prints, and whether every check passed."""

    out: TextIO
    ok: bool = True

    def line(self, good: bool, what: str, detail: str) -> None:
        self.ok = self.ok and good
        print(f"{'ok ' if good else 'BAD'} {what:10} {detail}", file=self.out, flush=True)


@dataclass(frozen=True, slots=True)
class HubAnswer:
    """What the Hub said to ``GET /api/whoami-v2``: its HTTP status and the
    token's user, or why it could not be asked (``problem``)."""

    status: int | None = None
    user: str | None = None
    problem: str | None = None


async def ask_hub(endpoint: str, token: str | None, seconds: float) -> HubAnswer:
    """One question to the Hub, answered or given up within ``seconds``
    (proxies from the environment, as the Hub client uses them)."""
    url = endpoint.rstrip("/") + "/api/whoami-v2"
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    try:
        async with (
            asyncio.timeout(seconds),
            httpx2.AsyncClient(timeout=seconds, follow_redirects=True) as client,
        ):
            response = await client.get(url, headers=headers)
    except (TimeoutError, httpx2.TimeoutException):
        return HubAnswer(problem=f"did not answer within {seconds:g} s")
    except httpx2.HTTPError as e:  # refused, no such host, a proxy that failed
        return HubAnswer(problem=f"could not be reached ({type(e).__name__})")
    user = None
    if response.status_code == 200:
        with contextlib.suppress(ValueError, AttributeError):
            user = str(response.json().get("name") or "?")
    return HubAnswer(response.status_code, user)


class Hub:
    """The Hub, asked once (when a check needs it) and remembered."""

    def __init__(self, settings: Settings, timeout: float) -> None:
        self.endpoint = settings.hf.endpoint
        self.token = settings.hf.token.get_secret_value() if settings.hf.token else None
        self.timeout = timeout
        self._answer: HubAnswer | None = None

    async def answer(self) -> HubAnswer:
        if self._answer is None:
            self._answer = await ask_hub(self.endpoint, self.token, self.timeout)
        return self._answer

    async def unusable(self) -> tuple[str, str] | None:
        """Why no model can be looked up on the Hub now, and what to do
        (None: they can)."""
        hub = await self.answer()
        if hub.problem is not None:
            return f"the Hub at {self.endpoint} {hub.problem}", HUB_HINT
        if self.token and hub.status in (401, 403):
            return f"the Hub refused HF_TOKEN (HTTP {hub.status})", "make a new token"
        return None


async def _hf_token(settings: Settings, hub: Hub, report: Report) -> None:
    """The token the models (and maybe the controller) run with: who it is."""
    if not hub.token:
        needed = settings.hf.inference_mode != "local" and not settings.hf.inference_url
        report.line(
            not needed,
            "hf token",
            "HF_TOKEN is not set: Inference Providers need it (hf.co/settings/tokens)"
            if needed
            else "not set (not needed here)",
        )
        return
    said = await hub.answer()
    if said.problem is not None:
        report.line(
            False,
            "hf token",
            f"not checked: the Hub at {settings.hf.endpoint} {said.problem}: {HUB_HINT}",
        )
    elif said.status in (401, 403):
        report.line(
            False, "hf token", f"the Hub refused HF_TOKEN (HTTP {said.status}): make a new token"
        )
    elif said.status != 200:
        report.line(False, "hf token", f"the Hub answered HTTP {said.status} (HF_ENDPOINT?)")
    else:
        report.line(True, "hf token", f"valid, user {said.user}")


def hub_lookups(router: ExpertRouter, catalog: Catalog, k: int) -> dict[str, int]:
    """How many models per task :meth:`ExpertRouter.verify` would look up on
    the Hub (at most ``k`` per task; a task-API URL needs no look-up)."""
    remote = router.remote
    if remote is None:
        return {}
    url_for = getattr(remote, "url_for", None)
    found: dict[str, int] = {}
    for a in router.availability(catalog):
        if "remote" not in a.backends:
            continue
        models = [
            m
            for m in router.usable_models(a.task, catalog.models(a.task))[:k]
            if remote.can_run(a.task, m) and not (callable(url_for) and url_for(m))
        ]
        if models:
            found[a.task] = len(models)
    return found


def _count(n: int, what: str) -> str:
    return f"{n} {what}{'' if n == 1 else 's'}"


async def _inference(settings: Settings, catalog: Catalog, hub: Hub, report: Report) -> None:
    """Every task offered to the planner has a model some provider serves live."""
    router = router_from_settings(settings)
    try:
        offered = router.runnable_tasks(catalog)
        lookups = hub_lookups(router, catalog, settings.selection.top_k)
        skipped = await hub.unusable() if lookups else None
        if skipped is not None:
            (why, what_to_do), models = skipped, sum(lookups.values())
            report.line(
                False,
                "inference",
                f"not checked: {why} for {_count(models, 'model')} of "
                f"{_count(len(lookups), 'task')}: {what_to_do}",
            )
            return
        verified = await router.verify(catalog, settings.selection.top_k)
    finally:
        for expert in (router.remote, router.local):
            if expert is not None:
                await expert.aclose()
    problems = {task: why for task, why in verified.items() if why}
    from adapters.chat.error_words import render_task  # a task's failure, worded

    for task, errors in sorted(problems.items()):
        why = "; ".join(render_task(e.code, e.fields) for e in errors)
        report.line(False, "inference", f"{task}: no candidate is served live ({why})")
    if not problems:
        report.line(True, "inference", f"{len(offered)} tasks offered, each with a served model")


async def _llm(settings: Settings, report: Report, budget: float) -> None:
    """The language model, within ``budget`` seconds in all (a server that
    hangs, in a call or a look-up, is one line when it runs out)."""
    try:
        llm = llm_from_settings(settings)
    except ConfigError as e:
        report.line(False, "llm", str(e))
        return
    try:
        async with asyncio.timeout(budget):
            problems, found = await _llm_problems(llm, min(settings.llm.timeout, budget))
    except TimeoutError:
        problems = [
            f"The language model at {llm.host} did not answer within {budget:g} s: "
            "is its server stuck or overloaded?"
        ]
    except (InputRejected, RunFailed) as e:  # a code and fields: the adapters word them
        from adapters.chat.messages import error_text

        problems = [error_text(e)]
    except Exception as e:
        problems = [str(e)]
    finally:
        await llm.aclose()
    for problem in problems:
        report.line(False, "llm", problem)
    if not problems:
        report.line(True, "llm", found)


async def _llm_problems(llm: LLM, seconds: float) -> tuple[list[str], str]:
    """One tiny call on the path a request takes, then the model and the
    context size: what is wrong, and what was found."""
    from core.config import AgentConfig
    from core.llm import BudgetExhausted, estimate_tokens
    from core.plan_schema import planning_token_cap
    from core.planning import CHAT_LOG_BUDGET, build_planning_messages
    from core.tasks import TASKS
    from core.types import Usage

    with llm.stage(seconds):
        # A reasoning model may think past 16 tokens: it still answered.
        with contextlib.suppress(BudgetExhausted):
            tiny = [{"role": "user", "content": "Say ok."}]
            await llm.complete(tiny, usage=Usage(), max_tokens=16)
        model = llm.model or "?"
        problems: list[str] = []
        served = await llm.served_models()  # llama.cpp answers whatever the name
        if served and model.split(":")[0].casefold() not in {
            m.split(":")[0].casefold() for m in served
        }:
            listed = ", ".join(served[:5]) + (", …" if len(served) > 5 else "")
            problems.append(
                f"{llm.host} does not serve LLM_MODEL={model}; it serves {listed}: "
                "set LLM_MODEL to one of them"
            )
        n_ctx = await llm.context_window()
    config = AgentConfig()
    planning = build_planning_messages(request_text="", chat_log=[], files=[], runnable=list(TASKS))
    needed = estimate_tokens(planning) + CHAT_LOG_BUDGET // 4 + config.selection_max_tokens
    if n_ctx is not None and n_ctx < needed:
        cap = config.planning_max_tokens or planning_token_cap(config.max_tasks)
        size = 1 << (needed + cap - 1).bit_length()
        problems.append(
            f"the context of {model} at {llm.host} holds {n_ctx} tokens; planning "
            f"needs about {needed}: restart the server with a larger context "
            f"(llama-server --ctx-size {size}) or use a model with a longer one"
        )
    window = f", context {n_ctx} tokens" if n_ctx else ""
    return problems, f"{model} at {llm.host} answers{window}"


async def run(
    settings: Settings,
    out: TextIO | None = None,
    *,
    hub_timeout: float = HUB_TIMEOUT,
    llm_budget: float = LLM_BUDGET,
) -> int:
    """Check each configured service; 0 when all are fine, else 1."""
    report = Report(out if out is not None else sys.stdout)
    await _llm(settings, report, llm_budget)
    try:
        async with open_store(settings) as (database, _repo, _media):
            report.line(await database.ping(), "database", "migrated and reachable")
    except Exception as e:
        report.line(False, "database", str(e))
    hub = Hub(settings, hub_timeout)
    await _hf_token(settings, hub, report)
    try:
        catalog = Catalog.load(settings.selection.model_catalog)
        report.line(
            True, "catalog", f"{len(catalog.all())} models for {len(catalog.tasks())} tasks"
        )
    except ConfigError as e:
        report.line(False, "catalog", str(e))
    else:
        await _inference(settings, catalog, hub, report)
    report.line(True, "discord", "token set" if settings.discord.bot_token else "not configured")
    report.line(True, "slack", "token set" if settings.slack.bot_token else "not configured")
    return 0 if report.ok else 1
