"""The composition root: the one place that builds and wires every part.

Everything with a lifetime (DB engine, HTTP clients, loaded models) is opened
in :func:`open_agent` and closed when its ``async with`` block ends, so tests
and the CLI build the same object graph a deployment runs.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from pydantic import SecretStr

from bot.settings import Settings
from core.agent import Agent
from core.catalog import Catalog
from core.config import AgentConfig
from core.errors import ConfigError
from core.experts.providers import configure as configure_providers
from core.experts.remote import RemoteExpert
from core.http_client import Connections
from core.llm import DEFAULT_HF_MODEL, DEFAULT_OPENAI_MODEL, LLM
from core.routing import ExpertRouter
from core.store.db import Database
from core.store.media import MediaStore
from core.store.repo import Repo
from core.tasks import TaskTimeouts
from core.telemetry import serving
from core.threads import wait_in_many_threads

if TYPE_CHECKING:  # imported where used: only the command that runs a platform loads it
    from adapters.discord.config import DiscordConfig
    from adapters.slack.config import SlackConfig

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class LLMEndpoint:
    """Where the controller runs, chosen from the settings by :func:`llm_endpoint`."""

    api_key: str  # "" for a local server (the client sends a placeholder)
    base_url: str | None  # None: OpenAI
    model: str | None  # None: the first model the server lists
    hf_router: bool = False


def llm_endpoint(settings: Settings) -> LLMEndpoint:
    """OPENAI_API_KEY (OpenAI, or OPENAI_BASE_URL) > OPENAI_BASE_URL alone (a
    local server) > HF_TOKEN alone (the Hugging Face router); LLM_MODEL
    overrides the default model of each.  ConfigError when none is set."""
    openai_key = (
        settings.llm.openai_api_key.get_secret_value() if settings.llm.openai_api_key else ""
    )
    if openai_key:
        model = settings.llm.model or DEFAULT_OPENAI_MODEL
        return LLMEndpoint(openai_key, settings.llm.openai_base_url, model)
    if settings.llm.openai_base_url:
        return LLMEndpoint("", settings.llm.openai_base_url, settings.llm.model)
    hf_token = settings.hf.token.get_secret_value() if settings.hf.token else ""
    if hf_token:
        base = f"{settings.hf.router_url.rstrip('/')}/v1"
        return LLMEndpoint(hf_token, base, settings.llm.model or DEFAULT_HF_MODEL, hf_router=True)
    raise ConfigError(
        "No language model configured: set HF_TOKEN (a Hugging Face token is enough) or "
        "OPENAI_API_KEY (or OPENAI_BASE_URL for a local OpenAI-compatible server such as "
        "llama.cpp or Ollama)."
    )


def llm_key(settings: Settings) -> str:
    """The API key to send, or a ConfigError naming the variables to set."""
    return llm_endpoint(settings).api_key or "not-needed"  # local servers ignore the key


def llm_from_settings(settings: Settings, pool: Connections | None = None) -> LLM:
    endpoint = llm_endpoint(settings)
    return LLM(
        api_key=endpoint.api_key,
        base_url=endpoint.base_url,
        model=endpoint.model,
        hf_router=endpoint.hf_router,
        pool=pool,
        **settings.into("llm"),  # LLM_TIMEOUT, LLM_MAX_RETRIES, …
    )


def agent_config(settings: Settings) -> AgentConfig:
    """The settings marked ``Into("agent")``; the rest are AgentConfig's defaults."""
    return AgentConfig(task_timeouts=task_timeouts(settings), **settings.into("agent"))


def task_timeouts(settings: Settings) -> TaskTimeouts:
    return TaskTimeouts(**settings.into("timeouts"))


def router_from_settings(settings: Settings, pool: Connections | None = None) -> ExpertRouter:
    token = settings.hf.token.get_secret_value() if settings.hf.token else None
    # huggingface_hub reads the router and Hub addresses from module constants
    configure_providers(router_url=settings.hf.router_url, hub_url=settings.hf.endpoint)
    remote = RemoteExpert(
        token=token,
        base_url=settings.hf.inference_url,
        provider=settings.hf.provider,
        timeouts=task_timeouts(settings),
        pool=pool,
    )
    local = None
    if settings.hf.inference_mode in ("local", "hybrid"):
        from core.experts.local import LocalExpert

        local = LocalExpert(
            hub_endpoint=settings.hf.endpoint,
            hub_token=token,
            **settings.into("local"),  # the LOCAL_* settings
        )
    return ExpertRouter(settings.hf.inference_mode, remote=remote, local=local)


