"""What ``ask --json`` prints: one JSON object on stdout, whatever happened.

A request the agent ran prints its reply (:func:`reply_json`; ``status``
``answered``, ``fallback``, ``refused`` or ``failed``).  One that never
reached the agent, or was stopped before its answer, prints the same shape
with no answer (:func:`outcome_json`): ``status`` ``error`` (a setting, a
file, the database, the CLI worker) or ``interrupted`` (Ctrl-C, SIGTERM),
``error`` true and ``message`` saying why.  Standard library only at import:
``python -m bot`` and the CLI worker's client print it before loading the rest.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any, TextIO

if TYPE_CHECKING:
    from core.types import Reply

ERROR = "error"  # the request never reached the agent
INTERRUPTED = "interrupted"  # Ctrl-C or SIGTERM before the answer


def reply_json(reply: Reply) -> dict[str, Any]:
    """The object for a request the agent ran."""
    return {
        "answer": reply.text,
        "status": reply.status.value,
        # a fallback answer means the answer stage failed: not a success
        "error": reply.error or reply.fallback,
        "message": None,
        "fallback": reply.fallback,
        "request_id": reply.request_id,
        "tasks": [
            {
                "id": t.id,
                "task": t.task,
                "model": t.model,
                "backend": t.backend,
                "status": t.status.value,
                "started": t.started.isoformat() if t.started else None,
                "ended": t.ended.isoformat() if t.ended else None,
                "error": t.error,
            }
            for t in reply.tasks
        ],
        "files": [str(f.path.resolve()) for f in reply.files],
        "usage": {
            "llm_calls": reply.usage.llm_calls,
            "prompt_tokens": reply.usage.prompt_tokens,
            "completion_tokens": reply.usage.completion_tokens,
        },
        "timings": dict(reply.timings),
    }


def outcome_json(status: str, message: str) -> dict[str, Any]:
    """The object for a request with no reply: ``status`` (:data:`ERROR` or
    :data:`INTERRUPTED`) and why, in the reply's shape."""
    return {
        "answer": "",
        "status": status,
        "error": True,
        "message": message,
        "fallback": False,
        "request_id": None,
        "tasks": [],
        "files": [],
        "usage": {"llm_calls": 0, "prompt_tokens": 0, "completion_tokens": 0},
        "timings": {},
    }


def error_message(line: str) -> str:
    """``message`` for one of ``python -m bot``'s one-line errors (``error: …``)."""
    return line.removeprefix("error: ").strip()


def line(obj: dict[str, Any]) -> str:
    """``obj`` as one line of JSON, with its newline."""
    return json.dumps(obj, ensure_ascii=False) + "\n"


def write(obj: dict[str, Any], out: TextIO) -> None:
    """Print ``obj`` as one line of JSON."""
    out.write(line(obj))
    out.flush()
