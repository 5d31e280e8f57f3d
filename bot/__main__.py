"""``python -m bot``: run the bot, ask once, chat, manage the DB and models.

Configuration problems end in one line naming the variable to set (exit 2),
never a traceback: a missing or refused token (Discord, Slack), a missing
Slack app token or signing secret, a DATABASE_URL that names no usable
driver.  Other failures of the project's own (an unreachable database, an
unreachable platform API) are one line too (exit 1).  Ctrl-C exits 130,
SIGTERM 143.  ``ask --json`` says each of these as its one JSON object on
stdout instead (adapters.cli_json).  Where log lines go: bot.logs.

The user's path (docs/speed.md): ``run`` and ``serve`` start their warm-ups
as the process starts; an ``ask`` or ``chat`` that ran in its own process
starts the CLI worker for the next ones (bot.worker_start) and ends without
the interpreter's teardown.
"""

from __future__ import annotations

import argparse
import gc
import logging
import os
import sys
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, NoReturn

from core.errors import BotError, ConfigError, InputRejected, RunFailed, StoreUnavailable

if TYPE_CHECKING:
    from bot.lifecycle import Lifecycle
    from bot.settings import Settings

# Imports are where a command's time goes (openai, SQLAlchemy, the Hub client
# cost about a second together): `--help` and argument errors load only
# argparse and this module; the settings, asyncio and the rest come once a
# command runs, and each command loads only what it uses (bot.commands).
log = logging.getLogger("bot")


def _prog() -> str:
    """How the person started us: the console script by its name, else ``python -m bot``."""
    name = os.path.basename(sys.argv[0]) if sys.argv and sys.argv[0] else ""
    return name if name.startswith("hugginggpt-bot") else "python -m bot"


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog=_prog(),
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

    sub.add_parser(
        "serve",
        help="keep the bot loaded so ask and chat start at once (docs/cli-worker.md)",
        description="A resident worker: ask and chat run in it when it was started with "
        "the same settings and code (CLI_SOCKET, CLI_WORKER_IDLE).",
    )

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
    from bot import eval_command  # standard library only at import; the core when it runs

    eval_command.add_parser(sub)
    from bot import config_command, usage_command  # standard library only at import

    usage_command.add_parser(sub)
    config_command.add_parser(sub)
    return p


def _setup_logging(
    settings: Settings, args: argparse.Namespace, not_handed_over: str | None = None
) -> None:
    """The terminal commands log to a file, the servers to stderr (bot.logs)."""
    from bot import logs

    command = args.command
    logs.setup(settings, command, getattr(args, "target", None))
    if not_handed_over:
        log.debug("%s runs here, not in a CLI worker: %s", command, not_handed_over)


