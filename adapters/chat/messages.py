"""What a person reads when a request is refused or fails, for every platform.

Errors carry data: a code and its fields (:mod:`core.errors`); the core
words none of them (its ``str(err)`` is a terse form for logs and the
language model).  The core's codes (:class:`~core.errors.ErrorCode`) are
worded in :mod:`adapters.chat.error_words`; the adapters' own refusals
(downloads, platforms' files, the terminal's paths) have their codes and
words here (:class:`ChatCode`).  :func:`error_text` (or :func:`render_error`
from a code and fields) is what the person is shown for any of them, and
:func:`reply_text` is a reply's text as shown: a refused or failed reply's
error worded again from its code and fields, then the notes the core added
(:class:`~core.types.ReplyNote`: the turn was not saved).  A platform that
wants another form (an embed, a block, another language) starts from the
code and the fields here.

The fixed messages (restarting, sorry, busy) are here too; the status
message's own words are in :mod:`adapters.chat.render`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, cast

from adapters.chat.error_words import CORE_WORDS, render_task
from adapters.chat.text import shorten
from core.errors import Code, ErrorCode, ErrorFields, InputRejected, RunFailed, TaskCode, TaskFailed
from core.types import Reply, ReplyNote, TaskRecord, TaskState

# The bot restarts while a request is kept: it is finished when it is back.
RESTARTING = (
    "I'm restarting right now; I'll finish this as soon as I'm back (no need to send it again)"
)
# The same, as a status shown after the bot's name (Slack's assistant status).
RESTARTING_STATUS = "is restarting; it will finish this after (no need to send it again)"
SORRY = "Sorry, something went wrong on my side (request {rid}). The details are in the log."
CANNOT_TAKE = "I can't take requests right now; please try again in a minute."


class ChatCode(Code):
    """Why an adapter refused a person's file before the agent saw it."""

    FILE_MISSING = "file_missing"  # file (a path on this machine)
    NOT_HOSTED = "not_hosted"  # file, source (where files must come from)
    DOWNLOAD_FAILED = "download_failed"  # file, source, status (when one came)
    REDIRECTED_AWAY = "redirected_away"  # file, source, host
    TOO_MANY_REDIRECTS = "too_many_redirects"  # file, source
    NO_FILE_URL = "no_file_url"  # file, source
    EXTERNAL_LINK = "external_link"  # file
    SLACK_NO_FILES_SCOPE = "slack_no_files_scope"  # file


def _download_failed(f: ErrorFields) -> str:
    status = f" (HTTP {f['status']})" if f.get("status") is not None else ""
    return f"{f['file']} could not be downloaded from {f['source']}{status}."


_WORDS: dict[ChatCode, Callable[[ErrorFields], str]] = {
    ChatCode.FILE_MISSING: lambda f: f"{f['file']}: no such file",
    ChatCode.NOT_HOSTED: lambda f: (
        f"{f['file']} is not hosted by {f['source']}, so it was not downloaded"
    ),
    ChatCode.DOWNLOAD_FAILED: _download_failed,
    ChatCode.REDIRECTED_AWAY: lambda f: (
        f"{f['file']} could not be downloaded: {f['source']} sent it to another host ({f['host']})."
    ),
    ChatCode.TOO_MANY_REDIRECTS: lambda f: (
        f"{f['file']} could not be downloaded from {f['source']}: too many redirects."
    ),
    ChatCode.NO_FILE_URL: lambda f: (
        f"{f['file']} can't be downloaded ({f['source']} sent no file URL)"
    ),
    ChatCode.EXTERNAL_LINK: lambda f: (
        f"{f['file']} is a link to an external service; upload the file itself"
    ),
    ChatCode.SLACK_NO_FILES_SCOPE: lambda f: (
        f"Slack sent a web page instead of {f['file']}: the app is missing the "
        "`files:read` scope. Ask a workspace admin to add it and reinstall the app."
    ),
}


# What the core's notes on a reply say (after its text, a blank line between).
NOTE_WORDS: dict[ReplyNote, str] = {
    ReplyNote.HISTORY_DOWN: (
        "(Note: the history database is unavailable, so this turn was not saved.)"
    ),
    ReplyNote.NOT_SAVED: "(Note: this turn could not be saved; the details are in the log.)",
}


def render_error(code: Code, fields: Mapping[str, Any]) -> str:
    """The words for ``code`` with ``fields``: the core's codes from
    :data:`~adapters.chat.error_words.CORE_WORDS`, the adapters' from here."""
    f = cast(ErrorFields, fields)
    if isinstance(code, ErrorCode):
        return CORE_WORDS[code](f)
    if isinstance(code, ChatCode):
        return _WORDS[code](f)
    if isinstance(code, TaskCode):
        return render_task(code, f)
    raise ValueError(f"no words for {code!r}")


def error_text(err: InputRejected | RunFailed | TaskFailed) -> str:
    """What the person is told for ``err``: its code's words with its fields."""
    return render_error(err.code, err.fields)


def task_error_text(task: TaskState | TaskRecord) -> str:
    """Why ``task`` failed or was skipped, as a person reads it: each of its
    errors worded (every model tried, ``; ``-separated); its ``error`` as it
    is when it has none (a checkpoint or record of an older version held
    the sentence itself), "" when neither."""
    if task.errors:
        return "; ".join(render_task(e.code, e.fields) for e in task.errors)
    return task.error or ""


def reply_text(reply: Reply) -> str:
    """``reply``'s text as a person reads it (:func:`shown_text`), then each
    note the core added."""
    return with_notes(shown_text(reply), reply)


def shown_text(reply: Reply) -> str:
    """``reply``'s own text as a person reads it: a refused or failed
    reply's error worded from its code and fields (its text when it has
    none: a reply saved before replies kept their error); a fallback
    answer with its first line, the reason, worded here; an answer as it is."""
    failure = reply.failure
    if failure is None:
        return reply.text
    if reply.fallback:
        return fallback_text(reply, error_text(failure))
    return error_text(failure)


def fallback_text(reply: Reply, why: str) -> str:
    """A fallback answer (the answer stage failed; ``why``: the reason,
    worded) as a person reads it, from the reply's data: what each task
    found or why it failed (``reply.tasks``), then the files made
    (``reply.files``).  The reply's text is the core's form of the same
    (``core.response.fallback_answer``: the terse form, which the chat log
    the language model reads keeps)."""
    if reply.tasks:
        lines = [
            f"I could not write a full answer ({why}); here is what the models found.",
            "",
            *map(_task_result, reply.tasks),
        ]
    else:
        lines = [f"Sorry, I could not write an answer ({why}). Please try again."]
    if reply.files:
        made = ", ".join(f"{f.handle} ({f.kind})" for f in reply.files)
        lines += ["", f"Files: {made}"]
    return "\n".join(lines)


RESULT_CHARS = 300  # a task's result on its line of a fallback answer


def _task_result(t: TaskRecord) -> str:
    """One task's line of a fallback answer, its errors worded here."""
    return t.line(task_error_text(t), lambda text: shorten(text, RESULT_CHARS))


def with_notes(text: str, reply: Reply) -> str:
    """``text`` followed by ``reply``'s notes, a blank line before each."""
    return "".join([text, *(f"\n\n{NOTE_WORDS[n]}" for n in reply.notes)])
