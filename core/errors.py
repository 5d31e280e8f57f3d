"""Errors that say who is at fault and what happens next.

* :class:`PlanError` – the LLM wrote a bad plan; the agent re-asks it once
  with the message.
* :class:`ConfigError` – the operator's setup is wrong; the message says how
  to fix it.
* :class:`TaskFailed` – one expert call failed; the executor tries the next
  candidate, then skips the task's dependents.
* :class:`RunFailed` – the request cannot be completed (the user is told).
* :class:`InputRejected` – the person's input is not acceptable (size, type,
  a command they may not use).

``RunFailed`` and ``InputRejected`` carry data, not sentences: a
:class:`Code` and :class:`ErrorFields` (the file, its size, the limit, the
task …).  ``str(err)`` words them in plain English for logs and the
conversation history, from the one table here (:data:`_WORDS`, the core's
codes); the adapters' own codes and the user-facing rendering are in
``adapters/chat/messages.py``.  ``raise InputRejected(ErrorCode.FILE_EMPTY,
file=name)``; ``err.code``, ``err.fields["file"]``.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from enum import StrEnum
from typing import TypedDict, Unpack


class BotError(Exception):
    """Base of the project's own errors."""


class PlanError(BotError):
    """The LLM's plan could not be parsed or validated (retry with the model)."""


class ConfigError(BotError):
    """The operator's configuration is wrong or missing; the text says the fix."""


class TaskFailed(BotError):
    """An expert could not produce a result for one task.

    ``retryable``: the same model may work if asked again later.  ``final``:
    no other model or backend can help either (the input or the account is
    at fault), so the executor stops trying candidates.
    """

    def __init__(self, message: str, *, retryable: bool = True, final: bool = False) -> None:
        super().__init__(message)
        self.retryable = retryable
        self.final = final


# ------------------------------------------------------------ codes and fields


class ErrorFields(TypedDict, total=False):
    """What an error is about; each code uses a few (see :data:`_WORDS`)."""

    file: str  # a file's name as the person gave it
    size: int  # bytes
    limit: int  # the cap the code is about: bytes, files, characters, pixels
    count: int  # how many there are: files, characters, requests
    width: int  # pixels
    height: int
    seconds: float  # a duration: a cap (MEDIA_TOO_LONG) or the time waited
    allowed: float  # the seconds allowed (LLM_TOO_SLOW)
    attempts: int
    tokens: int | None  # a completion cap (LLM_BUDGET_USED)
    kind: str  # image | audio | video
    format: str  # a file type's extension: "webp"
    content: str  # what the bytes look like, in words: "an HTML page"
    host: str  # a server's host name
    endpoint: str  # the Hub's address
    status: int | None  # an HTTP status (None: none came)
    task: str
    cause: str  # an exception's class name
    source: str  # a platform: "Slack", "Discord"
    value: str  # what the person wrote
    partial: bool  # (LLM_TIMED_OUT) the answer had begun
    reason: str  # an inner error's own words (a PlanError, the planner's failure)
    detail: str  # a sentence worded elsewhere (MESSAGE; LLM_FAILED's older form)
    # quotas
    place: str  # whose quota: "server" or "workspace" (absent: the person's own)
    period: str  # minute | day
    # server settings
    key: str  # a setting's name
    choices: tuple[str, ...]  # what would be accepted: the settings, the tasks
    # the language model's server
    model: str  # a model id
    suggested: str  # a model to try instead
    setting: str  # the deployment's setting to check: "HF_TOKEN", "OPENAI_BASE_URL"
    address: str  # a server's URL as shown (no secret in it)
    hostname: str  # the name looked up
    reach: str  # why a server was not reached: local | name | connect
    url: str  # a page where the operator acts (billing, providers)
    said: str  # the server's own words
    prompt_tokens: int | None
    n_ctx: int | None  # a model's context size in tokens
    estimated: bool  # (LLM_PROMPT_TOO_LONG) prompt_tokens is our estimate


class Code(StrEnum):
    """A kind of error.  Each enum of codes words its own members: the core's
    :class:`ErrorCode` here, the adapters' in ``adapters/chat/messages.py``."""

    def words(self, fields: ErrorFields) -> str:
        raise NotImplementedError(f"no words for {self!r}")


