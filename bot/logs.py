"""Where a command's log lines go.

The terminal surfaces show the conversation, not log lines: ``ask``,
``chat``, ``doctor`` and ``run`` when it opens the terminal chat write their
log to ``DATA_DIR/logs/bot.log`` (at ``LOG_LEVEL``, INFO by default) and
nothing of it on the terminal, where each failure is said once, by the
command itself (the ❌ line, the JSON object, doctor's ``BAD`` line).  When
that file cannot be written, WARNING and above go to stderr instead.  The
commands a ``python -m bot serve`` runs log to the same file
(:mod:`bot.worker`).

The servers (``run`` serving Discord or Slack, ``serve``) log to stderr at
``LOG_LEVEL`` (INFO by default), and so do the other commands (``db``,
``models``, ``usage``, ``config``: WARNING by default).  Standard library only.
"""

from __future__ import annotations

import logging
import sys
from logging.handlers import RotatingFileHandler
from pathlib import Path
from typing import TYPE_CHECKING

from core.telemetry.logs import ContextFilter, configure_logging, formatter

if TYPE_CHECKING:
    from bot.settings import Settings

LOG_FILE = Path("logs", "bot.log")
MAX_BYTES = 5_000_000  # then bot.log.1 is the previous one: a terminal's log stays small
# Commands that talk to the person at the terminal.
TERMINAL_COMMANDS = ("ask", "chat", "doctor")
# One-shot commands whose log shows only warnings unless LOG_LEVEL says otherwise.
QUIET_COMMANDS = ("models", "db", "usage", "config")
NOISY = ("httpx", "httpcore", "httpx2", "discord.http", "aiosqlite", "alembic")


def log_path(settings: Settings) -> Path:
    """The terminal commands' log file: ``DATA_DIR/logs/bot.log``."""
    return settings.store.data_path / LOG_FILE


def is_terminal(command: str, settings: Settings, target: str | None = None) -> bool:
    """Whether ``command`` (``run``'s ``target``) talks to the person at the
    terminal rather than serving a platform."""
    if command in TERMINAL_COMMANDS:
        return True
    if command != "run":
        return False
    if target == "auto":  # as bot.commands._targets decides
        return not (settings.discord.bot_token or settings.slack.bot_token)
    return target == "cli"


def file_handler(settings: Settings, level: str) -> logging.Handler | None:
    """A handler appending to :func:`log_path` (None when it cannot be written)."""
    path = log_path(settings)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        handler = RotatingFileHandler(path, maxBytes=MAX_BYTES, backupCount=1, encoding="utf-8")
    except OSError:
        return None
    handler.setLevel(level.upper())
    handler.setFormatter(formatter(settings.process.log_format))
    handler.addFilter(ContextFilter())
    return handler


def setup(settings: Settings, command: str, target: str | None = None) -> Path | None:
    """Configure the root logger for ``command``; the log file when the lines
    go there (None: stderr)."""
    if is_terminal(command, settings, target):
        level = settings.process.log_level or "INFO"
        handler = file_handler(settings, level)
        if handler is not None:
            logging.basicConfig(level=level.upper(), handlers=[handler])
            _quiet_libraries()
            return log_path(settings)
        level = "WARNING"  # the file cannot be written: warnings on the terminal, as before
    else:
        level = settings.process.log_level or ("WARNING" if command in QUIET_COMMANDS else "INFO")
    configure_logging(level, settings.process.log_format, sys.stderr)
    _quiet_libraries()
    return None


def _quiet_libraries() -> None:
    for noisy in NOISY:
        logging.getLogger(noisy).setLevel(logging.WARNING)
