"""Log lines as text (the terminal) or JSON (a log collector), and one line per stage.

``LOG_FORMAT=json`` writes one JSON object a line: ``ts`` (UTC, ISO 8601),
``level``, ``logger``, ``message``, the request's context when the line was
written inside :func:`~core.telemetry.context.request_context`
(``request_id``, ``conversation``, ``user``, ``platform``, ``server``), the
fields a :func:`log_stage` line carries (``stage``, ``seconds``, …) and
``exc_info`` for an exception's traceback.  The message is the same text the
terminal shows: nothing is logged in JSON that text would not show.
Standard library only.
"""

from __future__ import annotations

import json
import logging
import sys
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import IO, Any, Literal

from core.telemetry.context import FIELDS, current

LogFormat = Literal["text", "json"]
TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
STAGE_LOGGER = "core.stage"

# The attribute of a LogRecord that holds a stage line's own fields.
_FIELDS_ATTR = "telemetry_fields"
_stage_log = logging.getLogger(STAGE_LOGGER)


class ContextFilter(logging.Filter):
    """Puts the current request's context on each record (as attributes named
    as in :data:`~core.telemetry.context.FIELDS`), in the thread and task
    that wrote it, before any handler formats it elsewhere."""

    def filter(self, record: logging.LogRecord) -> bool:
        ctx = current()
        if ctx is not None:
            for name, value in ctx.fields().items():
                if not hasattr(record, name):
                    setattr(record, name, value)
        return True


class JsonFormatter(logging.Formatter):
    """One JSON object per record (see the module docstring)."""

    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, Any] = {
            "ts": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        ctx = current()
        for name in FIELDS:
            value = getattr(record, name, None)
            if value is None and ctx is not None:  # formatted where it was written
                value = getattr(ctx, name)
            if value is not None:
                out[name] = value
        extra = getattr(record, _FIELDS_ATTR, None)
        if isinstance(extra, Mapping):
            for key, value in extra.items():
                out.setdefault(str(key), value)
        if record.exc_info:
            out["exc_info"] = self.formatException(record.exc_info)
        if record.stack_info:
            out["stack_info"] = self.formatStack(record.stack_info)
        return json.dumps(out, ensure_ascii=False, default=str)


def formatter(fmt: LogFormat) -> logging.Formatter:
    return JsonFormatter() if fmt == "json" else logging.Formatter(TEXT_FORMAT)


def configure_logging(
    level: str, fmt: LogFormat = "text", stream: IO[str] | None = None
) -> logging.Handler:
    """The root logger's handler: ``fmt`` lines on ``stream`` (stderr), each
    with its request's context.  Like :func:`logging.basicConfig`, nothing
    changes when the root logger has a handler already (e.g. under pytest)."""
    handler = logging.StreamHandler(stream if stream is not None else sys.stderr)
    handler.setFormatter(formatter(fmt))
    handler.addFilter(ContextFilter())
    logging.basicConfig(level=level.upper(), handlers=[handler])
    return handler


def log_stage(stage: str, seconds: float, **fields: object) -> None:
    """The one INFO line a stage writes when it ends: ``request abc123:
    planning took 1.23s tasks=3``; in JSON, ``stage``, ``seconds`` and each
    field as keys of their own (plus the request context)."""
    if not _stage_log.isEnabledFor(logging.INFO):
        return
    ctx = current()
    head = f"request {ctx.request_id}: " if ctx is not None else ""
    tail = "".join(f" {k}={v}" for k, v in fields.items())
    _stage_log.info(
        "%s%s took %.2fs%s",
        head,
        stage,
        seconds,
        tail,
        extra={_FIELDS_ATTR: {"stage": stage, "seconds": round(seconds, 3), **fields}},
    )
