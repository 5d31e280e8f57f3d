"""The words of the core's error codes (:class:`core.errors.ErrorCode`, and
a task's failures: :class:`core.errors.TaskCode`, :data:`TASK_WORDS`).

The core's errors carry a code and its fields, never a sentence; this is
the one table that words them for a person, with the helpers that write
sizes and durations as people read them.  :func:`adapters.chat.messages.error_text`
is the entry point (it also words the adapters' own codes); a platform that
wants another form (an embed, a block, another language) starts from the
code and the fields as this table does.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any, cast

from core.errors import ErrorCode, ErrorFields, SettingProblem, TaskCode


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


_STRONGER = "set LLM_MODEL to a stronger model"


def _no_plan(f: ErrorFields) -> str:
    """Why there is no plan (``cause``: what the planner saw; ``reason``:
    the plan check's words; neither: no plan, nothing more known)."""
    cause, why = f.get("cause"), f.get("reason", "")
    if cause == "loop":
        return (
            "The language model kept repeating itself instead of writing a plan, so I "
            f"stopped it (twice). This model is too weak to plan: {_STRONGER}."
        )
    if cause == "length":
        return (
            "The language model kept writing past the length a plan needs, so I stopped it "
            f"(twice). This model is too weak to plan: {_STRONGER}."
        )
    if cause == "emptied":
        return (
            "I could not turn your request into a workable plan (the language model's "
            f"plan was invalid: {why} Asked to correct it, it answered with no task at "
            "all.) Try rephrasing it, or name the files to use."
        )
    if cause == "invalid":
        return (
            "I could not turn your request into a workable plan "
            f"(the language model's plan was invalid twice: {why}) "
            f"Try rephrasing it, or name the files to use; or {_STRONGER}."
        )
    return why or "I could not turn your request into a plan."


def _problem(p: SettingProblem) -> str:
    """One bad setting: ``allowed_tasks: unknown task 'x'; the tasks are: …``."""
    words = CORE_WORDS[ErrorCode(p["code"])](p["fields"])
    return f"{p['key']}: {words}" if p["key"] else words


CORE_WORDS: dict[ErrorCode, Callable[[ErrorFields], str]] = {
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
    ErrorCode.BAD_PERIOD: lambda f: (
        f"{f['value']!r} is not a period: use e.g. 30m, 12h, 7d, 2w, or a date such as 2026-08-01"
    ),
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
    ErrorCode.SETTING_INVALID: lambda f: "; ".join(_problem(p) for p in f["problems"]),
    ErrorCode.SETTING_NOT_MODEL_NAME: lambda f: (
        f"{f['value']!r} is not a model name (e.g. openai/gpt-oss-120b, gpt-5-mini)"
    ),
    ErrorCode.SETTING_NOT_MODEL_ID: lambda f: (
        f"{f['value']!r} is not a model id (e.g. facebook/detr-resnet-50)"
    ),
    ErrorCode.SETTING_NOT_LANGUAGE: lambda f: (
        f"{f['value']!r} is not a language: name one (e.g. French, Deutsch, 日本語) or give "
        "its code (fr, pt-BR): at most 3 words, 40 letters"
    ),
    ErrorCode.SETTING_PIN_BARRED: lambda f: (
        f"a model is pinned for {', '.join(f['choices'])}, which allowed_tasks leaves out: "
        "unset the pin or allow the task"
    ),
    ErrorCode.SETTING_PIN_NOT_SERVED: lambda f: (
        f"{f['model']} does not serve {f['task']} in the model catalog "
        f"(its most downloaded models for {f['task']}: {', '.join(f['choices']) or 'none'})"
    ),
    ErrorCode.NO_PLAN: _no_plan,
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
    ErrorCode.LLM_EMPTY_ANSWER: lambda f: "the language model gave an empty answer",
    ErrorCode.LLM_ECHOED: lambda f: (
        "the language model repeated its instructions instead of answering"
    ),
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
    ErrorCode.CRASHED: lambda f: (
        f"Something went wrong on my side (request {f['request']}). The details are in the log."
    ),
    ErrorCode.MESSAGE: lambda f: f["detail"],
}


# ------------------------------------------------------------ a task's failures

_NOUN = {"image": "an image", "audio": "audio", "video": "a video", "text": "text"}
_GOT = {
    "empty": "an empty response",
    "html": "an HTML page",
    "json_error": "an error message (JSON)",
    "json": "JSON data",
    "xml": "an XML document",
    "text": "plain text",
    "unknown": "data of no known type",
    "no_video": "a file with no video in it",
}
_MEDIA_NOUN = {"image": "image", "audio": "audio file", "video": "video"}
_NEEDS = {"text": "a text", "image": "an image", "audio": "an audio file", "question": "a question"}


def _article(word: str) -> str:
    return "an" if word[:1].upper() in "AEFHILMNORSX" else "a"


def _got(f: ErrorFields) -> str:
    """What a model returned instead of ``expected`` (``got`` and its fields)."""
    got = f["got"]
    if got in _GOT:
        return _GOT[got]
    if got == "damaged":
        return f"a damaged {f['format'].upper()} file"
    if got == "not_media":
        return f"data that is not {'audio' if f['expected'] == 'audio' else 'a video'}"
    if got == "media":
        ext = f["format"].upper()
        return f"{_article(ext)} {ext} {_MEDIA_NOUN.get(f['kind'], 'file')}"
    return f.get("content", got)  # document: what it looks like


def _missing(f: ErrorFields) -> str:
    part = f["part"]
    if "got" in f:
        return f"model {f['model']} returned {_NOUN.get(f['got'], f['got'])} but no {part}"
    return f"model {f['model']} returned no {part}"


def _image_too_big(f: ErrorFields) -> str:
    where = f"{f['width']}×{f['height']} pixels" if "width" in f else "too many pixels"
    return (
        f"model {f['model']} returned an image too large to open (the image is {where}; "
        f"at most {f['limit']:,} are accepted)"
    )


def _model_http(f: ErrorFields) -> str:
    model, status = f["model"], f.get("status")
    if status == 402:
        return (
            "the Hugging Face account behind HF_TOKEN has used up its Inference Providers "
            f"credits (HTTP 402 for {model}); add credits or a plan at {f['url']}"
        )
    if status == 503:
        return f"model {model} is loading or unavailable (HTTP 503)"
    if status == 429:
        return f"model {model} is rate limited (HTTP 429)"
    if status in (401, 403):
        return f"model {model} refused the credentials (HTTP {status}); check HF_TOKEN"
    if status == 404:
        return f"model {model} is not served by the inference service (HTTP 404)"
    if status == 410:
        return f"the inference service no longer serves {model} (HTTP 410)"
    if status in (400, 413, 422):
        return f"model {model} rejected the input (HTTP {status})"
    if status is not None and status >= 500:
        return f"model {model} failed on the server (HTTP {status})"
    return f"model {model} call failed (HTTP {status})"


def _no_provider(f: ErrorFields) -> str:
    task = f" for {f['task']}" if "task" in f else ""
    return f"no inference provider serves {f['model']}{task}"


def _offline(f: ErrorFields) -> str:
    return f"HF_HUB_OFFLINE=1 forbids downloading {'model ' + f['model'] if 'model' in f else 'it'}"


def _gb(n: float) -> str:
    """Bytes in decimal gigabytes, as the Hub shows a model's size."""
    return f"{n / 1e9:.1f} GB"


def _not_local(f: ErrorFields) -> str:
    inner = f["inner"]
    why = render_task(inner["code"], inner["fields"])
    return (
        f"model {f['model']} is not available locally under LOCAL_MODELS_DIR={f['path']} "
        f"or in the Hugging Face cache ({f['cache']}), and {why}"
    )


TASK_WORDS: dict[TaskCode, Callable[[ErrorFields], str]] = {
    TaskCode.OUTPUT_UNKNOWN_KIND: lambda f: (
        f"model {f['model']} returned a file of an unknown kind ({f['kind']})"
    ),
    TaskCode.OUTPUT_WRONG_KIND: lambda f: (
        f"model {f['model']} returned {_got(f)} instead of {_NOUN[f['expected']]}"
    ),
    TaskCode.OUTPUT_IMAGE_TOO_LARGE: _image_too_big,
    TaskCode.OUTPUT_IMAGE_DAMAGED: lambda f: (
        f"model {f['model']} returned a damaged {f['format'].upper()} image"
    ),
    TaskCode.OUTPUT_NOT_TEXT: lambda f: f"model {f['model']} returned a text that is not text",
    TaskCode.OUTPUT_BAD_SHAPE: lambda f: (
        f"model {f['model']} returned {f['part']} of the wrong shape (missing names, or scores "
        "or coordinates that are not numbers)"
    ),
    TaskCode.OUTPUT_BAD_MASK: lambda f: (
        f"model {f['model']} returned a segment mask that is not a readable image"
    ),
    TaskCode.OUTPUT_MISSING: _missing,
    TaskCode.INPUT_NOT_MADE: lambda f: (
        f"task {f['dependency']} ({f['task']}) produced no {f['kind']} for this task"
    ),
    TaskCode.INPUT_WRONG_KIND: lambda f: (
        f"{f['file']} is not {'an' if f['kind'] == 'audio' else 'a'} {f['kind']}"
    ),
    TaskCode.NO_SUCH_FILE: lambda f: f"there is no file named {f['file']} here",
    TaskCode.STORED_FILE_MISSING: lambda f: f"the stored file {f['file']} is missing",
    TaskCode.NEEDS_INPUT: lambda f: f"{f['task']} needs {_NEEDS[f['kind']]}",
    TaskCode.NEEDS_ARGUMENT: lambda f: (
        f"this task needs {_article(f['kind'])} {f['kind']} argument"
    ),
    TaskCode.INPUT_UNREADABLE: lambda f: f"the {f['kind']} could not be read: {f['said']}",
    TaskCode.QA_NEEDS_CONTEXT: lambda f: (
        "question-answering needs a question and a context ('question\\ncontext')"
    ),
    TaskCode.QA_NEEDS_LINES: lambda f: "question-answering needs 'question\\ncontext'",
    TaskCode.TABLE_NEEDED: lambda f: (
        "tabular-classification needs a CSV table: a header row and rows of the same width"
    ),
    # the task's icon, card or line says it was skipped: these words say why
    TaskCode.SKIPPED: lambda f: f"task {f['dependency']} ({f['task']}) did not succeed",
    TaskCode.NO_MODEL: lambda f: "no model available for this task",
    TaskCode.NO_MODEL_RAN: lambda f: "no model could run",
    TaskCode.NO_BACKEND: lambda f: f"{f['model']}: no backend can serve it",
    TaskCode.TIMED_OUT: lambda f: f"model {f['model']} timed out after {f['seconds']:g} s",
    TaskCode.EXPERT_CRASHED: lambda f: f"{f['model']} failed unexpectedly ({f['cause']})",
    TaskCode.NOT_ON_TASK_API: lambda f: f"{f['task']} cannot run on the task API",
    TaskCode.SERVICE_UNREACHABLE: lambda f: (
        f"could not reach the inference service for model {f['model']} ({f['cause']})"
    ),
    TaskCode.RESPONSE_UNREADABLE: lambda f: (
        f"model {f['model']} returned a response that could not be read ({f['cause']})"
    ),
    TaskCode.MODEL_HTTP: _model_http,
    TaskCode.REDIRECTED_AWAY: lambda f: (
        f"the inference server at {f['address']} redirected the call to another server "
        f"({f['host']}); redirects to other servers are not followed"
    ),
    TaskCode.PROVIDER_NOT_SERVING: lambda f: (
        f"{f['model']} is not served by {f['provider']} for {f['task']} "
        f"(its providers: {', '.join(f['choices']) or 'none'})"
    ),
    TaskCode.NO_PROVIDER: _no_provider,
    TaskCode.NOT_LIVE_FOR_CHAT: lambda f: f"no provider serves {f['model']} live for chat",
    TaskCode.MODEL_GATED: lambda f: (
        f"{f['model']} is gated: accept its terms on the Hub with the HF_TOKEN account"
    ),
    TaskCode.MODEL_GONE: lambda f: f"{f['model']} no longer exists on the Hub",
    TaskCode.HUB_TOKEN_REFUSED: lambda f: (
        f"the Hub refused the credentials looking up {f['model']} (HTTP {f['status']}); "
        "check HF_TOKEN"
    ),
    TaskCode.HUB_LOOKUP_HTTP: lambda f: (
        f"the Hub could not be asked which provider serves {f['model']} (HTTP {f['status']})"
    ),
    TaskCode.HUB_LOOKUP_UNREACHABLE: lambda f: (
        f"could not reach the Hub to look up {f['model']} ({f['cause']})"
    ),
    TaskCode.NOT_LOADABLE: lambda f: (
        f"model {f['model']} is not in a layout transformers or diffusers can load "
        "(no config.json or model_index.json)"
    ),
    TaskCode.NO_TORCH_WEIGHTS: lambda f: (
        f"model {f['model']} has no PyTorch weights (safetensors or .bin) on the Hub "
        "that the local pipelines can load"
    ),
    TaskCode.DOWNLOADS_OFF: lambda f: "downloads are off (LOCAL_DOWNLOAD=false)",
    TaskCode.NOT_REPO_ID: lambda f: f"{f['model']} is not a Hub model id",
    TaskCode.OFFLINE: _offline,
    TaskCode.NOT_ALLOWED: lambda f: (
        f"model {f['model']} is not in LOCAL_DOWNLOAD_ALLOW={','.join(f['choices'])}"
    ),
    TaskCode.NO_COMMIT: lambda f: f"the Hub gave no commit for model {f['model']}",
    TaskCode.DOWNLOAD_TOO_LARGE: lambda f: (
        f"model {f['model']} is {_gb(f['size'])}, over LOCAL_DOWNLOAD_MAX_GB={f['max_gb']:g}"
    ),
    TaskCode.DISK_FULL: lambda f: (
        f"model {f['model']} needs {_gb(f['size'])} but the Hugging Face cache "
        f"({f['path']}) has {_gb(f['free'])} free"
    ),
    TaskCode.DOWNLOAD_INCOMPLETE: lambda f: (
        f"the download of model {f['model']} is incomplete ({f['count']} files missing, "
        f"e.g. {f['file']}); it resumes on the next call"
    ),
    TaskCode.DOWNLOAD_GATED: lambda f: (
        f"model {f['model']} is gated on the Hub: accept its conditions on its page and "
        "set HF_TOKEN to a token of that account"
    ),
    TaskCode.DOWNLOAD_NOT_FOUND: lambda f: (
        f"model {f['model']} was not found on the Hub ({f['endpoint']}); if it is private or "
        "gated, set HF_TOKEN to a token that can read it"
    ),
    TaskCode.DOWNLOAD_REFUSED: lambda f: (
        f"the Hub refused model {f['model']} ({f['status']}): check HF_TOKEN"
    ),
    TaskCode.DOWNLOAD_HTTP: lambda f: (
        f"the Hub answered {f['status']} while downloading model {f['model']}"
    ),
    TaskCode.DOWNLOAD_UNREACHABLE: lambda f: (
        f"the Hub ({f['endpoint']}) could not be reached to download model {f['model']}: "
        f"{f['said']}"
    ),
    TaskCode.DOWNLOAD_FAILED: lambda f: f"downloading model {f['model']} failed: {f['said']}",
    TaskCode.LOCAL_NOT_AVAILABLE: _not_local,
    TaskCode.LOCAL_CANNOT_RUN: lambda f: f"local inference cannot run {f['task']}",
    TaskCode.LOCAL_NEEDS_TORCH: lambda f: (
        f"local inference of {f['task']} needs torch, transformers and diffusers: "
        "pip install '.[local]'"
    ),
    TaskCode.LOCAL_FAILED: lambda f: f"local {f['task']} with {f['model']} failed: {f['said']}",
    TaskCode.LOAD_FAILED: lambda f: (
        f"model {f['model']} could not be loaded from {f['path']}: {f['said']}"
    ),
    TaskCode.HELPER_MISSING: lambda f: (
        f"the {f['kind']} ControlNet needs the {f['task'].split('-')[0]} model {f['model']} "
        f"({f['setting']}), which is not available locally"
    ),
    TaskCode.BASE_MISSING: lambda f: (
        f"ControlNet needs its base model {f['model']}, which is not available "
        "locally (put it under LOCAL_MODELS_DIR)"
    ),
    TaskCode.NEEDS_TESSERACT: lambda f: (
        "this document-question-answering model needs Tesseract OCR: "
        "pip install pytesseract and install the tesseract-ocr package"
    ),
    TaskCode.NO_ANSWER_FOUND: lambda f: "the model found no answer in the document",
    TaskCode.SPEECHT5_UNSUPPORTED: lambda f: (
        "SpeechT5 needs a separate HiFi-GAN vocoder and speaker x-vectors, "
        "which the local backend does not load; use a VITS (MMS) or Bark model"
    ),
}


def render_task(code: str, fields: Mapping[str, Any]) -> str:
    """The words for a task's failure (a :class:`TaskCode` value and its
    fields); the terse form for a code this version does not know."""
    try:
        known = TaskCode(code)
    except ValueError:
        return " ".join([code, *(f"{k}={v!r}" for k, v in fields.items())])
    return TASK_WORDS[known](cast(ErrorFields, fields))
