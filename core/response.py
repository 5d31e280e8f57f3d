"""Stage 4, response generation: the answer the user reads.

The LLM gets the request, every task's record (inputs, model and why, status,
error, result) as JSON, and the generated files by handle, and is told to
answer the request first, then describe the workflow and any failure.  Long
results are trimmed so one chatty model cannot blow the context window.
When the LLM call itself fails, or its answer is empty or only echoes the
prompt's markup, :func:`fallback_answer` builds a plain answer from the same
records, so the user still gets the results.
"""

from __future__ import annotations

import contextlib
import json
import logging
import re
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache
from typing import Any

from core import prompts
from core.errors import ErrorCode, RunFailed, TaskCode
from core.llm import LLM, OnDelta
from core.repeats import Looping, RepeatGuard
from core.types import Resource, TaskError, TaskRecord, Usage

log = logging.getLogger(__name__)

CHAT_LOG_BUDGET = 2000
ARG_CHARS = 300
MAX_LIST_ITEMS = 20
_LINE_CHARS = 300  # a result in the fallback answer
HEAD_CHARS = 120  # a streamed answer's first line is held until this long (echo check)
# The answer's completion cap for a model that does not reason first (a local
# llama.cpp/vLLM/Ollama server): about 500 words is a whole answer, and a small
# model that rambles is stopped in seconds, not after minutes at 15 tokens/s.
PLAIN_ANSWER_CAP = 700
# An answer whose tail repeats one piece over this many characters (and at
# least four times: core.repeats) is cut there: a small model saying the same
# sentence again and again until the cap.
LOOP_SPAN = 300


def answer_cap(configured: int, reasons: bool) -> int:
    """The answer's completion cap: the configured one for a model that
    reasons first (its thinking counts), else at most :data:`PLAIN_ANSWER_CAP`."""
    return configured if reasons else min(configured, PLAIN_ANSWER_CAP)


def _trim_value(value: Any, limit: int) -> Any:
    """``value`` with long strings cut and long lists shortened, JSON-able."""
    if isinstance(value, str):
        return prompts.trim(value, limit)
    if isinstance(value, bytes | bytearray):
        return f"<{len(value)} bytes>"
    if isinstance(value, dict):
        return {str(k): _trim_value(v, limit) for k, v in value.items()}
    if isinstance(value, list | tuple):
        out = [_trim_value(v, limit) for v in value[:MAX_LIST_ITEMS]]
        if len(value) > MAX_LIST_ITEMS:
            out.append(f"…({len(value) - MAX_LIST_ITEMS} more)")
        return out
    if value is None or isinstance(value, bool | int | float):
        return value
    return prompts.trim(str(value), limit)


def _trim_result(result: dict[str, Any], limit: int) -> Any:
    """The result, trimmed; if still longer than ``limit`` as JSON, its JSON cut."""
    trimmed = _trim_value(result, limit)
    text = json.dumps(trimmed, ensure_ascii=False)
    return trimmed if len(text) <= limit else prompts.trim(text, limit)


def record_json(record: TaskRecord, max_result_chars: int) -> dict[str, Any]:
    """One task record as the response prompt shows it (empty fields left out;
    the result's own list of files too when ``files`` names them: the
    handles are what the answer needs, and the file list says their kind)."""
    result = record.result
    if result is not None and _files_listed(result.get("files"), record.files):
        result = {k: v for k, v in result.items() if k != "files"}
    out: dict[str, Any] = {
        "id": record.id,
        "task": record.task,
        "dep": list(record.dep),
        "args": {k: prompts.trim(v, ARG_CHARS) for k, v in record.args.items()},
        "model": record.model,
        "reason": record.reason,
        "status": str(record.status),
        "error": failure_text(record),
        "result": _trim_result(result, max_result_chars) if result else None,
        "files": list(record.files),
    }
    return {k: v for k, v in out.items() if v not in (None, [], {})}


def failure_text(record: TaskRecord) -> str | None:
    """Why a task failed or was skipped, as the answer's model reads it: each
    failure's plain meaning (:attr:`TaskCode.meaning <core.errors.TaskCode>`)
    before its terse form, ``; ``-separated (small models said what failed,
    and why, more often with the meaning than with the code alone:
    ``docs/answer-errors.md``).  A record with no ``errors`` data (an older
    checkpoint's sentence) is shown as it is."""
    if not record.errors:
        return record.error
    return "; ".join(map(_described, record.errors))


def _described(error: TaskError) -> str:
    try:
        meaning = TaskCode(error.code).meaning
    except ValueError:  # a code of a newer version
        return str(error)
    return f"{meaning} ({error})"


def _files_listed(files: Any, handles: Sequence[str]) -> bool:
    """Whether a result's ``files`` entries are all among ``handles``."""
    if not isinstance(files, list) or not handles:
        return False
    return all(isinstance(f, dict) and f.get("handle") in handles for f in files)