class ErrorCode(Code):
    """What went wrong, for every error and refusal the core words."""

    # an attachment (core.mediatypes; the adapters' downloads and CLI too)
    FILE_TOO_LARGE = "file_too_large"  # file, size (absent: unknown), limit (bytes)
    FILE_EMPTY = "file_empty"  # file
    FILE_NOT_KIND = "file_not_kind"  # file, kind, content
    IMAGE_FORMAT = "image_format"  # file, format
    IMAGE_TOO_LARGE = "image_too_large"  # file, width + height (when known), limit (pixels)
    FILE_DAMAGED = "file_damaged"  # file, format
    MEDIA_TOO_LONG = "media_too_long"  # file, kind, seconds (the cap)
    AUDIO_TOO_DENSE = "audio_too_dense"  # file
    VIDEO_FRAMES_TOO_LARGE = "video_frames_too_large"  # file, limit (pixels)
    # a request or a command
    TOO_MANY_FILES = "too_many_files"  # count, limit
    MESSAGE_TOO_LONG = "message_too_long"  # count, limit (characters)
    MESSAGE_EMPTY = "message_empty"
    USAGE_ADMINS_ONLY = "usage_admins_only"
    SETTINGS_ADMINS_ONLY = "settings_admins_only"
    SETTINGS_NO_SERVER = "settings_no_server"
    BAD_PERIOD = "bad_period"  # value, reason
    PLAN_STALE = "plan_stale"  # reason
    BAD_RATING = "bad_rating"  # value
    UNKNOWN_TASK = "unknown_task"  # value, choices (the tasks)
    # a request over a quota (core.ratelimit.QuotaExceeded)
    QUOTA_REQUESTS = "quota_requests"  # place, limit, period, seconds (until it resets)
    QUOTA_TOKENS = "quota_tokens"  # place, limit (tokens a day), seconds
    # an admin's server setting (core.server_settings.SettingError)
    SETTING_NOT_SERVER = "setting_not_server"  # value
    SETTING_UNKNOWN = "setting_unknown"  # key, choices (the settings)
    SETTING_TASK_LIST = "setting_task_list"  # (allowed_tasks written wrong)
    SETTING_NOT_NUMBER = "setting_not_number"  # key, value
    SETTING_NOT_PINNED = "setting_not_pinned"  # task
    SETTING_INVALID = "setting_invalid"  # reason (the validation's clauses)
    # the run
    NO_PLAN = "no_plan"  # reason (the planner's, when it gave one)
    SHUTTING_DOWN = "shutting_down"  # a new request while the process stops
    STORE_DOWN = "store_down"
    GAVE_UP = "gave_up"  # attempts
    EVAL_ABORTED = "eval_aborted"  # count, reason
    HUB_HTTP = "hub_http"  # endpoint, status, task
    HUB_UNREACHABLE = "hub_unreachable"  # endpoint, cause
    HUB_UNREADABLE = "hub_unreadable"  # endpoint, task
    LLM_TOO_SLOW = "llm_too_slow"  # host, seconds, attempts, allowed
    LLM_TIMED_OUT = "llm_timed_out"  # host, seconds, attempts, partial
    LLM_UNREADABLE = "llm_unreadable"  # host, cause (or detail)
    LLM_NO_ANSWER = "llm_no_answer"  # host
    LLM_NO_MODEL = "llm_no_model"  # host
    LLM_BUDGET_USED = "llm_budget_used"  # host, tokens
    LLM_BROKE_OFF = "llm_broke_off"  # host, cause
    LLM_PROMPT_TOO_LONG = "llm_prompt_too_long"  # host, prompt_tokens, n_ctx, estimated
    # an SDK failure (core.llm): attempts + seconds when it was retried
    LLM_PROXY = "llm_proxy"  # host
    LLM_UNREACHABLE = "llm_unreachable"  # host, reach, address, setting, hostname
    LLM_UNKNOWN_MODEL = "llm_unknown_model"  # host, model, suggested + url (HF router)
    LLM_KEY_REJECTED = "llm_key_rejected"  # host, setting
    LLM_PAYMENT = "llm_payment"  # host, url (HF router: where to top up)
    LLM_QUOTA_USED = "llm_quota_used"  # host
    LLM_RATE_LIMITED = "llm_rate_limited"  # host
    LLM_HTTP = "llm_http"  # host, status, said
    LLM_FAILED = "llm_failed"  # host, cause (older: detail)
    # worded by the raiser (a plain string given instead of a code)
    MESSAGE = "message"  # detail

    def words(self, fields: ErrorFields) -> str:
        return _WORDS[self](fields)


