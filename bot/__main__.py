"""``python -m bot``: run the bot, ask once, chat, manage the DB and models.

Configuration problems end in one line naming the variable to set (exit 2),
never a traceback.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import signal
import sys
from collections.abc import Awaitable, Callable, Sequence

from bot.settings import Settings, get_settings
from core.errors import BotError, ConfigError

log = logging.getLogger("bot")


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m bot",
        description="HuggingGPT chat bot: an LLM plans AI tasks, runs Hugging Face models, answers.",
    )
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")

    run = sub.add_parser("run", help="run the bot (Discord, Slack, both, or the terminal chat)")
    run.add_argument(
        "target",
        nargs="?",
        default="auto",
        choices=["auto", "discord", "slack", "all", "cli"],
        help="auto: every platform whose token is set, else the terminal chat",
    )

    ask = sub.add_parser("ask", help="run one request and print the answer")
    ask.add_argument("text")
    ask.add_argument("--file", action="append", default=[], metavar="PATH")
    ask.add_argument("--conversation", default="default", metavar="NAME")
    ask.add_argument("--json", action="store_true", help="print one JSON object on stdout")

    chat = sub.add_parser("chat", help="an interactive chat in the terminal")
    chat.add_argument("--conversation", default="default", metavar="NAME")

    db = sub.add_parser("db", help="database commands")
    db.add_argument(
        "action",
        choices=["upgrade", "prune-media"],
        help="upgrade: apply migrations; prune-media: delete files no conversation uses",
    )

    models = sub.add_parser("models", help="model catalog commands")
    models.add_argument("action", choices=["list", "refresh"])
    models.add_argument("--task", default=None, help="only this task (list)")
    models.add_argument("--per-task", type=int, default=5, help="models per task (refresh)")
    models.add_argument("--output", default=None, help="catalog file to write (refresh)")

    discord = sub.add_parser("discord", help="Discord commands")
    discord.add_argument("action", choices=["sync"])

    sub.add_parser("doctor", help="check the configuration and the services it names")
    return p


def _setup_logging(settings: Settings, command: str) -> None:
    quiet = command in ("ask", "chat", "models", "db", "doctor")
    level = settings.log_level or ("WARNING" if quiet else "INFO")
    logging.basicConfig(
        level=level.upper(),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    for noisy in ("httpx", "httpcore", "httpx2", "discord.http", "aiosqlite", "alembic"):
        logging.getLogger(noisy).setLevel(logging.WARNING)


async def _main(args: argparse.Namespace, settings: Settings) -> int:
    from bot import commands
    from bot.lifecycle import Lifecycle

    lifecycle = Lifecycle()
    handlers: dict[str, Callable[[argparse.Namespace, Settings], Awaitable[int]]] = {
        "run": lambda a, s: commands.run(a, s, lifecycle),
        "ask": commands.ask,
        "chat": commands.chat,
        "db": commands.db,
        "models": commands.models,
        "discord": commands.discord,
        "doctor": commands.doctor,
    }
    # SIGTERM (systemd, Docker, Kubernetes) stops the bot like Ctrl-C does:
    # cancel the work so every `async with` closes (DB, HTTP clients, sockets).
    loop = asyncio.get_running_loop()
    me = asyncio.current_task()
    assert me is not None
    with contextlib.suppress(NotImplementedError, RuntimeError):
        loop.add_signal_handler(signal.SIGTERM, lambda: lifecycle.terminate(me))
    try:
        return await handlers[args.command](args, settings)
    except asyncio.CancelledError:
        if not lifecycle.terminated:
            raise  # Ctrl-C: asyncio.run turns it into KeyboardInterrupt (exit 130)
        log.info("stopped by SIGTERM")
        return 143


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        settings = get_settings()
    except Exception as e:  # pydantic ValidationError: name the bad variable
        print(f"error: invalid configuration: {e}", file=sys.stderr)
        return 2
    _setup_logging(settings, args.command)
    try:
        return asyncio.run(_main(args, settings))
    except ConfigError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except BotError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