async def _main(args: argparse.Namespace, settings: Settings) -> int:
    import asyncio
    import contextlib
    import signal

    from bot import commands
    from bot.lifecycle import Lifecycle

    gc.freeze()  # what start-up built lives as long as the process: never scan it again
    gc.enable()

    lifecycle = Lifecycle()
    handlers: dict[str, Callable[[argparse.Namespace, Settings], Awaitable[int]]] = {
        "run": lambda a, s: commands.run(a, s, lifecycle),
        "serve": lambda a, s: _serve(s, lifecycle),
        "ask": commands.ask,
        "chat": commands.chat,
        "db": commands.db,
        "models": commands.models,
        "discord": commands.discord,
        "doctor": _doctor,
        "eval": _eval,
        "usage": _usage,
        "config": _config,
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
            raise  # Ctrl-C: the runner turns it into KeyboardInterrupt (exit 130)
        log.info("stopped by SIGTERM")
        if _as_json(args):
            _print_outcome("interrupted", "stopped by SIGTERM before the answer")
        return 143
    except BaseExceptionGroup as group:
        # `run all`: one platform failed (the others were stopped): say why, once.
        first = _first_bot_error(group)
        if first is None:
            raise
        raise first from None


async def _serve(settings: Settings, lifecycle: Lifecycle) -> int:
    from bot import worker

    return await worker.serve(settings, lifecycle, failure)


async def _doctor(args: argparse.Namespace, settings: Settings) -> int:
    from bot import doctor

    return await doctor.run(settings)


async def _eval(args: argparse.Namespace, settings: Settings) -> int:
    from bot import eval_command

    return await eval_command.run(args, settings)


async def _usage(args: argparse.Namespace, settings: Settings) -> int:
    from bot import usage_command

    return await usage_command.run(args, settings)


async def _config(args: argparse.Namespace, settings: Settings) -> int:
    from bot import config_command

    return await config_command.run(args, settings)


def _first_bot_error(group: BaseExceptionGroup[BaseException]) -> BotError | None:
    for e in group.exceptions:
        if isinstance(e, BotError):
            return e
        if isinstance(e, BaseExceptionGroup) and (found := _first_bot_error(e)) is not None:
            return found
    return None


# Commands that serve many requests: their warm-ups start with the process.
_SERVES = ("run", "serve")


def _warm_up_early() -> None:
    """Start every warm-up (core.warmup: the codecs, NumPy, Pillow's drawing)
    now, in its thread, while this thread imports the SDKs and opens the
    store: they are done before the platform connects.  Started later (at
    ``Agent.warm_up``) they ran while the first request did, taking its
    event loop's turns on the interpreter lock (a fresh ``run`` process's
    first request: 100–200 ms later than its second)."""
    from core.warmup import PROCESS

    PROCESS.all()


# Commands that open the agent, and with it the SDKs' HTTP clients.
_OPENS_AGENT = ("run", "serve", "ask", "chat")


def _prepare_tls() -> None:
    """Start making the SDK clients' TLS context (core.tls) in its thread
    now: OpenSSL parses the CA bundle on another core while this thread
    imports the SDKs, instead of on a cold ``ask``'s critical path after them."""
    from core import tls

    tls.prepare()


# Commands that open the database.
_USES_DATABASE = ("run", "serve", "ask", "chat", "db", "usage", "config")
_DATABASE_EXAMPLES = "e.g. sqlite+aiosqlite:///./data/bot.db or postgresql+asyncpg://USER@HOST/DB"


def _check_database_url(url: str) -> None:
    """A ConfigError naming DATABASE_URL unless it parses and names an
    installed asyncio driver (SQLAlchemy would end in a traceback)."""
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError

    try:
        parsed = make_url(url)
    except ArgumentError:
        raise ConfigError(f"DATABASE_URL is not a database URL: use {_DATABASE_EXAMPLES}") from None
    try:
        dialect = parsed.get_dialect()
        if dialect.is_async:
            dialect.import_dbapi()
    except (ArgumentError, ImportError) as e:  # NoSuchModuleError is an ArgumentError
        raise ConfigError(
            f"DATABASE_URL names the {parsed.drivername} driver, which is not installed "
            f"({type(e).__name__}: {e}): use {_DATABASE_EXAMPLES}"
        ) from None
    if not dialect.is_async:
        raise ConfigError(
            f"DATABASE_URL names {parsed.drivername}, which is not an asyncio driver: "
            f"use {_DATABASE_EXAMPLES}"
        )


def _one_line(e: BaseException) -> str:
    return " ".join(str(e).split())


def _settings_problem(e: Exception) -> str:
    """``SLACK_HTTP_PORT: Input should be a valid integer…`` for each bad variable."""
    from pydantic import ValidationError

    from bot.settings import env_name

    if not isinstance(e, ValidationError):
        return _one_line(e)
    return "; ".join(f"{env_name(err['loc'])}: {err['msg']}" for err in e.errors())


def failure(e: BotError) -> tuple[int, str]:
    """The exit code and the one line for one of the project's own errors."""
    if isinstance(e, ConfigError):
        return 2, f"error: {_one_line(e)}"
    if isinstance(e, StoreUnavailable):
        return 1, f"error: {_one_line(e)}; check DATABASE_URL"
    if isinstance(e, InputRejected | RunFailed):  # a code and fields: the adapters word them
        from adapters.chat.messages import error_text

        return 1, f"error: {' '.join(error_text(e).split())}"
    return 1, f"error: {_one_line(e)}"


def _as_json(args: argparse.Namespace) -> bool:
    """``ask --json``: every outcome is one JSON object on stdout."""
    return args.command == "ask" and bool(getattr(args, "json", False))


def _print_outcome(status: str, message: str) -> None:
    from adapters import cli_json  # standard library only

    cli_json.write(cli_json.outcome_json(status, message), sys.stdout)


def _fail(args: argparse.Namespace, code: int, line: str) -> int:
    """Say a failure once: ``line`` on stderr, or ``ask --json``'s object on stdout."""
    if _as_json(args):
        _print_outcome("error", line.removeprefix("error: "))
    else:
        print(line, file=sys.stderr)
    return code


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    not_handed_over = None
    if args.command in ("ask", "chat"):
        # A running `python -m bot serve` with these settings and this code runs
        # it at once (bot.worker_client loads nothing heavy); else it runs here.
        from bot import worker_client

        handed = worker_client.hand_over(args)
        if isinstance(handed, int):
            return handed
        not_handed_over = handed
    # Starting a command builds a few hundred thousand long-lived objects (the
    # SDKs' pydantic models, SQLAlchemy's tables): no cyclic-GC passes over
    # them while importing (about a tenth of the start-up); _main freezes them.
    enabled = gc.isenabled()
    gc.disable()
    try:
        code = _command(args, not_handed_over)
    finally:
        if enabled:
            gc.enable()
    if not_handed_over is not None:
        if code in (0, 1):  # it ran (a configuration error would stop a worker too)
            _start_worker()
        if argv is None:  # the program itself (python -m bot, the console script)
            _exit_now(code)
    return code


def _start_worker() -> None:
    """After an ``ask`` or ``chat`` that ran here: a CLI worker for the next
    ones, in the background (bot.worker_start; at a terminal, unless
    CLI_WORKER_START=never).  Nothing is printed; the log says so."""
    from bot import worker_start

    started = worker_start.start()
    if isinstance(started, worker_start.Started):
        log.info(
            "started a CLI worker in the background (pid %d, log %s): the next ask and chat "
            "run in it; it stops after %ss without a command (CLI_WORKER_START=never: "
            "start none)",
            started.pid,
            started.log,
            started.idle,
        )
    else:
        log.debug("no CLI worker started: %s", started)


def _exit_now(code: int) -> NoReturn:
    """End ``ask`` or ``chat`` without the interpreter's teardown: freeing
    every object of the SDKs' modules one by one took 60–130 ms after the
    answer was printed.  Everything was closed by then (the store, the
    clients, the log file): flush what was written, then exit."""
    import contextlib

    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):  # a closed pipe: nobody reads it
            stream.flush()
    logging.shutdown()
    os._exit(code)


def _command(args: argparse.Namespace, not_handed_over: str | None = None) -> int:
    from bot import event_loop

    if args.command in _OPENS_AGENT:
        _prepare_tls()
    from bot.settings import get_settings

    try:
        settings = get_settings()
    except Exception as e:  # pydantic ValidationError: name the bad variable
        return _fail(args, 2, f"error: invalid configuration: {_settings_problem(e)}")
    _setup_logging(settings, args, not_handed_over)
    if args.command in _SERVES:
        _warm_up_early()
    try:
        if args.command in _USES_DATABASE:
            _check_database_url(settings.store.database_url)
        return event_loop.run(_main(args, settings))
    except BotError as e:
        return _fail(args, *failure(e))
    except KeyboardInterrupt:
        if _as_json(args):
            _print_outcome("interrupted", "stopped by Ctrl-C before the answer")
        return 130
    except Exception:
        if not _as_json(args):
            raise
        log.exception("ask failed")  # the traceback goes to the log
        _print_outcome("error", "the command failed unexpectedly; the log says why")
        return 1


if __name__ == "__main__":
    sys.exit(main())