class _Coded(BotError):
    """An error that carries a :class:`Code` and its :class:`ErrorFields`.

    A plain string is still taken (``InputRejected("…")``): it becomes
    :attr:`ErrorCode.MESSAGE` with the string as its ``detail`` (no code in
    this code base does so: ``tests/core/test_error_codes.py``)."""

    code: Code
    fields: ErrorFields

    def __init__(self, code: Code | str, /, **fields: Unpack[ErrorFields]) -> None:
        if not isinstance(code, Code):
            code, fields = ErrorCode.MESSAGE, {"detail": code}
        super().__init__(code)
        self.code = code
        self.fields = fields

    def __str__(self) -> str:
        return self.code.words(self.fields)


class RunFailed(_Coded):
    """The whole request failed; ``str()`` is what the user is told."""


class InputRejected(_Coded):
    """A user's input (attachment, text, command) was refused; ``str()`` says why."""


def wording(code: Code, /, **fields: Unpack[ErrorFields]) -> str:
    """The English for ``code`` with ``fields`` (what ``str(err)`` says)."""
    return code.words(fields)


# ---------------------------------------------------------------- the words


def format_size(n: int) -> str:
    """Bytes as people read them: ``31.2 MB``, ``25 MB``, ``900 KB``."""
    for unit, scale in (("GB", 1 << 30), ("MB", 1 << 20), ("KB", 1 << 10)):
        if n >= scale:
            return f"{n / scale:.1f}".removesuffix(".0") + f" {unit}"
    return f"{n} bytes"


def format_duration(seconds: float) -> str:
    """``10 min``, ``2 min 30 s``, ``45 s``."""
    total = round(seconds)
    minutes, secs = divmod(total, 60)
    if not minutes:
        return f"{secs} s"
    return f"{minutes} min" + (f" {secs} s" if secs else "")


def format_seconds(seconds: float) -> str:
    """``45 s`` from ten seconds on, ``0.3 s`` or ``2 s`` below."""
    if seconds >= 10:
        return f"{seconds:.0f} s"
    return f"{round(seconds, 1):g} s"


def _waited(f: ErrorFields) -> str:
    """``45 s (2 attempts)``; ``45 s`` when no attempts are counted."""
    if "attempts" not in f:
        return format_seconds(f["seconds"])
    n = f["attempts"]
    return f"{format_seconds(f['seconds'])} ({n} attempt{'' if n == 1 else 's'})"


def _too_large(f: ErrorFields) -> str:
    if "size" not in f:
        return f"{f['file']} is larger than the limit of {format_size(f['limit'])}"
    return f"{f['file']} is {format_size(f['size'])}; the limit is {format_size(f['limit'])}"


def _not_kind(f: ErrorFields) -> str:
    kind, content = f["kind"], f["content"]
    if kind == "image":
        return f"{f['file']} is not an image: its content looks like {content}"
    article = "an" if kind[0] in "aeiou" else "a"
    return f"{f['file']} is not {article} {kind} file: its content looks like {content}"


def _image_too_large(f: ErrorFields) -> str:
    if "width" not in f:
        return (
            f"{f['file']} is too large in pixels (at most {f['limit']:,} are accepted); "
            "send a smaller image"
        )
    return (
        f"{f['file']} is {f['width']}×{f['height']} pixels; at most {f['limit']:,} are "
        "accepted, send a smaller image"
    )


def _too_long(f: ErrorFields) -> str:
    cap = format_duration(f["seconds"])
    return (
        f"{f['file']} is longer than {cap}; {f['kind']} of up to {cap} is accepted, "
        "send a shorter clip"
    )


def _count(n: int, noun: str) -> str:
    return f"{n:,} {noun}{'' if n == 1 else 's'}"


def _reset_in(seconds: float) -> str:
    """``5 h 12 min``, ``12 min``, ``31 s``."""
    whole = math.ceil(seconds)
    if whole < 60:
        return f"{whole} s"
    hours, minutes = divmod(math.ceil(whole / 60), 60)
    return f"{hours} h {minutes} min" if hours else f"{minutes} min"


