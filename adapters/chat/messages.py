"""What a person reads when a request is refused or fails, for every platform.

Errors carry data: a code and its fields (:mod:`core.errors`).  The core's
codes (:class:`~core.errors.ErrorCode`) are worded once, in core.errors'
table, which ``str(err)`` uses for logs and the conversation history; the
adapters' own refusals (downloads, platforms' files, the terminal's paths)
have their codes and words here (:class:`ChatCode`).  :func:`error_text` is
what the person is shown for any of them; a platform that wants another
form (an embed, a block, another language) starts from ``err.code`` and
``err.fields`` here.

The fixed messages (restarting, sorry, busy) are here too; the status
message's own words are in :mod:`adapters.chat.render`.
"""

from __future__ import annotations

from collections.abc import Callable

from core.errors import Code, ErrorFields, InputRejected, RunFailed

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

    def words(self, fields: ErrorFields) -> str:
        return _WORDS[self](fields)


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


def error_text(err: InputRejected | RunFailed) -> str:
    """What the person is told for ``err``: its code's words with its fields
    (for the core's codes the same English as its log line)."""
    return err.code.words(err.fields)
