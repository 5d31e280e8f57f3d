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
    from pydantic.main import IncEx

    from core.types import Reply

ERROR = "error"  # the request never reached the agent
INTERRUPTED = "interrupted"  # Ctrl-C or SIGTERM before the answer


# What the reply's JSON (``core.types.REPLY_ADAPTER``) gives ``ask --json``
# as it is: of each task (``core.types.TaskRecord``), what ``tasks`` shows.
_SHOWN: dict[str, IncEx | bool] = {
    "status": True,
    "request_id": True,
    "usage": True,
    "tasks": {"__all__": {"id", "task", "model", "backend", "status", "started", "ended", "error"}},
}


def reply_json(reply: Reply) -> dict[str, Any]:
    """The object for a request the agent ran: the reply's JSON
    (``core.types.REPLY_ADAPTER``) as ``ask --json`` shows it."""
    from adapters.chat.messages import reply_text  # loaded already by the turn that ran
    from core.types import REPLY_ADAPTER  # loaded already: the reply is one of its types

    data = REPLY_ADAPTER.dump_python(reply, mode="json", include=_SHOWN)
    return {
        "answer": reply_text(reply),  # a refusal's words, the notes after an answer
        "status": data["status"],
        # a fallback answer means the answer stage failed: not a success
        "error": reply.error or reply.fallback,
        "message": None,
        "fallback": reply.fallback,
        "request_id": data["request_id"],
        "tasks": data["tasks"],
        "files": [str(f.path.resolve()) for f in reply.files],
        "usage": data["usage"],
        "timings": dict(reply.timings),  # the stages that ran
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