def _quota(f: ErrorFields) -> str:
    """``You have used your 20 requests this minute; try again in 31 s.``"""
    place = f.get("place")
    who, whose = (f"This {place} has", "its") if place else ("You have", "your")
    limit, wait = f["limit"], f["seconds"]
    if "period" not in f:  # QUOTA_TOKENS
        return (
            f"{who} used {whose} daily budget of {_count(limit, 'LLM token')}; "
            f"it resets at 00:00 UTC (in {_reset_in(wait)})."
        )
    requests = _count(limit, "request")
    if f["period"] == "minute":
        return f"{who} used {whose} {requests} this minute; try again in {math.ceil(wait)} s."
    return (
        f"{who} used {whose} {requests} for today; "
        f"{'they reset' if limit > 1 else 'it resets'} at 00:00 UTC (in {_reset_in(wait)})."
    )


def _llm(f: ErrorFields) -> str:
    return f"The language model at {f['host']}"


def _prompt_too_long(f: ErrorFields) -> str:
    prompt, n_ctx = f.get("prompt_tokens"), f.get("n_ctx")
    about = "about " if f.get("estimated") else ""
    if prompt and n_ctx:
        sizes = f": the prompt is {about}{prompt} tokens but its context holds {n_ctx}"
    elif n_ctx:
        sizes = f": its context holds {n_ctx} tokens"
    else:
        sizes = ""
    return (
        f"The request is too long for the language model at {f['host']}{sizes}. "
        "Use a model or server with a larger context (llama-server: --ctx-size), "
        "or start a new conversation."
    )


def _unreached(f: ErrorFields) -> str:
    """For a server that could not be reached: the likely causes and the
    setting to check, worded by where it is ("" when ``reach`` is absent)."""
    reach = f.get("reach")
    if reach is None:
        return ""
    if reach == "local":
        return (
            ". Is its server running? Start it (llama-server, vllm serve, ollama serve), "
            f"or set {f['setting']} to the address it listens on (now {f['address']})"
        )
    if reach == "name":
        cause = f"the name {f['hostname']} could not be looked up"
    else:
        cause = "the connection failed"
    return (
        f". Likely causes: no network here ({cause}), a proxy this process was not "
        f"told of (set HTTPS_PROXY), or a wrong address ({f['address']}; check {f['setting']})"
    )


def _through_proxy(f: ErrorFields) -> str:
    return (
        ": the proxy HTTPS_PROXY names could not be used or refused the connection "
        "(check HTTPS_PROXY, and NO_PROXY for addresses reached directly)"
    )


def _sdk(
    words: Callable[[ErrorFields], str],
    advice: Callable[[ErrorFields], str] = _unreached,
) -> Callable[[ErrorFields], str]:
    """An SDK failure's words, then the attempts it took when it was
    retried (`` (3 attempts in 2.5 s)``), then what to check (``advice``)."""

    def worded(f: ErrorFields) -> str:
        retried = ""
        if "attempts" in f and "seconds" in f:
            retried = f" ({f['attempts']} attempts in {format_seconds(f['seconds'])})"
        return words(f) + retried + advice(f)

    return worded


def _unknown_model(f: ErrorFields) -> str:
    hint = (
        f" (a model Inference Providers serve, e.g. {f['suggested']}, or enable a "
        f"provider for it at {f['url']})"
        if "suggested" in f
        else ""
    )
    return f"{_llm(f)} does not know model {f['model']} (check LLM_MODEL): set LLM_MODEL{hint}"


def _payment(f: ErrorFields) -> str:
    if "url" in f:
        return (
            f"{_llm(f)}: the Hugging Face credits for Inference Providers are used up "
            f"(HTTP 402); top up at {f['url']}, or set OPENAI_API_KEY"
        )
    return f"{_llm(f)} refused: payment required (HTTP 402); check the account's credits"


def _http(f: ErrorFields) -> str:
    said = f.get("said")
    return f"{_llm(f)} returned an error (HTTP {f['status']}){': ' if said else ''}{said or ''}"


def _llm_failed(f: ErrorFields) -> str:
    if "detail" in f:  # the older form: a sentence core.llm worded
        return f["detail"]
    return f"{_llm(f)} failed ({f['cause']})"