def build_response_messages(
    *,
    request_text: str,
    chat_log: Sequence[tuple[str, str]],
    records: Sequence[TaskRecord],
    files: Sequence[Resource],
    max_result_chars: int = 2000,
    instruction: str | None = None,
) -> list[dict[str, str]]:
    """System prompt plus one user message: chat log, request, records (one
    compact JSON object a task), files; each block in its tag, which the
    system prompt explains.  ``instruction``: a line added to the system
    prompt (a server's answer language)."""
    parts: list[str] = []
    log = prompts.render_chat_log(chat_log, CHAT_LOG_BUDGET)
    if log:
        parts.append(f"<chat_log>\n{log}\n</chat_log>")
    parts.append(f"<request>\n{prompts.quote(request_text.strip())}\n</request>")
    if records:
        data = [record_json(r, max_result_chars) for r in records]
        body = prompts.quote("\n".join(_compact_json(d) for d in data))
        parts.append(f"<results>\n{body}\n</results>")
    else:
        parts.append("No task ran: the request needs no model. Answer it yourself.")
    listed = "\n".join(_file_line(f) for f in files) or "none"
    parts.append(f"<files>\n{listed}\n</files>")
    return [
        {"role": "system", "content": _system(instruction)},
        {"role": "user", "content": "\n".join(parts)},
    ]


def _system(instruction: str | None) -> str:
    base = prompts.load("response_system.md")
    return f"{base.rstrip()}\n\n{instruction}" if instruction else base


def _compact_json(value: Any) -> str:
    """JSON without the spaces after ``,`` and ``:`` (as readable to a model,
    and a sixth fewer tokens)."""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def _file_line(f: Resource) -> str:
    origin = f" from task {f.task_id}" if f.task_id is not None else ""
    return prompts.quote(f"{f.handle} ({f.kind}{origin})")


@dataclass(frozen=True, slots=True)
class Answer:
    """The answer text; ``fallback`` when it was built without the LLM's words
    (``reason``: why, a code and fields the adapters word in its first line)."""

    text: str
    fallback: bool = False
    reason: RunFailed | None = None


async def generate_response(
    llm: LLM,
    *,
    request_text: str,
    chat_log: Sequence[tuple[str, str]],
    records: Sequence[TaskRecord],
    files: Sequence[Resource],
    usage: Usage,
    max_result_chars: int = 2000,
    max_tokens: int | None = None,
    on_delta: OnDelta | None = None,
    instruction: str | None = None,
) -> Answer:
    """The LLM's answer (at most ``max_tokens`` completion tokens).

    An empty answer, or one that begins by echoing the prompt's own markup
    (weak local models do), becomes :func:`fallback_answer` (``fallback``
    set).  Raises :class:`~core.errors.RunFailed` when the call fails; the
    caller then answers with ``fallback_answer(records, files, error=str(exc))``
    (the error's terse form: the adapters word its first line again from
    the reply's error code and fields).

    ``on_delta``: stream the answer, handing on its text as it comes (its
    first line is held back until it is seen not to echo the prompt; an
    echo is never handed on).  The returned text is the whole answer.

    An answer that keeps repeating one piece (:data:`LOOP_SPAN`) is cut
    after the sentence where the repetition first ends; streamed, the call
    ends as soon as it is seen (a local server stops generating), and the
    returned text is shorter than what was handed on.
    """
    messages = build_response_messages(
        request_text=request_text,
        chat_log=chat_log,
        records=records,
        files=files,
        max_result_chars=max_result_chars,
        instruction=instruction,
    )
    guard = RepeatGuard(
        LOOP_SPAN,
        own_text=_quotable(request_text, chat_log, records),
        # "1. the same sentence", "2. the same sentence"… (not a table of numbers)
        counting_span=2 * LOOP_SPAN,
        counting_letters=24,
    )
    opening = _Opening(on_delta) if on_delta is not None else None

    async def passed(piece: str) -> None:
        await guard.feed(piece)  # Looping ends the call: the rest is not generated
        if opening is not None:
            await opening(piece)

    try:
        text = await llm.complete(
            messages,
            usage=usage,
            max_tokens=max_tokens,
            on_delta=passed if opening is not None else None,
        )
    except RunFailed as e:
        if not isinstance(e.__cause__, Looping):
            raise
        text = guard.text
    else:
        with contextlib.suppress(Looping):  # the whole too (a stream may end between looks)
            guard.check(text)
    if guard.repeated is not None:
        cut = guard.cut(text)
        log.warning(
            "response: the answer kept repeating %r; cut from %d to %d characters",
            guard.repeated[:40],
            len(text),
            len(cut),
        )
        text = cut
    text = text.strip()
    if opening is not None and text and not echoes_prompt(text):
        await opening.flush()
    if not text:
        why = RunFailed(ErrorCode.LLM_EMPTY_ANSWER)
    elif echoes_prompt(text):
        log.warning("response: the answer echoes the prompt's markup; using the fallback answer")
        why = RunFailed(ErrorCode.LLM_ECHOED)
    else:
        return Answer(text)
    return Answer(fallback_answer(records, files, str(why)), fallback=True, reason=why)


