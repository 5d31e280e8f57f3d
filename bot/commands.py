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
from typing import TYPE_CHECKING

from bot import heap
from bot.app import (
    discord_config,
    llm_key,
    open_agent,
    open_store,
    router_from_settings,
    slack_config,
)
from bot.health import heartbeat
from bot.lifecycle import Lifecycle
from bot.settings import Settings
from core.catalog import Catalog
from core.errors import ConfigError
from core.routing import ExpertRouter

if TYPE_CHECKING:
    from core.store.media import PruneReport

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
            max_bytes=settings.input.max_attachment_bytes,
        )


async def chat(args: argparse.Namespace, settings: Settings) -> int:
    from adapters import cli

    async with open_agent(settings) as agent:
        return await cli.chat(
            agent, conversation=args.conversation, max_bytes=settings.input.max_attachment_bytes
        )


def _targets(target: str, settings: Settings) -> list[str]:
    if target == "all":
        return ["discord", "slack"]
    if target != "auto":
        return [target]
    found = []
    if settings.discord.bot_token:
        found.append("discord")
    if settings.slack.bot_token:
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
    if "discord" in targets and not settings.discord.bot_token:
        raise ConfigError("Set DISCORD_BOT_TOKEN (or DISCORD_TOKEN) to run the Discord bot.")
    if "slack" in targets and not settings.slack.bot_token:
        raise ConfigError("Set SLACK_BOT_TOKEN (and SLACK_APP_TOKEN or SLACK_SIGNING_SECRET).")
    # The rest of each platform's settings, in one line before anything starts.
    discord_conf = discord_config(settings) if "discord" in targets else None
    slack_conf = slack_config(settings) if "slack" in targets else None
    async with open_agent(settings) as agent:
        agent.warm_up()  # codecs and the first hosted session, before the first request
        heap.settle()  # start-up's objects out of the collector's way (bot/heap.py)

        async def drain() -> None:
            running = agent.begin_shutdown()
            log.info("shutting down: finishing %d running request(s)", running)
            if not await agent.drain(settings.process.shutdown_grace):
                # Models may take minutes: tell each person the bot is restarting and
                # will finish, and release their jobs for the next process to resume.
                stopped = await agent.interrupt()
                log.warning(
                    "shutdown: %d request(s) still running after %.0fs; handed on to the "
                    "next process",
                    stopped,
                    settings.process.shutdown_grace,
                )

        lifecycle.before_stop(drain)
        runners = []
        if discord_conf is not None:
            from adapters.discord import run_discord

            runners.append(run_discord(agent, discord_conf))
        if slack_conf is not None:
            from adapters.slack import run_slack
            from core.store.feedback import FeedbackStore

            # 👍/👎 under answers in Slack's AI-app chat, kept with their turn
            feedback = FeedbackStore(agent.repo.db)
            runners.append(run_slack(agent, slack_conf, feedback=feedback))
        # the container's health check (python -m bot.health) reads its heartbeat
        async with heartbeat(settings.store.data_dir or Path(".")), asyncio.TaskGroup() as tg:
            for r in runners:
                tg.create_task(r)
    return 0


async def db(args: argparse.Namespace, settings: Settings) -> int:
    async with open_store(settings) as (_db, repo, _media):
        if args.action == "prune-media":
            report = await repo.prune_media(older_than=settings.store.prune_min_age)
            for line in prune_summary(
                report, settings.store.media_dir, settings.store.prune_min_age
            ):
                print(line)
            return 0
    print(f"database at {settings.store.database_url.split('@')[-1]} is at the latest revision")
    return 0


def _files(n: int, what: str = "file") -> str:
    return f"{n} {what}{'' if n == 1 else 's'}"


