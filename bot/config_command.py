"""``python -m bot config show|set|unset``: per-server settings at the terminal.

Whoever runs the terminal is the admin.  ``show`` without a server lists
every server with settings; with one, every key with its value or what it
inherits from the deployment.  ``set`` validates (tasks against the task
table, a pinned model against the model catalog) and says what is wrong.
Only the standard library is imported at start-up; the core when it runs.
"""

from __future__ import annotations

import argparse
import getpass
import logging
import sys
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from bot.settings import Settings
    from core.server_settings import ServerSettings, SettingError

log = logging.getLogger("bot.config")

SERVER_HELP = "PLATFORM:ID, e.g. discord:123456789012345678, slack:T0123ABCD, cli:local"


def add_parser(sub: Any) -> None:
    """The ``config`` subcommand on ``python -m bot``'s subparsers."""
    p = sub.add_parser(
        "config",
        help="show or change a server's settings (LLM model, tasks, pinned models, quotas, …)",
        description="Per-server settings, kept in the database; unset keys inherit the "
        "deployment's settings.",
    )
    actions = p.add_subparsers(dest="action", required=True, metavar="ACTION")
    show = actions.add_parser("show", help="a server's settings, or every server with some")
    show.add_argument("server", nargs="?", metavar="SERVER", help=SERVER_HELP)
    put = actions.add_parser("set", help="set one key")
    put.add_argument("server", metavar="SERVER", help=SERVER_HELP)
    put.add_argument("key", metavar="KEY")
    put.add_argument("value", nargs="+", metavar="VALUE")
    unset = actions.add_parser("unset", help="back to the deployment's setting")
    unset.add_argument("server", metavar="SERVER", help=SERVER_HELP)
    unset.add_argument("key", metavar="KEY")


async def run(args: argparse.Namespace, settings: Settings) -> int:
    from bot.app import open_store
    from core.catalog import Catalog
    from core.server_settings import ServerKey, ServerSettingsService, SettingError
    from core.store.server_settings import ServerSettingsStore

    try:
        server = ServerKey.parse(args.server) if args.server else None
    except SettingError as e:
        return _refused(e)
    catalog = Catalog.load(settings.selection.model_catalog) if args.action == "set" else None
    by = f"cli:{_operator()}"
    async with open_store(settings) as (db, _repo, _media):
        service = ServerSettingsService(ServerSettingsStore(db), catalog=catalog)
        try:
            if args.action == "set":
                assert server is not None
                got = await service.set(server, args.key, " ".join(args.value), by=by)
            elif args.action == "unset":
                assert server is not None
                got = await service.unset(server, args.key, by=by)
            elif server is None:
                listed = await service.listed()
                if not listed:
                    print("no server has settings of its own; every server uses the deployment's")
                for key, s in listed:
                    print(f"{key}: {_summary(s)}")
                return 0
            else:
                got = await service.get(server)
        except SettingError as e:
            return _refused(e)
    print(f"settings of {server}:")
    for line in describe(got, settings):
        print(f"  {line}")
    return 0


def _refused(e: SettingError) -> int:
    from adapters.chat.messages import error_text

    log.info("config refused: %s", e)
    print(f"error: {error_text(e)}", file=sys.stderr)
    return 2


def _operator() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):  # no user name in a container without /etc/passwd entry
        return "?"


def _summary(s: ServerSettings) -> str:
    return ", ".join(f"{k}={_text(v)}" for k, v in s.stored().items())


def _text(value: Any) -> str:
    if isinstance(value, list):
        return ",".join(str(v) for v in value) or "none"
    if isinstance(value, dict):
        return ", ".join(f"{k}: {v}" for k, v in value.items())
    return str(value)


def _deployment_llm(settings: Settings) -> str:
    from bot.app import llm_endpoint
    from core.errors import ConfigError

    try:
        return llm_endpoint(settings).model or "the first model the LLM server lists"
    except ConfigError:
        return "none: no LLM is configured"


def describe(s: ServerSettings, settings: Settings) -> list[str]:
    """One line per key: its value, or ``(deployment: …)`` when it inherits."""
    from core.server_settings import QUOTA_KEYS

    inherited = {
        "llm_model": _deployment_llm(settings),
        "model_selection": settings.selection.model_selection,
        "allowed_tasks": "every task the deployment runs",
        "language": "the language of the request",
        **{key: str(getattr(settings.quotas, key)) for key in QUOTA_KEYS},
    }
    stored = s.stored()
    width = max(len(k) for k in (*inherited, "pinned_model.TASK"))
    lines = []
    for key, default in inherited.items():
        if key in stored:
            lines.append(f"{key:{width}}  {_text(stored[key])}")
        else:
            lines.append(f"{key:{width}}  (deployment: {default})")
    for task, model in sorted(s.pinned_models.items()):
        lines.append(f"{'pinned_model.' + task:{width}}  {model}")
    if not s.pinned_models:
        lines.append(f"{'pinned_model.TASK':{width}}  (none: models are chosen per request)")
    return lines