def _unreadable(f: ErrorFields) -> str:
    why = f" ({f['cause']})" if "cause" in f else ""
    return f"{_llm(f)} sent an answer that could not be read{why}"


_WORDS: dict[ErrorCode, Callable[[ErrorFields], str]] = {
    ErrorCode.FILE_TOO_LARGE: _too_large,
    ErrorCode.FILE_EMPTY: lambda f: f"{f['file']} is empty",
    ErrorCode.FILE_NOT_KIND: _not_kind,
    ErrorCode.IMAGE_FORMAT: lambda f: (
        f"{f['file']} is a {f['format'].upper()} image, which can't be read here; "
        "send it as PNG or JPEG"
    ),
    ErrorCode.IMAGE_TOO_LARGE: _image_too_large,
    ErrorCode.FILE_DAMAGED: lambda f: (
        f"{f['file']} could not be read as {f['format'].upper()}: the file is damaged or truncated"
    ),
    ErrorCode.MEDIA_TOO_LONG: _too_long,
    ErrorCode.AUDIO_TOO_DENSE: lambda f: (
        f"{f['file']} holds too much sound data to process (very many channels or a very "
        "high sample rate); send it as ordinary stereo audio"
    ),
    ErrorCode.VIDEO_FRAMES_TOO_LARGE: lambda f: (
        f"{f['file']} has frames of more than {f['limit']:,} pixels; send a smaller video"
    ),
    ErrorCode.TOO_MANY_FILES: lambda f: (
        f"That is {f['count']} files; I take at most {f['limit']} per message."
    ),
    ErrorCode.MESSAGE_TOO_LONG: lambda f: (
        f"Your message is {f['count']:,} characters long; the limit is {f['limit']:,}. "
        "Attach long documents as a .txt file or shorten the message."
    ),
    ErrorCode.MESSAGE_EMPTY: lambda f: (
        "Your message is empty: tell me what you would like me to do."
    ),
    ErrorCode.USAGE_ADMINS_ONLY: lambda f: (
        "Only the server's admins can see the whole server's usage."
    ),
    ErrorCode.SETTINGS_ADMINS_ONLY: lambda f: "Only the server's admins can change its settings.",
    ErrorCode.SETTINGS_NO_SERVER: lambda f: (
        "Settings are per server: there is none here (a direct message)."
    ),
    ErrorCode.BAD_PERIOD: lambda f: f["reason"],  # core.usage.parse_since words it
    ErrorCode.PLAN_STALE: lambda f: f"That plan cannot run here any more: {f['reason']}",
    ErrorCode.BAD_RATING: lambda f: f"feedback is 'good' or 'bad', not {f['value']!r}",
    ErrorCode.UNKNOWN_TASK: lambda f: (
        f"unknown task {f['value']!r}; the tasks are: {', '.join(f['choices'])}"
    ),
    ErrorCode.QUOTA_REQUESTS: _quota,
    ErrorCode.QUOTA_TOKENS: _quota,
    ErrorCode.SETTING_NOT_SERVER: lambda f: (
        f"{f['value']!r} is not a server: write PLATFORM:ID, e.g. discord:123456789012345678, "
        "slack:T0123ABCD or cli:local"
    ),
    ErrorCode.SETTING_UNKNOWN: lambda f: (
        f"unknown setting {f['key']!r}; the settings are: {', '.join(f['choices'])}"
    ),
    ErrorCode.SETTING_TASK_LIST: lambda f: (
        "allowed_tasks: give task names separated by commas "
        "(e.g. text-to-image,image-classification), or none"
    ),
    ErrorCode.SETTING_NOT_NUMBER: lambda f: (
        f"{f['key']}: {f['value']!r} is not a whole number (0 turns the quota off)"
    ),
    ErrorCode.SETTING_NOT_PINNED: lambda f: f"no model is pinned for {f['task']}",
    ErrorCode.SETTING_INVALID: lambda f: f["reason"],  # pydantic's validation, per key
    ErrorCode.NO_PLAN: lambda f: f.get("reason") or "I could not turn your request into a plan.",
    ErrorCode.SHUTTING_DOWN: lambda f: (
        "I'm restarting right now; please send that again in a minute."
    ),
    ErrorCode.STORE_DOWN: lambda f: (
        "I can't reach the conversation history database right now, so I can't work on this "
        "safely. Please try again in a moment."
    ),
    ErrorCode.GAVE_UP: lambda f: (
        f"I could not finish this after {f['attempts']} attempts; please send it again."
    ),
    ErrorCode.EVAL_ABORTED: lambda f: (
        f"the language model failed on the first {f['count']} requests, stopping: {f['reason']}"
    ),
    ErrorCode.HUB_HTTP: lambda f: (
        f"the Hub at {f['endpoint']} answered HTTP {f['status']} while listing {f['task']} "
        "models; try again later"
    ),
    ErrorCode.HUB_UNREACHABLE: lambda f: (
        f"could not reach the Hub at {f['endpoint']} ({f['cause']}); "
        "check the network or HF_ENDPOINT"
    ),
    ErrorCode.HUB_UNREADABLE: lambda f: (
        f"the Hub at {f['endpoint']} sent an unreadable model list for {f['task']}"
    ),
    ErrorCode.LLM_TOO_SLOW: lambda f: (
        f"{_llm(f)} took too long: {_waited(f)} of the {format_seconds(f['allowed'])} allowed"
    ),
    ErrorCode.LLM_TIMED_OUT: lambda f: (
        f"{_llm(f)} did not {'finish its answer' if f.get('partial') else 'answer'} "
        f"within {_waited(f)}{_unreached(f)}"
    ),
    ErrorCode.LLM_UNREADABLE: _unreadable,
    ErrorCode.LLM_NO_ANSWER: lambda f: f"{_llm(f)} returned no answer",
    ErrorCode.LLM_NO_MODEL: lambda f: (
        f"The language model server at {f['host']} lists no model: set LLM_MODEL"
    ),
    ErrorCode.LLM_BUDGET_USED: lambda f: (
        f"{_llm(f)} used its whole budget of {f['tokens']} completion tokens without "
        "writing an answer (lower LLM_REASONING_EFFORT, or use another model)"
    ),
    ErrorCode.LLM_BROKE_OFF: lambda f: (
        f"{_llm(f)} stopped in the middle of its answer ({f['cause']})"
    ),
    ErrorCode.LLM_PROMPT_TOO_LONG: _prompt_too_long,
    ErrorCode.LLM_PROXY: _sdk(
        lambda f: f"{_llm(f)} could not be reached through the proxy", _through_proxy
    ),
    ErrorCode.LLM_UNREACHABLE: _sdk(lambda f: f"{_llm(f)} could not be reached"),
    ErrorCode.LLM_UNKNOWN_MODEL: _sdk(_unknown_model),
    ErrorCode.LLM_KEY_REJECTED: _sdk(
        lambda f: f"{_llm(f)} rejected the API key (check {f['setting']})"
    ),
    ErrorCode.LLM_PAYMENT: _sdk(_payment),
    ErrorCode.LLM_QUOTA_USED: _sdk(
        lambda f: f"{_llm(f)} says the account's quota is used up (HTTP 429); check its billing"
    ),
    ErrorCode.LLM_RATE_LIMITED: _sdk(
        lambda f: f"{_llm(f)} is rate limiting us (HTTP 429); try again in a moment"
    ),
    ErrorCode.LLM_HTTP: _sdk(_http),
    ErrorCode.LLM_FAILED: _sdk(_llm_failed),
    ErrorCode.MESSAGE: lambda f: f["detail"],
}


# ------------------------------------------------------------ other errors


class StoreUnavailable(BotError):
    """The database could not be reached or written."""


class StoreRejected(BotError):
    """The database refused a value (too long, out of range, a character or a
    constraint it does not take): the data is at fault, not the database, so
    this is never reported as "unavailable".  The store normalises values
    before writing, and saves a turn in a plainer shape rather than raise
    this; it surfaces only when even that is refused."""


class LeaseLost(BaseException):
    """This process no longer holds the request's job (its lease ran out and
    another process took it over): stop working on it and post nothing.

    A BaseException on purpose, like :class:`asyncio.CancelledError`: the
    adapters' ``except Exception`` handlers that turn failures into an apology
    for the user must not catch it (the new holder will answer)."""


class StoreConflict(BotError):
    """A turn's file handle is already taken in its conversation.  Turns of one
    conversation run one at a time (the job queue), so this is a bug, and the
    store refuses rather than rename a file the answer already named."""