def _age(seconds: float) -> str:
    """``1 hour``, ``90 minutes``, ``45 seconds``: the largest unit that is exact."""
    for unit, size in (("day", 86400), ("hour", 3600), ("minute", 60), ("second", 1)):
        if seconds >= size and seconds % size == 0:
            return _files(int(seconds // size), unit)
    return f"{seconds:g} seconds"


def prune_summary(report: PruneReport, media_dir: Path | None, min_age: float) -> list[str]:
    """What ``db prune-media`` did: removed, kept in use, kept as too young."""
    lines = [
        f"removed {_files(report.removed, 'unused file')} "
        f"({report.freed / 1e6:.1f} MB) from {media_dir}"
    ]
    if report.kept_in_use:
        lines.append(
            f"kept {_files(report.kept_in_use)} that a conversation or an unfinished "
            "request still uses"
        )
    if report.kept_recent:
        lines.append(
            f"kept {_files(report.kept_recent, 'unused file')} "
            f"({report.kept_recent_bytes / 1e6:.1f} MB) younger than {_age(min_age)} "
            "(grace period: a request still running may not have saved them yet; "
            "PRUNE_MIN_AGE sets it)"
        )
    return lines


def _unknown_task(task: str) -> str | None:
    """None for a known task (by name or the paper's alias), else the message."""
    from core.tasks import TASKS, canonical_task

    if canonical_task(task) is not None:
        return None
    return f"unknown task {task!r}; known tasks: {', '.join(sorted(TASKS))}"


async def models(args: argparse.Namespace, settings: Settings) -> int:
    if args.action == "list" and args.task and (problem := _unknown_task(args.task)):
        log.info("models list: %s", problem)
        print(f"error: {problem}", file=sys.stderr)
        return 2
    if args.action == "refresh":
        from core.catalog_refresh import refresh_catalog, write_catalog
        from core.tasks import TASKS

        token = settings.hf.token.get_secret_value() if settings.hf.token else None
        catalog = await refresh_catalog(
            endpoint=settings.hf.endpoint,
            token=token,
            tasks=list(TASKS),
            per_task=args.per_task,
            provider=settings.hf.provider,
        )
        out = Path(
            args.output
            or settings.selection.model_catalog
            or settings.store.data_path / "catalog.jsonl"
        )
        write_catalog(catalog, out)
        n = len(catalog.all())
        print(f"wrote {n} models for {len(catalog.tasks())} tasks to {out}")
        if not settings.selection.model_catalog or Path(settings.selection.model_catalog) != out:
            print(f"use it with MODEL_CATALOG={out}")
        return 0
    from core.tasks import canonical_task

    catalog = Catalog.load(settings.selection.model_catalog)
    router = router_from_settings(settings)
    only = canonical_task(args.task) if args.task else None
    try:
        for a in router.availability(catalog):
            if only and a.task != only:
                continue
            if a.backends:
                shown = [
                    _model_line(catalog, router, a.task, m)
                    for m in a.models[: settings.selection.top_k]
                ]
                print(f"{a.task:32} {'+'.join(a.backends):14} {', '.join(shown)}")
            else:
                print(f"{a.task:32} {'-':14} unavailable: {a.why_not}")
    finally:
        for e in (router.remote, router.local):
            if e is not None:
                await e.aclose()
    return 0


def _model_line(catalog: Catalog, router: ExpertRouter, task: str, model_id: str) -> str:
    """``id`` with where it runs, e.g. ``org/m (fal-ai, replicate; local: cached)``."""
    info = catalog.get(model_id, task)
    if info is None:
        return model_id
    where: list[str] = []
    remote = router.remote
    if remote is not None and router.mode != "local" and remote.can_run(task, info):
        if info.endpoint:
            where.append("own endpoint")
        elif info.provider or info.providers:
            where.append(", ".join([info.provider] if info.provider else list(info.providers)))
    local_where = getattr(router.local, "where", None)
    local = router.local
    if (
        router.mode != "remote"
        and local is not None
        and callable(local_where)
        and local.can_run(task, info)
        and local_where(info)
    ):
        where.append(f"local: {local_where(info)}")
    return f"{model_id} ({'; '.join(where)})" if where else model_id


async def discord(args: argparse.Namespace, settings: Settings) -> int:
    if not settings.discord.bot_token:
        raise ConfigError("Set DISCORD_BOT_TOKEN (or DISCORD_TOKEN) to sync Discord commands.")
    from adapters.discord import sync_commands

    await sync_commands(discord_config(settings))
    return 0
