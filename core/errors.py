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

``RunFailed``, ``InputRejected`` and ``TaskFailed`` carry data, not sentences: a
:class:`Code` and :class:`ErrorFields` (the file, its size, the limit, the
task …).  ``raise InputRejected(ErrorCode.FILE_EMPTY, file=name)``;
``err.code``, ``err.fields["file"]``.  The core words none of them:
``str(err)`` is a terse, log-friendly form (``file_too_large file='a.png'
size=30000000 limit=26214400``) that logs and the conversation history the
language model reads use; what a person is shown is worded by the adapters
(``adapters/chat/error_words.py`` for these codes, ``error_text`` in
``adapters/chat/messages.py``).  A task's failures (:class:`TaskCode`) reach
the adapters as :class:`core.types.TaskError` values on its task state; the
answer prompt gives each its :attr:`TaskCode.meaning` before the terse form.
"""

from __future__ import annotations

from enum import StrEnum
from typing import TypedDict, Unpack


class BotError(Exception):
    """Base of the project's own errors."""


class PlanError(BotError):
    """The LLM's plan could not be parsed or validated (retry with the model)."""


class ConfigError(BotError):
    """The operator's configuration is wrong or missing; the text says the fix."""


# ------------------------------------------------------------ codes and fields


class SettingProblem(TypedDict):
    """One thing wrong in a server's settings (``SETTING_INVALID``'s ``problems``)."""

    key: str  # the setting ("": the settings as a whole)
    code: str  # an ErrorCode value
    fields: ErrorFields


class ErrorFields(TypedDict, total=False):
    """What an error is about; each code uses a few (see :class:`ErrorCode`)."""

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
    cause: str  # an exception's class name; (NO_PLAN) loop | length | emptied | invalid
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
    request: str  # a request's id (CRASHED)
    problems: tuple[SettingProblem, ...]  # (SETTING_INVALID) one per bad key
    # a task's failure (TaskCode)
    expected: str  # the kind a task makes or takes: image | audio | video | text
    got: str  # what came instead (OUTPUT_WRONG_KIND: a word of TaskCode's comment)
    part: str  # a result's part: labels | answer | segments | boxes | entities | text …
    dependency: int  # another task's id
    provider: str  # an inference provider
    path: str  # a directory on this machine (LOCAL_MODELS_DIR, a model's)
    cache: str  # the Hugging Face cache's directory
    free: int  # bytes free on a disk
    max_gb: float  # LOCAL_DOWNLOAD_MAX_GB
    inner: InnerError  # (LOCAL_NOT_AVAILABLE) why it could not be fetched either


class InnerError(TypedDict):
    """An error inside another's fields: its code (a value) and fields."""

    code: str
    fields: ErrorFields


class Code(StrEnum):
    """A kind of error: the core's :class:`ErrorCode` here, the adapters' own
    in ``adapters/chat/messages.py``.  Codes carry no words for people (the
    adapters word them); a :class:`TaskCode` has a short meaning for the
    answer's language model."""


class ErrorCode(Code):
    """What went wrong, for every error and refusal the core raises."""

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
    BAD_PERIOD = "bad_period"  # value
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
    SETTING_INVALID = "setting_invalid"  # problems (one per bad key)
    SETTING_NOT_MODEL_NAME = "setting_not_model_name"  # value (llm_model)
    SETTING_NOT_MODEL_ID = "setting_not_model_id"  # value (a pinned model)
    SETTING_NOT_LANGUAGE = "setting_not_language"  # value
    SETTING_PIN_BARRED = "setting_pin_barred"  # choices (pinned tasks allowed_tasks leaves out)
    SETTING_PIN_NOT_SERVED = "setting_pin_not_served"  # model, task, choices (its top models)
    # the run
    NO_PLAN = "no_plan"  # cause (loop | length | emptied | invalid), reason (the plan check's)
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
    LLM_EMPTY_ANSWER = "llm_empty_answer"  # (the answer: the fallback is given instead)
    LLM_ECHOED = "llm_echoed"  # the answer repeated its instructions (the fallback, too)
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
    # a bug: the turn crashed (the trace is in the log under the request's id)
    CRASHED = "crashed"  # request
    # worded by the raiser (a plain string given instead of a code)
    MESSAGE = "message"  # detail


