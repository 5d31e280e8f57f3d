"""The CLI worker started on first use (docs/cli-worker.md, "Started on first use").

An ``ask`` or ``chat`` that found no worker runs in its own process, as
always; when it has run, and a person ran it at a terminal
(``CLI_WORKER_START=auto``, the default) or ``CLI_WORKER_START=always``, it
starts ``python -m bot serve`` in the background with its own environment
and working directory (so the worker's settings are the command's), then
exits.  The next commands hand over to that worker (bot.worker_client) and
start at once.  The worker stops by itself after ``CLI_WORKER_IDLE``
seconds without a command (an auto-started worker never waits forever: 0
means the default, 1800).  ``CLI_WORKER_START=never`` turns this off.

It is started after the command, not before: the command's CPU is not
shared with the worker's start-up, and a command that creates the database
does it alone (two processes would migrate a new SQLite file at once).

Nothing is printed: the command's output is the same with or without it.
The command's log says it started one; the worker's own log goes to
``DATA_DIR/logs/cli-worker.log`` (moved to ``.1`` by a worker starting once
it is past 5 MB).

Standard library only at import, as bot.worker_client.
"""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

from bot import worker_client

MODES = ("auto", "always", "never")
_ALIASES = {
    **dict.fromkeys(("1", "true", "yes", "on"), "always"),
    **dict.fromkeys(("0", "false", "no", "off"), "never"),
}
DEFAULT_IDLE = "1800"  # bot.settings: cli_worker_idle's default
LOG_NAME = "cli-worker.log"
LOG_MAX_BYTES = 5 * 1024 * 1024  # past this, a worker starting moves it to cli-worker.log.1


def mode(origin: worker_client.Origin) -> str:
    """CLI_WORKER_START (environment, then ``./.env``): auto, always or never;
    unset or not one of those: auto."""
    value = (origin.setting("CLI_WORKER_START") or "auto").strip().lower()
    value = _ALIASES.get(value, value)
    return value if value in MODES else "auto"


def wanted(origin: worker_client.Origin, stdin: TextIO | None) -> bool:
    """Whether a command that ran here starts a worker for the next ones:
    always, never, or (auto) when a person runs it at a terminal: a script,
    a test or a pipe that feeds the command does not leave a process behind."""
    chosen = mode(origin)
    if chosen != "auto":
        return chosen == "always"
    try:
        return stdin is not None and stdin.isatty()
    except ValueError:  # closed
        return False


def running(socket_path: Path) -> bool:
    """Whether a worker holds this socket's lock (serving or still starting):
    then another would be refused."""
    import fcntl

    lock = socket_path.with_name(socket_path.name + ".lock")
    try:
        fd = os.open(lock, os.O_RDONLY)
    except FileNotFoundError:
        return False
    except OSError:
        return True  # cannot tell: start none
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    except OSError:
        return True
    else:
        fcntl.flock(fd, fcntl.LOCK_UN)
        return False
    finally:
        os.close(fd)


@dataclass(frozen=True, slots=True)
class Started:
    pid: int
    log: Path
    idle: str


def start(stdin: TextIO | None = None) -> Started | str:
    """Start ``python -m bot serve`` in the background when :func:`wanted`
    and none runs for this socket; what was started, or why not."""
    if not hasattr(os, "getuid"):
        return "no CLI worker on this platform"
    try:
        origin = worker_client.Origin.here()
        if not wanted(origin, sys.stdin if stdin is None else stdin):
            return f"not started (CLI_WORKER_START={mode(origin)}, not at a terminal)"
        path = worker_client.socket_path(origin)
        if running(path):
            return f"a CLI worker already runs at {path}"
        logs = worker_client.data_dir(origin) / "logs"
        logs.mkdir(parents=True, exist_ok=True)
    except (OSError, ValueError) as e:
        return f"no CLI worker started ({e})"
    env = dict(os.environ)
    idle = origin.setting("CLI_WORKER_IDLE")
    try:
        if idle is None or float(idle) <= 0:
            idle = env["CLI_WORKER_IDLE"] = DEFAULT_IDLE
    except ValueError:
        pass  # the worker's settings say what is wrong with it, in its log
    log_path = logs / LOG_NAME
    try:
        if log_path.stat().st_size > LOG_MAX_BYTES:  # one old log kept, as bot.log does
            log_path.replace(log_path.with_name(LOG_NAME + ".1"))
    except OSError:
        pass  # none yet
    try:
        fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        try:
            proc = subprocess.Popen(
                [sys.executable, "-m", "bot", "serve"],
                cwd=origin.cwd,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=fd,
                start_new_session=True,  # not stopped by the terminal's Ctrl-C or hang-up
            )
        finally:
            os.close(fd)
    except OSError as e:
        return f"no CLI worker started ({e})"
    return Started(proc.pid, log_path, str(idle))
