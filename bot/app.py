"""The composition root: the one place that builds and wires every part.

Everything with a lifetime (DB engine, HTTP clients, loaded models) is opened
in :func:`open_agent` and closed when its ``async with`` block ends, so tests
and the CLI build the same object graph a deployment runs.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from urllib.parse import urlsplit

from bot.settings import Settings
from core.agent import Agent
from core.catalog import Catalog
from core.config import AgentConfig
from core.errors import ConfigError
from core.experts.remote import RemoteExpert
from core.llm import LLM
from core.routing import ExpertRouter
from core.store.db import Database
from core.store.media import MediaStore
from core.store.repo import Repo

log = logging.getLogger(__name__)


def llm_key(settings: Settings) -> str:
    """The API key to send, or a ConfigError naming the variable to set."""
    key = settings.openai_api_key.get_secret_value() if settings.openai_api_key else None
    if key:
        return key
    if not settings.openai_base_url:
        raise ConfigError(
            "No language model configured: set OPENAI_API_KEY "
            "(or OPENAI_BASE_URL for a local OpenAI-compatible server such as Ollama)."
        )
    return "not-needed"  # local servers (vLLM, Ollama, llama.cpp) ignore the key


def llm_from_settings(settings: Settings) -> LLM:
    key = llm_key(settings)
    return LLM(
        api_key=key,
        base_url=settings.openai_base_url,
        model=settings.llm_model,
        timeout=settings.llm_timeout,
        max_retries=settings.llm_max_retries,
    )


def agent_config(settings: Settings) -> AgentConfig:
    return AgentConfig(
        top_k=settings.top_k,
        selection=settings.model_selection,
        concurrency=settings.max_concurrent_tasks,
        task_timeout=settings.task_timeout,
        max_tasks=settings.max_tasks_per_plan,
        max_attachment_bytes=settings.max_attachment_bytes,
        max_image_pixels=settings.max_image_pixels,
        history_turns=settings.history_turns,
        requests_per_user_per_minute=settings.requests_per_user_per_minute,
    )


def router_from_settings(settings: Settings) -> ExpertRouter:
    token = settings.hf_token.get_secret_value() if settings.hf_token else None
    remote = RemoteExpert(
        token=token, base_url=settings.hf_inference_url, timeout=settings.task_timeout
    )
    local = None
    if settings.inference_mode in ("local", "hybrid"):
        from core.experts.local import LocalExpert

        local = LocalExpert(
            models_dir=settings.local_models_dir,
            max_loaded=settings.local_max_models,
            device=settings.local_device,
            controlnet_base=settings.local_controlnet_base,
            diffusion_steps=settings.local_diffusion_steps,
            depth_model=settings.local_depth_model,
            seg_model=settings.local_seg_model,
        )
    return ExpertRouter(settings.inference_mode, remote=remote, local=local)


@asynccontextmanager
async def open_store(settings: Settings) -> AsyncIterator[tuple[Database, Repo, MediaStore]]:
    """The database (migrated to head) and the media directory."""
    db = Database(settings.database_url)
    try:
        await db.upgrade()
        media = MediaStore(settings.media_dir)
        yield db, Repo(db, media), media
    finally:
        await db.aclose()


@asynccontextmanager
async def open_agent(settings: Settings) -> AsyncIterator[Agent]:
    async with AsyncExitStack() as stack:
        llm = llm_from_settings(settings)
        stack.push_async_callback(llm.aclose)
        catalog = Catalog.load(settings.model_catalog)
        _db, repo, media = await stack.enter_async_context(open_store(settings))
        router = router_from_settings(settings)
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
        log.info(
            "agent ready: llm=%s at %s, inference=%s, selection=%s, store=%s",
            settings.llm_model,
            urlsplit(settings.openai_base_url or "https://api.openai.com").netloc,
            settings.inference_mode,
            settings.model_selection,
            urlsplit(settings.database_url).scheme,
        )
        yield agent