class TaskCode(Code):
    """Why one task, or one attempt at it on one model, failed (:class:`TaskFailed`).

    ``model`` is the model's id wherever a model was asked.  Each code has a
    :attr:`meaning`: what happened, in a few plain words, for the answer's
    language model (the answer prompt shows it before the terse form: small
    models said what failed more often with it, ``docs/answer-errors.md``);
    it is prompt text, not what a person reads, which the adapters word from
    the code and its fields."""

    meaning: str

    def __new__(cls, value: str, meaning: str = "") -> TaskCode:  # (no meaning: a look-up)
        member = str.__new__(cls, value)
        member._value_ = value
        member.meaning = meaning
        return member

    # what the model returned (core.outputs): expected is the kind the task makes
    OUTPUT_UNKNOWN_KIND = (
        "output_unknown_kind",
        "the model's file was of a kind the bot does not know",
    )  # model, kind
    # model, expected, got: empty | html | json_error | json | xml | text | unknown |
    # not_media | no_video | damaged (format) | media (format, kind) | document (format)
    OUTPUT_WRONG_KIND = (
        "output_wrong_kind",
        "the model returned something other than what the task makes",
    )
    OUTPUT_IMAGE_TOO_LARGE = (
        "output_image_too_large",
        "the model returned an image too big to open",
    )  # model, limit, width + height (when known)
    OUTPUT_IMAGE_DAMAGED = (
        "output_image_damaged",
        "the model's image was broken",
    )  # model, format
    OUTPUT_NOT_TEXT = "output_not_text", "the model's text was not readable text"  # model
    OUTPUT_BAD_SHAPE = "output_bad_shape", "the model's result was malformed"  # model, part
    OUTPUT_BAD_MASK = "output_bad_mask", "the model returned an unreadable segment mask"  # model
    OUTPUT_MISSING = (
        "output_missing",
        "the model's result lacked a part the task needs",
    )  # model, part, got (a kind it returned instead)
    # the task's inputs (core.inputs, core.stages)
    INPUT_NOT_MADE = (
        "input_not_made",
        "an earlier task did not make the input this task needs",
    )  # dependency, task (its task), kind
    INPUT_WRONG_KIND = (
        "input_wrong_kind",
        "the input file is of the wrong kind for this task",
    )  # file, kind
    NO_SUCH_FILE = "no_such_file", "the file the task names does not exist"  # file
    STORED_FILE_MISSING = "stored_file_missing", "a stored file is gone"  # file
    NEEDS_INPUT = (
        "needs_input",
        "the task was given no input of the kind it needs",
    )  # task, kind: text | image | audio | question
    NEEDS_ARGUMENT = (
        "needs_argument",
        "the task lacks an argument it needs",
    )  # kind (local pipelines)
    INPUT_UNREADABLE = "input_unreadable", "the input was unreadable"  # kind, said
    QA_NEEDS_CONTEXT = (
        "qa_needs_context",
        "question answering was not given both a question and a context",
    )  # (the question, a newline, the context)
    QA_NEEDS_LINES = (
        "qa_needs_lines",
        "question answering was not given both a question and a context",
    )  # (local: 'question\ncontext')
    TABLE_NEEDED = (
        "table_needed",
        "the task needs a table (CSV) and got none",
    )  # (tabular-classification's CSV)
    # the run of the graph (core.execution)
    SKIPPED = "skipped", "not run, because a task it needs failed"  # dependency, task (its task)
    NO_MODEL = "no_model", "there is no model for this task"  # (no candidate for the task)
    NO_MODEL_RAN = "no_model_ran", "none of the models could run it"
    NO_BACKEND = "no_backend", "nothing here can run this model"  # model
    TIMED_OUT = "timed_out", "the model took too long to answer"  # model, seconds
    EXPERT_CRASHED = (
        "expert_crashed",
        "the model call broke with an unexpected error",
    )  # model, cause
    # a hosted call (core.experts.remote, providers)
    NOT_ON_TASK_API = (
        "not_on_task_api",
        "this task cannot be run through the hosted task API",
    )  # task
    SERVICE_UNREACHABLE = (
        "service_unreachable",
        "the model's service was unreachable",
    )  # model, cause
    RESPONSE_UNREADABLE = (
        "response_unreadable",
        "the model's response was unreadable",
    )  # model, cause
    MODEL_HTTP = (
        "model_http",
        "the model's server answered with an HTTP error",
    )  # model, status (402: url)
    REDIRECTED_AWAY = (
        "redirected_away",
        "the model's server sent the call elsewhere; it was not followed",
    )  # address, host
    PROVIDER_NOT_SERVING = (
        "provider_not_serving",
        "the inference provider does not run this model",
    )  # model, provider, task, choices
    NO_PROVIDER = "no_provider", "no inference provider runs this model"  # model, task (when known)
    NOT_LIVE_FOR_CHAT = (
        "not_live_for_chat",
        "no provider runs this model for chat",
    )  # model (no live conversational mapping)
    MODEL_GATED = "model_gated", "the model is gated: its terms must be accepted first"  # model
    MODEL_GONE = "model_gone", "the model no longer exists"  # model
    HUB_TOKEN_REFUSED = "hub_token_refused", "the Hub refused the bot's token"  # model, status
    HUB_LOOKUP_HTTP = (
        "hub_lookup_http",
        "the Hub could not say who runs this model",
    )  # model, status
    HUB_LOOKUP_UNREACHABLE = (
        "hub_lookup_unreachable",
        "the Hub was unreachable",
    )  # model, cause
    # local inference (core.experts.local*)
    NOT_LOADABLE = (
        "not_loadable",
        "the model cannot be loaded here",
    )  # model (no config.json or model_index.json)
    NO_TORCH_WEIGHTS = "no_torch_weights", "the model has no weights that can run here"  # model
    DOWNLOADS_OFF = "downloads_off", "model downloads are turned off"
    NOT_REPO_ID = "not_repo_id", "the model's name is no Hub id"  # model
    OFFLINE = (
        "offline",
        "the bot is offline and cannot download the model",
    )  # model (absent: the one named before)
    NOT_ALLOWED = (
        "not_allowed",
        "the model may not be downloaded here",
    )  # model, choices (LOCAL_DOWNLOAD_ALLOW)
    NO_COMMIT = "no_commit", "the Hub gave no version of the model"  # model
    DOWNLOAD_TOO_LARGE = (
        "download_too_large",
        "the model is too big to download here",
    )  # model, size, max_gb
    DISK_FULL = "disk_full", "the disk has no room for the model"  # model, size, free, path
    DOWNLOAD_INCOMPLETE = (
        "download_incomplete",
        "the model's download is not finished",
    )  # model, count, file
    DOWNLOAD_GATED = "download_gated", "the model is gated and may not be downloaded"  # model
    DOWNLOAD_NOT_FOUND = (
        "download_not_found",
        "the model was not found to download",
    )  # model, endpoint
    DOWNLOAD_REFUSED = "download_refused", "the Hub refused the download"  # model, status
    DOWNLOAD_HTTP = "download_http", "the download failed with an HTTP error"  # model, status
    DOWNLOAD_UNREACHABLE = (
        "download_unreachable",
        "the Hub was unreachable for the download",
    )  # model, endpoint, said
    DOWNLOAD_FAILED = "download_failed", "the model's download failed"  # model, said
    LOCAL_NOT_AVAILABLE = (
        "local_not_available",
        "the model is not on this machine and could not be fetched",
    )  # model, path, cache, inner
    LOCAL_CANNOT_RUN = "local_cannot_run", "this machine cannot run this task"  # task
    LOCAL_NEEDS_TORCH = (
        "local_needs_torch",
        "this machine lacks the libraries to run this task",
    )  # task
    LOCAL_FAILED = (
        "local_failed",
        "the model failed while running on this machine",
    )  # task, model, said
    LOAD_FAILED = "load_failed", "the model could not be loaded"  # model, path, said
    HELPER_MISSING = (
        "helper_missing",
        "a helper model the task needs is missing",
    )  # kind, task (the helper's), model, setting
    BASE_MISSING = "base_missing", "the base model the task needs is missing"  # model
    NEEDS_TESSERACT = "needs_tesseract", "the OCR tool this model needs is not installed"
    NO_ANSWER_FOUND = "no_answer_found", "the model found no answer"
    SPEECHT5_UNSUPPORTED = "speecht5_unsupported", "this speech model cannot run here"


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
        return terse(self.code, self.fields)


class RunFailed(_Coded):
    """The whole request failed (the adapters tell the user why)."""


class InputRejected(_Coded):
    """A user's input (attachment, text, command) was refused (the adapters say why)."""


class TaskFailed(_Coded):
    """An expert could not produce a result for one task: a :class:`TaskCode`
    and its fields (``TaskFailed(TaskCode.TIMED_OUT, model=m, seconds=30)``).

    ``retryable``: the same model may work if asked again later.  ``final``:
    no other model or backend can help either (the input or the account is
    at fault), so the executor stops trying candidates.
    """

    def __init__(
        self,
        code: Code | str,
        /,
        *,
        retryable: bool = True,
        final: bool = False,
        **fields: Unpack[ErrorFields],
    ) -> None:
        super().__init__(code, **fields)
        self.retryable = retryable
        self.final = final


def terse(code: Code, fields: ErrorFields) -> str:
    """``code`` and ``fields`` in one line, for logs and the language model:
    ``file_too_large file='a.png' size=30000000 limit=26214400``."""
    return " ".join([str(code), *(f"{k}={v!r}" for k, v in fields.items())])


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
