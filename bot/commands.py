"""What each ``python -m bot`` command does, wired from settings.

Platform adapters are imported only by the command that runs them, so the
CLI works without touching Discord or Slack code paths.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys
from pathlib import Path

from bot.app import llm_key, open_agent, open_store, router_from_settings
from bot.lifecycle import Lifecycle
from bot.settings import Settings
from core.catalog import Catalog
from core.errors import ConfigError

log = logging.getLogger("bot")


async def ask(args: argparse.Namespace, settings: Settings) -> int:
    from adapters import cli

    async with open_agent(settings) as agent:
        return await cli.ask(
            agent,
            args.text,
            files=args.file,
            conversation=args.conversation,
            as_json=args.json,
            max_bytes=settings.max_attachment_bytes,
        )


async def chat(args: argparse.Namespace, settings: Settings) -> int:
    from adapters import cli

    async with open_agent(settings) as agent:
        return await cli.chat(
            agent, conversation=args.conversation, max_bytes=settings.max_attachment_bytes
        )


def _targets(target: str, settings: Settings) -> list[str]:
    if target == "all":
        return ["discord", "slack"]
    if target != "auto":
        return [target]
    found = []
    if settings.discord_bot_token:
        found.append("discord")
    if settings.slack_bot_token:
        found.append("slack")
    return found or ["cli"]


async def run(args: argparse.Namespace, settings: Settings, lifecycle: Lifecycle) -> int:
    llm_key(settings)  # fail first, in one line, when no LLM is configured
    targets = _targets(args.target, settings)
    if targets == ["cli"]:
        if args.target == "auto":
            print(
                "No DISCORD_BOT_TOKEN or SLACK_BOT_TOKEN is set: starting the terminal chat.",
                file=sys.stderr,
            )
        return await chat(argparse.Namespace(conversation="default"), settings)
    if "discord" in targets and not settings.discord_bot_token:
        raise ConfigError("Set DISCORD_BOT_TOKEN (or DISCORD_TOKEN) to run the Discord bot.")
    if "slack" in targets and not settings.slack_bot_token:
        raise ConfigError("Set SLACK_BOT_TOKEN (and SLACK_APP_TOKEN or SLACK_SIGNING_SECRET).")
    async with open_agent(settings) as agent:

        async def drain() -> None:
            running = agent.begin_shutdown()
            log.info("shutting down: finishing %d running request(s)", running)
            if not await agent.drain(settings.shutdown_grace):
                log.warning("shutdown: requests still running after %.0fs", settings.shutdown_grace)

        lifecycle.before_stop(drain)
        runners = []
        if "discord" in targets:
            from adapters.discord import run_discord

            runners.append(run_discord(agent, settings))
        if "slack" in targets:
            from adapters.slack import run_slack

            runners.append(run_slack(agent, settings))
        async with asyncio.TaskGroup() as tg:
            for r in runners:
                tg.create_task(r)
    return 0


async def db(args: argparse.Namespace, settings: Settings) -> int:
    async with open_store(settings) as (_db, repo, _media):
        if args.action == "prune-media":
            removed, freed = await repo.prune_media()
            print(
                f"removed {removed} unused files ({freed / 1e6:.1f} MB) from {settings.media_dir}"
            )
            return 0
    print(f"database at {settings.database_url.split('@')[-1]} is at the latest revision")
    return 0


async def models(args: argparse.Namespace, settings: Settings) -> int:
    if args.action == "refresh":
        from core.catalog_refresh import refresh_catalog, write_catalog
        from core.tasks import TASKS

        token = settings.hf_token.get_secret_value() if settings.hf_token else None
        catalog = await refresh_catalog(
            endpoint=settings.hf_endpoint, token=token, tasks=list(TASKS), per_task=args.per_task
        )
        out = Path(args.output or settings.model_catalog or "data/catalog.jsonl")
        write_catalog(catalog, out)
        n = len(catalog.all())
        print(f"wrote {n} models for {len(catalog.tasks())} tasks to {out}")
        if not settings.model_catalog or Path(settings.model_catalog) != out:
            print(f"use it with MODEL_CATALOG={out}")
        return 0
    catalog = Catalog.load(settings.model_catalog)
    router = router_from_settings(settings)
    try:
        for a in router.availability(catalog):
            if args.task and a.task != args.task:
                continue
            if a.backends:
                print(
                    f"{a.task:32} {'+'.join(a.backends):14} {', '.join(a.models[: settings.top_k])}"
                )
            else:
                print(f"{a.task:32} {'-':14} unavailable: {a.why_not}")
    finally:
        for e in (router.remote, router.local):
            if e is not None:
                await e.aclose()
    return 0


async def discord(args: argparse.Namespace, settings: Settings) -> int:
    if not settings.discord_bot_token:
        raise ConfigError("Set DISCORD_BOT_TOKEN (or DISCORD_TOKEN) to sync Discord commands.")
    from adapters.discord import sync_commands

    await sync_commands(settings)
    return 0


async def doctor(args: argparse.Namespace, settings: Settings) -> int:
    """Check each configured service and say what to fix."""
    ok = True

    def line(good: bool, what: str, detail: str) -> None:
        nonlocal ok
        ok = ok and good
        print(f"{'ok ' if good else 'BAD'} {what:10} {detail}")

    try:
        from bot.app import llm_from_settings

        llm = llm_from_settings(settings)
        from core.types import Usage

        try:
            await llm.complete(
                [{"role": "user", "content": "Say ok."}], usage=Usage(), max_tokens=5
            )
            line(True, "llm", f"{settings.llm_model} answers")
        except Exception as e:
            line(False, "llm", str(e))
        finally:
            await llm.aclose()
    except ConfigError as e:
        line(False, "llm", str(e))
    try:
        async with open_store(settings) as (database, _repo, _media):
            line(await database.ping(), "database", "migrated and reachable")
    except Exception as e:
        line(False, "database", str(e))
    try:
        catalog = Catalog.load(settings.model_catalog)
        line(True, "catalog", f"{len(catalog.all())} models for {len(catalog.tasks())} tasks")
    except ConfigError as e:
        line(False, "catalog", str(e))
    line(True, "discord", "token set" if settings.discord_bot_token else "not configured")
    line(True, "slack", "token set" if settings.slack_bot_token else "not configured")
    return 0 if ok else 1