def discord_config(settings: Settings) -> DiscordConfig:
    """The Discord adapter's config from ``settings.discord`` (adapters
    never read the bot's settings themselves)."""
    from adapters.discord.access import AccessPolicy
    from adapters.discord.config import DiscordConfig

    token = settings.discord.bot_token
    return DiscordConfig(
        token=token.get_secret_value() if token is not None else None,
        access=AccessPolicy(**settings.into("access")),
        **settings.into("discord"),
    )


def slack_config(settings: Settings) -> SlackConfig:
    """The Slack adapter's config from ``settings.slack``; a
    :class:`ConfigError` saying what to set when a token is missing."""
    from adapters.slack.config import SlackConfig

    token = _secret(settings.slack.bot_token)
    if not token:
        raise ConfigError(
            "SLACK_BOT_TOKEN is not set: create the app from "
            "adapters/slack_manifest.yaml, install it and copy the xoxb- token."
        )
    app_token = _secret(settings.slack.app_token)
    secret = _secret(settings.slack.signing_secret)
    if not app_token and not secret:
        raise ConfigError(
            "Set SLACK_APP_TOKEN (xapp-…, Socket Mode) or SLACK_SIGNING_SECRET "
            "(HTTP mode behind a load balancer) to receive Slack events."
        )
    return SlackConfig(
        bot_token=token, signing_secret=secret, app_token=app_token, **settings.into("slack")
    )


def _secret(value: SecretStr | None) -> str | None:
    """A secret setting as text; empty (or blank) means unset."""
    return (value.get_secret_value().strip() or None) if value is not None else None


@asynccontextmanager
async def open_store(settings: Settings) -> AsyncIterator[tuple[Database, Repo, MediaStore]]:
    """The database (migrated to head) and the media directory."""
    log.info("data directory %s (%s)", settings.store.data_dir, settings.store.data_dir_origin)
    db = Database(
        settings.store.database_url,
        pool_size=settings.store.database_pool_size,
        pool_timeout=settings.store.database_pool_timeout,
    )
    try:
        await db.ensure_schema()  # one query when already at head
        media = MediaStore(settings.store.media_path)
        yield db, Repo(db, media), media
    finally:
        await db.aclose()


@asynccontextmanager
async def open_agent(settings: Settings) -> AsyncIterator[Agent]:
    # The libraries' blocking waits (the Hub client polls a provider's queue
    # in the loop's default executor for a whole generation) get threads
    # sized for waiting; the bot's own work has its own (core.threads).
    wait_in_many_threads(asyncio.get_running_loop())
    async with AsyncExitStack() as stack:
        # /metrics when METRICS_PORT is set; spans when OTEL_EXPORTER_OTLP_ENDPOINT is
        stack.enter_context(
            serving(
                metrics_port=settings.process.metrics_port,
                metrics_host=settings.process.metrics_host,
                otlp_endpoint=settings.process.otel_exporter_otlp_endpoint,
            )
        )
        # One pool of connections for the LLM's calls and the models': with
        # only HF_TOKEN both go to the router (closed last, after both clients).
        pool = Connections()
        stack.push_async_callback(pool.aclose)
        llm = llm_from_settings(settings, pool)
        stack.push_async_callback(llm.aclose)
        catalog = Catalog.load(settings.selection.model_catalog)
        _db, repo, media = await stack.enter_async_context(open_store(settings))
        router = router_from_settings(settings, pool)
        for expert in (router.remote, router.local):
            if expert is not None:
                stack.push_async_callback(expert.aclose)
        agent = Agent(
            llm=llm,
            catalog=catalog,
            router=router,
            repo=repo,
            media=media,
            config=agent_config(settings),
        )
        stack.push_async_callback(agent.aclose)  # release the jobs this process holds
        await llm.prepare()  # a local server without LLM_MODEL: ask it which model it serves
        log.info(
            "agent ready: llm=%s at %s, inference=%s, selection=%s, store=%s",
            llm.model or "(the first model the server lists)",
            llm.host,
            settings.hf.inference_mode,
            settings.selection.model_selection,
            urlsplit(settings.store.database_url).scheme,
        )
        yield agent