def _quotable(
    request_text: str, chat_log: Sequence[tuple[str, str]], records: Sequence[TaskRecord]
) -> str:
    """What an answer may quote that repeats itself rightly (a song's chorus
    the person wrote or a model generated): the request, the person's earlier
    words and the tasks' results.  Not the bot's own earlier answers: one
    that looped must not let the next loop."""
    said = [text for role, text in chat_log if role == "user"]
    results = [json.dumps(r.result, ensure_ascii=False) for r in records if r.result]
    return "\n".join([request_text, *said, *results])


class _Opening:
    """Passes a streamed answer on, holding back its start only while it
    could still be an echo of the prompt (it opens like one of the prompt's
    tags or lines): until that is settled, the line is complete, or it is
    :data:`HEAD_CHARS` long.  An ordinary answer goes out with its first piece."""

    def __init__(self, on_delta: OnDelta) -> None:
        self._on_delta = on_delta
        self._head = ""
        self._passing = False
        self._echo = False

    async def __call__(self, text: str) -> None:
        if self._passing:
            await self._on_delta(text)
            return
        if self._echo:
            return
        self._head += text
        start = self._head.lstrip()
        if "\n" in start or len(start) >= HEAD_CHARS or not _may_echo(start):
            if echoes_prompt(start):
                self._echo = True
                return
            await self._release(start)

    async def flush(self) -> None:
        """The answer ended while its first line was held: pass it on."""
        start = self._head.lstrip()
        if not self._passing and not self._echo and start:
            await self._release(start)

    async def _release(self, start: str) -> None:
        self._passing = True
        await self._on_delta(start)


_ECHO_TAG = re.compile(r"[<‹]\s*/?\s*(?:request|results|files|chat_log)\s*[>›]", re.IGNORECASE)


@cache
def _prompt_lines() -> frozenset[str]:
    """The lines the answer prompt itself is made of, normalised."""
    fixed = (
        "The request:",
        "Earlier turns, oldest first:",
        "The tasks that ran for it:",
        "Files produced (refer to them by these handles only):",
        "No task ran: the request needs no model. Answer it yourself.",
    )
    system = prompts.load("response_system.md").splitlines()
    return frozenset(n for n in map(_norm, (*fixed, *system)) if len(n) >= 8)


def _may_echo(head: str) -> bool:
    """Whether an answer that begins with ``head`` may still turn out to
    echo the prompt (:func:`echoes_prompt`): it opens with a tag, or its
    first line so far begins one of the prompt's lines."""
    start = head.lstrip().lstrip("`").removeprefix("markdown").removeprefix("text").lstrip()
    if not start or start[0] in "<‹":
        return True
    first = _norm(start.split("\n", 1)[0])
    return not first or any(line.startswith(first) for line in _prompt_lines())


def _norm(line: str) -> str:
    return " ".join(line.strip().strip("#*>`_ ").split()).casefold()


def echoes_prompt(text: str) -> bool:
    """Whether an answer begins by repeating the prompt: one of its tags
    (``<request>``, ``<results>``, ``<files>``, ``<chat_log>``) or one of its
    own lines (the headings of the user message or the system prompt)."""
    head = text.lstrip().lstrip("`").removeprefix("markdown").removeprefix("text").lstrip()
    if _ECHO_TAG.match(head):
        return True
    first = next((line for line in head.splitlines() if line.strip()), "")
    return _norm(first) in _prompt_lines()


def _cut_line(text: str) -> str:
    return prompts.trim(text, _LINE_CHARS)


def fallback_answer(
    records: Sequence[TaskRecord], files: Sequence[Resource], error: str | None = None
) -> str:
    """A plain answer built without the LLM: what ran, results, files, failures.

    Its first line says, tersely, that no answer was written and why
    (``error``: the failure's terse form): the chat log the language model
    reads keeps it, and each task's line (a failure in its terse form).  A
    person reads the adapters' own (``adapters.chat.messages.fallback_text``),
    built from the reply's data: its error code and fields, its tasks, its
    files."""
    lines: list[str] = []
    why = f": {error}" if error else ""
    if not records:
        lines.append(f"[no answer written{why}]")
    else:
        lines.append(f"[no answer written{why}; the results follow]")
        lines.append("")
        for r in records:
            lines.append(r.line(r.error or "", _cut_line))
    if files:
        lines.append("")
        lines.append("Files: " + ", ".join(f"{f.handle} ({f.kind})" for f in files))
    return "\n".join(lines)
