"""Every error code, worded with its fields: the words a person reads.

The core's codes are worded in adapters/chat/error_words.py, the adapters'
in adapters/chat/messages.py; :func:`error_text` is what a person is shown,
and the status message's failure line uses it.  ``str(err)`` is the core's
terse form (logs, the chat log the language model reads), never the words."""

from __future__ import annotations

import pickle
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import replace
from typing import cast

import pytest

from adapters.chat import Limits, Renderer, run_turn
from adapters.chat.board import Board
from adapters.chat.error_words import format_size
from adapters.chat.messages import (
    RESTARTING_STATUS,
    ChatCode,
    error_text,
    render_error,
    reply_text,
)
from adapters.cli import RENDERER as TERMINAL
from adapters.discord.surface import MESSAGE_LIMIT, RENDERER
from adapters.slack import commands
from adapters.slack.assistant import status_line
from adapters.slack.jobs import Incoming
from core.errors import Code, ErrorCode, ErrorFields, InputRejected, RunFailed, terse
from core.server_settings import SettingError
from core.types import (
    AgentAPI,
    ConversationKey,
    Event,
    Reply,
    ReplyNote,
    ReplyStatus,
    Request,
    Resource,
    TaskRecord,
    TaskState,
)

MB = 1 << 20
LLM = "The language model at llm.test"


def wording(code: Code, **fields: object) -> str:
    """The words for ``code`` with ``fields`` (as a person reads them)."""
    return render_error(code, fields)


# code -> (its fields, what the person reads)
CASES: dict[Code, tuple[ErrorFields, str]] = {
    ErrorCode.FILE_TOO_LARGE: (
        {"file": "photo.png", "size": 32_700_000, "limit": 25 * MB},
        "photo.png is 31.2 MB; the limit is 25 MB",
    ),
    ErrorCode.FILE_EMPTY: ({"file": "a.txt"}, "a.txt is empty"),
    ErrorCode.FILE_NOT_KIND: (
        {"file": "cat.mp3", "kind": "audio", "content": "an HTML page"},
        "cat.mp3 is not an audio file: its content looks like an HTML page",
    ),
    ErrorCode.IMAGE_FORMAT: (
        {"file": "x.heic", "format": "heic"},
        "x.heic is a HEIC image, which can't be read here; send it as PNG or JPEG",
    ),
    ErrorCode.IMAGE_TOO_LARGE: (
        {"file": "big.png", "width": 9000, "height": 9000, "limit": 50_000_000},
        "big.png is 9000×9000 pixels; at most 50,000,000 are accepted, send a smaller image",
    ),
    ErrorCode.FILE_DAMAGED: (
        {"file": "a.png", "format": "png"},
        "a.png could not be read as PNG: the file is damaged or truncated",
    ),
    ErrorCode.MEDIA_TOO_LONG: (
        {"file": "talk.wav", "kind": "audio", "seconds": 600},
        "talk.wav is longer than 10 min; audio of up to 10 min is accepted, send a shorter clip",
    ),
    ErrorCode.AUDIO_TOO_DENSE: (
        {"file": "a.wav"},
        "a.wav holds too much sound data to process (very many channels or a very high "
        "sample rate); send it as ordinary stereo audio",
    ),
    ErrorCode.VIDEO_FRAMES_TOO_LARGE: (
        {"file": "v.mp4", "limit": 1_000_000},
        "v.mp4 has frames of more than 1,000,000 pixels; send a smaller video",
    ),
    ErrorCode.TOO_MANY_FILES: (
        {"count": 12, "limit": 10},
        "That is 12 files; I take at most 10 per message.",
    ),
    ErrorCode.MESSAGE_TOO_LONG: (
        {"count": 40_000, "limit": 20_000},
        "Your message is 40,000 characters long; the limit is 20,000. Attach long documents "
        "as a .txt file or shorten the message.",
    ),
    ErrorCode.MESSAGE_EMPTY: ({}, "Your message is empty: tell me what you would like me to do."),
    ErrorCode.USAGE_ADMINS_ONLY: ({}, "Only the server's admins can see the whole server's usage."),
    ErrorCode.SETTINGS_ADMINS_ONLY: ({}, "Only the server's admins can change its settings."),
    ErrorCode.SETTINGS_NO_SERVER: (
        {},
        "Settings are per server: there is none here (a direct message).",
    ),
    ErrorCode.BAD_PERIOD: (
        {"value": "soon"},
        "'soon' is not a period: use e.g. 30m, 12h, 7d, 2w, or a date such as 2026-08-01",
    ),
    ErrorCode.PLAN_STALE: (
        {"reason": "task 0 is not offered"},
        "That plan cannot run here any more: task 0 is not offered",
    ),
    ErrorCode.BAD_RATING: ({"value": "meh"}, "feedback is 'good' or 'bad', not 'meh'"),
    ErrorCode.UNKNOWN_TASK: (
        {"value": "nope", "choices": ("summarization", "translation")},
        "unknown task 'nope'; the tasks are: summarization, translation",
    ),
    ErrorCode.QUOTA_REQUESTS: (
        {"limit": 20, "period": "minute", "seconds": 31},
        "You have used your 20 requests this minute; try again in 31 s.",
    ),
    ErrorCode.QUOTA_TOKENS: (
        {"place": "workspace", "limit": 1_000_000, "seconds": 5 * 3600 + 11 * 60 + 5},
        "This workspace has used its daily budget of 1,000,000 LLM tokens; it resets at "
        "00:00 UTC (in 5 h 12 min).",
    ),
    ErrorCode.SETTING_NOT_SERVER: (
        {"value": "guild"},
        "'guild' is not a server: write PLATFORM:ID, e.g. discord:123456789012345678, "
        "slack:T0123ABCD or cli:local",
    ),
    ErrorCode.SETTING_UNKNOWN: (
        {"key": "colour", "choices": ("llm_model", "language")},
        "unknown setting 'colour'; the settings are: llm_model, language",
    ),
    ErrorCode.SETTING_TASK_LIST: (
        {},
        "allowed_tasks: give task names separated by commas "
        "(e.g. text-to-image,image-classification), or none",
    ),
    ErrorCode.SETTING_NOT_NUMBER: (
        {"key": "requests_per_user_per_day", "value": "ten"},
        "requests_per_user_per_day: 'ten' is not a whole number (0 turns the quota off)",
    ),
    ErrorCode.SETTING_NOT_PINNED: (
        {"task": "text-to-image"},
        "no model is pinned for text-to-image",
    ),
    ErrorCode.SETTING_INVALID: (
        {
            "problems": (
                {"key": "language", "code": "setting_not_language", "fields": {"value": "x1"}},
                {"key": "", "code": "message", "fields": {"detail": "too many pins"}},
            )
        },
        "language: 'x1' is not a language: name one (e.g. French, Deutsch, 日本語) or give its "
        "code (fr, pt-BR): at most 3 words, 40 letters; too many pins",
    ),
    ErrorCode.SETTING_NOT_MODEL_NAME: (
        {"value": "gpt 5"},
        "'gpt 5' is not a model name (e.g. openai/gpt-oss-120b, gpt-5-mini)",
    ),
    ErrorCode.SETTING_NOT_MODEL_ID: (
        {"value": "a b"},
        "'a b' is not a model id (e.g. facebook/detr-resnet-50)",
    ),
    ErrorCode.SETTING_NOT_LANGUAGE: (
        {"value": "42"},
        "'42' is not a language: name one (e.g. French, Deutsch, 日本語) or give its code "
        "(fr, pt-BR): at most 3 words, 40 letters",
    ),
    ErrorCode.SETTING_PIN_BARRED: (
        {"choices": ("text-to-image", "translation")},
        "a model is pinned for text-to-image, translation, which allowed_tasks leaves out: "
        "unset the pin or allow the task",
    ),
    ErrorCode.SETTING_PIN_NOT_SERVED: (
        {"model": "a/b", "task": "text-to-image", "choices": ()},
        "a/b does not serve text-to-image in the model catalog "
        "(its most downloaded models for text-to-image: none)",
    ),
    ErrorCode.LLM_EMPTY_ANSWER: ({}, "the language model gave an empty answer"),
    ErrorCode.LLM_ECHOED: (
        {},
        "the language model repeated its instructions instead of answering",
    ),
    ErrorCode.CRASHED: (
        {"request": "r1"},
        "Something went wrong on my side (request r1). The details are in the log.",
    ),
    ErrorCode.NO_PLAN: ({}, "I could not turn your request into a plan."),
    ErrorCode.SHUTTING_DOWN: ({}, "I'm restarting right now; please send that again in a minute."),
    ErrorCode.STORE_DOWN: (
        {},
        "I can't reach the conversation history database right now, so I can't work on this "
        "safely. Please try again in a moment.",
    ),
    ErrorCode.GAVE_UP: (
        {"attempts": 5},
        "I could not finish this after 5 attempts; please send it again.",
    ),
    ErrorCode.EVAL_ABORTED: (
        {"count": 3, "reason": "no route"},
        "the language model failed on the first 3 requests, stopping: no route",
    ),
    ErrorCode.HUB_HTTP: (
        {"endpoint": "https://hub.test", "status": 500, "task": "text-to-image"},
        "the Hub at https://hub.test answered HTTP 500 while listing text-to-image models; "
        "try again later",
    ),
    ErrorCode.HUB_UNREACHABLE: (
        {"endpoint": "https://hub.test", "cause": "ConnectError"},
        "could not reach the Hub at https://hub.test (ConnectError); "
        "check the network or HF_ENDPOINT",
    ),
    ErrorCode.HUB_UNREADABLE: (
        {"endpoint": "https://hub.test", "task": "summarization"},
        "the Hub at https://hub.test sent an unreadable model list for summarization",
    ),
    ErrorCode.LLM_TOO_SLOW: (
        {"host": "llm.test", "seconds": 45.2, "attempts": 2, "allowed": 45},
        f"{LLM} took too long: 45 s (2 attempts) of the 45 s allowed",
    ),
    ErrorCode.LLM_TIMED_OUT: (
        {"host": "llm.test", "seconds": 3.25, "attempts": 1, "partial": True},
        f"{LLM} did not finish its answer within 3.2 s (1 attempt)",
    ),
    ErrorCode.LLM_UNREADABLE: (
        {"host": "llm.test", "cause": "not a chat completion"},
        f"{LLM} sent an answer that could not be read (not a chat completion)",
    ),
    ErrorCode.LLM_NO_ANSWER: ({"host": "llm.test"}, f"{LLM} returned no answer"),
    ErrorCode.LLM_NO_MODEL: (
        {"host": "llm.test"},
        "The language model server at llm.test lists no model: set LLM_MODEL",
    ),
    ErrorCode.LLM_BUDGET_USED: (
        {"host": "llm.test", "tokens": 4096},
        f"{LLM} used its whole budget of 4096 completion tokens without writing an answer "
        "(lower LLM_REASONING_EFFORT, or use another model)",
    ),
    ErrorCode.LLM_BROKE_OFF: (
        {"host": "llm.test", "cause": "ReadError"},
        f"{LLM} stopped in the middle of its answer (ReadError)",
    ),
    ErrorCode.LLM_FAILED: (
        {"detail": f"{LLM} could not be reached"},
        f"{LLM} could not be reached",
    ),
    ErrorCode.LLM_PROMPT_TOO_LONG: (
        {"host": "llm.test", "prompt_tokens": 9000, "n_ctx": 8192, "estimated": True},
        "The request is too long for the language model at llm.test: the prompt is about "
        "9000 tokens but its context holds 8192. Use a model or server with a larger context "
        "(llama-server: --ctx-size), or start a new conversation.",
    ),
    ErrorCode.LLM_PROXY: (
        {"host": "llm.test"},
        f"{LLM} could not be reached through the proxy: the proxy HTTPS_PROXY names could not "
        "be used or refused the connection (check HTTPS_PROXY, and NO_PROXY for addresses "
        "reached directly)",
    ),
    ErrorCode.LLM_UNREACHABLE: (
        {
            "host": "127.0.0.1:8080",
            "reach": "local",
            "setting": "OPENAI_BASE_URL",
            "address": "http://127.0.0.1:8080/v1",
            "hostname": "127.0.0.1",
        },
        "The language model at 127.0.0.1:8080 could not be reached. Is its server running? "
        "Start it (llama-server, vllm serve, ollama serve), or set OPENAI_BASE_URL to the "
        "address it listens on (now http://127.0.0.1:8080/v1)",
    ),
    ErrorCode.LLM_UNKNOWN_MODEL: (
        {"host": "llm.test", "model": "gpt-9"},
        f"{LLM} does not know model gpt-9 (check LLM_MODEL): set LLM_MODEL",
    ),
    ErrorCode.LLM_KEY_REJECTED: (
        {"host": "llm.test", "setting": "HF_TOKEN"},
        f"{LLM} rejected the API key (check HF_TOKEN)",
    ),
    ErrorCode.LLM_PAYMENT: (
        {"host": "llm.test"},
        f"{LLM} refused: payment required (HTTP 402); check the account's credits",
    ),
    ErrorCode.LLM_QUOTA_USED: (
        {"host": "llm.test"},
        f"{LLM} says the account's quota is used up (HTTP 429); check its billing",
    ),
    ErrorCode.LLM_RATE_LIMITED: (
        {"host": "llm.test"},
        f"{LLM} is rate limiting us (HTTP 429); try again in a moment",
    ),
    ErrorCode.LLM_HTTP: (
        {"host": "llm.test", "status": 418, "said": "I'm a teapot"},
        f"{LLM} returned an error (HTTP 418): I'm a teapot",
    ),
    ErrorCode.MESSAGE: ({"detail": "anything"}, "anything"),
    ChatCode.FILE_MISSING: ({"file": "nope.png"}, "nope.png: no such file"),
    ChatCode.NOT_HOSTED: (
        {"file": "a.png", "source": "Slack"},
        "a.png is not hosted by Slack, so it was not downloaded",
    ),
    ChatCode.DOWNLOAD_FAILED: (
        {"file": "photo.png", "source": "Discord", "status": 404},
        "photo.png could not be downloaded from Discord (HTTP 404).",
    ),
    ChatCode.REDIRECTED_AWAY: (
        {"file": "cat.png", "source": "Slack", "host": "127.0.0.2"},
        "cat.png could not be downloaded: Slack sent it to another host (127.0.0.2).",
    ),
    ChatCode.TOO_MANY_REDIRECTS: (
        {"file": "cat.png", "source": "Slack"},
        "cat.png could not be downloaded from Slack: too many redirects.",
    ),
    ChatCode.NO_FILE_URL: (
        {"file": "cat.png", "source": "Slack"},
        "cat.png can't be downloaded (Slack sent no file URL)",
    ),
    ChatCode.EXTERNAL_LINK: (
        {"file": "doc"},
        "doc is a link to an external service; upload the file itself",
    ),
    ChatCode.SLACK_NO_FILES_SCOPE: (
        {"file": "cat.png"},
        "Slack sent a web page instead of cat.png: the app is missing the `files:read` scope. "
        "Ask a workspace admin to add it and reinstall the app.",
    ),
}


def test_every_code_has_a_case_here() -> None:
    assert set(CASES) == set(ErrorCode) | set(ChatCode)


@pytest.mark.parametrize("code", list(CASES), ids=str)
def test_each_code_renders_with_its_fields(code: Code) -> None:
    fields, words = CASES[code]
    err = InputRejected(code, **fields)
    assert error_text(err) == words
    assert str(err) == terse(code, fields)  # the log line: the code and the fields, no words
    assert wording(code, **fields) == words
    assert (err.code, err.fields) == (code, fields)


def test_variants_of_one_code_by_the_fields_given() -> None:
    assert wording(ErrorCode.FILE_TOO_LARGE, file="liar.png", limit=20_000) == (
        "liar.png is larger than the limit of 19.5 KB"
    )
    assert wording(ErrorCode.FILE_NOT_KIND, file="c.png", kind="image", content="plain text") == (
        "c.png is not an image: its content looks like plain text"
    )
    assert wording(ErrorCode.IMAGE_TOO_LARGE, file="b.png", limit=1_000) == (
        "b.png is too large in pixels (at most 1,000 are accepted); send a smaller image"
    )
    assert wording(ErrorCode.LLM_TIMED_OUT, host="h", seconds=12, attempts=3) == (
        "The language model at h did not answer within 12 s (3 attempts)"
    )
    assert wording(ErrorCode.LLM_UNREADABLE, host="h") == (
        "The language model at h sent an answer that could not be read"
    )
    assert wording(ErrorCode.NO_PLAN, reason="The plan named no task.") == (
        "The plan named no task."
    )
    assert wording(ChatCode.DOWNLOAD_FAILED, file="a", source="Slack") == (
        "a could not be downloaded from Slack."
    )


def test_variants_of_the_quota_codes() -> None:
    assert wording(ErrorCode.QUOTA_REQUESTS, place="server", limit=1, period="day", seconds=59) == (
        "This server has used its 1 request for today; it resets at 00:00 UTC (in 59 s)."
    )
    assert wording(ErrorCode.QUOTA_REQUESTS, limit=3, period="day", seconds=600) == (
        "You have used your 3 requests for today; they reset at 00:00 UTC (in 10 min)."
    )
    assert wording(ErrorCode.QUOTA_TOKENS, limit=1, seconds=12 * 3600) == (
        "You have used your daily budget of 1 LLM token; it resets at 00:00 UTC (in 12 h 0 min)."
    )


FAR = "https://llm.example/v1"


def test_variants_of_the_language_model_codes() -> None:
    assert wording(
        ErrorCode.LLM_UNREACHABLE,
        host="h",
        reach="name",
        hostname="llm.example",
        address=FAR,
        setting="OPENAI_BASE_URL",
    ) == (
        "The language model at h could not be reached. Likely causes: no network here (the "
        "name llm.example could not be looked up), a proxy this process was not told of (set "
        "HTTPS_PROXY), or a wrong address (https://llm.example/v1; check OPENAI_BASE_URL)"
    )
    retried = wording(
        ErrorCode.LLM_UNREACHABLE,
        host="h",
        reach="connect",
        address=FAR,
        setting="OPENAI_BASE_URL",
        attempts=3,
        seconds=2.5,
    )
    assert retried.startswith(
        "The language model at h could not be reached (3 attempts in 2.5 s). Likely causes: "
        "no network here (the connection failed), "
    )
    assert wording(ErrorCode.LLM_TIMED_OUT, host="h", seconds=45) == (
        "The language model at h did not answer within 45 s"
    )
    assert wording(ErrorCode.LLM_HTTP, host="h", status=500, said="", attempts=2, seconds=1) == (
        "The language model at h returned an error (HTTP 500) (2 attempts in 1 s)"
    )
    assert wording(ErrorCode.LLM_FAILED, host="h", cause="APIError") == (
        "The language model at h failed (APIError)"
    )
    assert wording(
        ErrorCode.LLM_UNKNOWN_MODEL,
        host="h",
        model="m",
        suggested="openai/gpt-oss-120b",
        url="https://hf.test/providers",
    ) == (
        "The language model at h does not know model m (check LLM_MODEL): set LLM_MODEL (a "
        "model Inference Providers serve, e.g. openai/gpt-oss-120b, or enable a provider for "
        "it at https://hf.test/providers)"
    )
    assert wording(ErrorCode.LLM_PAYMENT, host="h", url="https://hf.test/billing") == (
        "The language model at h: the Hugging Face credits for Inference Providers are used up "
        "(HTTP 402); top up at https://hf.test/billing, or set OPENAI_API_KEY"
    )
    assert wording(ErrorCode.LLM_PROMPT_TOO_LONG, host="h", n_ctx=4096, estimated=False) == (
        "The request is too long for the language model at h: its context holds 4096 tokens. "
        "Use a model or server with a larger context (llama-server: --ctx-size), or start a "
        "new conversation."
    )


def test_a_sentence_worded_by_the_raiser_is_kept() -> None:
    err = InputRejected("the daily quota is used up")
    assert (err.code, err.fields, error_text(err)) == (
        ErrorCode.MESSAGE,
        {"detail": "the daily quota is used up"},
        "the daily quota is used up",
    )


def test_the_failure_line_words_an_error_itself() -> None:
    err = RunFailed(ErrorCode.LLM_NO_ANSWER, host="llm.test")
    assert RENDERER.failed(err, (), MESSAGE_LIMIT) == f"❌ {LLM} returned no answer"
    assert TERMINAL.failed(err, (), 200) == RENDERER.failed(error_text(err), (), 200)


def test_an_error_survives_pickling_with_its_data() -> None:
    err = pickle.loads(pickle.dumps(InputRejected(ErrorCode.FILE_EMPTY, file="a.txt")))
    assert (err.code, err.fields, error_text(err)) == (
        ErrorCode.FILE_EMPTY,
        {"file": "a.txt"},
        "a.txt is empty",
    )


# ------------------------------------------------ the adapters pass the error itself


class _Surface:
    """Records the status message's texts."""

    limits = Limits(message_chars=2000, upload_bytes=1 << 20)

    def __init__(self) -> None:
        self.status: list[str] = []
        self.answers: list[str] = []

    async def post_status(self, text: str) -> None:
        self.status.append(text)

    async def edit_status(self, text: str) -> None:
        self.status.append(text)

    async def post_answer(self, text: str, files: Sequence[Resource]) -> None:
        self.answers.append(text)

    async def tell_privately(self, text: str) -> None:
        self.answers.append(text)


SEEN: list[str | InputRejected | RunFailed] = []


class _ByCode(Renderer):
    """A renderer that words errors from their data (as another language or
    a platform's own blocks would), and records what it was given."""

    def failed(
        self,
        reason: str | InputRejected | RunFailed,
        tasks: Sequence[TaskState | TaskRecord],
        limit: int,
    ) -> str:
        SEEN.append(reason)
        if isinstance(reason, str):
            return f"text: {reason}"
        return f"code: {reason.code} {sorted(reason.fields.items())}"


class _Run:
    """A run with no events that ends with ``reply``."""

    def __init__(self, request_id: str, reply: Reply) -> None:
        self.request_id = request_id
        self.reply = reply

    async def __aiter__(self) -> AsyncIterator[Event]:
        events: tuple[Event, ...] = ()
        for event in events:
            yield event


class _Agent:
    """An agent whose every run ends with ``reply`` at once."""

    def __init__(self, reply: Reply) -> None:
        self.reply = reply

    @asynccontextmanager
    async def run(self, request: Request, *, job: object = None) -> AsyncIterator[_Run]:
        yield _Run(request.request_id, self.reply)


def _request() -> Request:
    return Request(ConversationKey("cli", "local", "t", None), "me", "hi")


@pytest.fixture(autouse=True)
def _clear_seen() -> None:
    SEEN.clear()


async def test_a_refused_input_reaches_the_renderer_as_the_error_itself() -> None:
    refused = InputRejected(ChatCode.FILE_MISSING, file="nope.png")

    async def build() -> Request:
        raise refused

    surface = _Surface()
    agent = cast(AgentAPI, _Agent(Reply("unused")))
    assert await run_turn(agent, surface, _ByCode(), build, request_id="r1") is None
    assert [refused] == SEEN
    assert surface.status[-1] == "code: file_missing [('file', 'nope.png')]"


async def test_a_refused_reply_is_worded_again_from_its_code_and_fields() -> None:
    err = InputRejected(ErrorCode.QUOTA_REQUESTS, limit=2, period="minute", seconds=40)
    reply = Reply("", status=ReplyStatus.REFUSED).with_error(err)
    surface = _Surface()
    await run_turn(cast(AgentAPI, _Agent(reply)), surface, _ByCode(), _request())
    (seen,) = SEEN
    assert isinstance(seen, InputRejected)
    assert (seen.code, seen.fields) == (err.code, err.fields)
    assert surface.status[-1] == (
        "code: quota_requests [('limit', 2), ('period', 'minute'), ('seconds', 40)]"
    )
    # the platforms' own renderers say the same words as before
    assert RENDERER.failed(seen, (), MESSAGE_LIMIT) == (
        "❌ You have used your 2 requests this minute; try again in 40 s."
    )
    assert reply.text == "quota_requests limit=2 period='minute' seconds=40"  # the core's form


async def test_a_reply_with_text_only_is_shown_as_its_text() -> None:
    """A reply saved before replies kept their error shows its text; one
    with a note after the error (the turn was not saved) shows the error's
    words and the note."""
    err = RunFailed(ErrorCode.STORE_DOWN)
    noted = replace(
        Reply("", status=ReplyStatus.FAILED).with_error(err), notes=(ReplyNote.NOT_SAVED,)
    )
    for reply, shown in (
        (Reply("It broke.", status=ReplyStatus.FAILED), "It broke."),
        (
            noted,
            "I can't reach the conversation history database right now, so I can't work on "
            "this safely. Please try again in a moment.\n\n"
            "(Note: this turn could not be saved; the details are in the log.)",
        ),
    ):
        SEEN.clear()
        await run_turn(cast(AgentAPI, _Agent(reply)), _Surface(), _ByCode(), _request())
        assert [shown] == SEEN == [reply_text(reply)]


async def test_a_note_follows_an_answer_once_the_answer_is_posted() -> None:
    reply = Reply("Two cats.", notes=(ReplyNote.HISTORY_DOWN,))
    surface = _Surface()
    await run_turn(cast(AgentAPI, _Agent(reply)), surface, _ByCode(), _request())
    assert surface.answers == [
        "Two cats.\n\n(Note: the history database is unavailable, so this turn was not saved.)"
    ]


def test_format_size() -> None:
    assert format_size(900) == "900 bytes"
    assert format_size(1536) == "1.5 KB"
    assert format_size(25 * MB) == "25 MB"
    assert format_size(3 << 30) == "3 GB"


async def test_a_slack_command_refused_is_worded_from_the_error() -> None:
    class Refusing:
        async def configure(self, *args: object, **kwargs: object) -> None:
            raise SettingError(ErrorCode.SETTING_NOT_PINNED, task="text-to-image")

    incoming = Incoming("T1", "C1", "U1", "config unset pinned_model.text-to-image", "1.0", None)
    command = commands.Command(commands.Action.UNSET, key="pinned_model.text-to-image")
    said = await commands.answer(
        incoming.text, command, cast(AgentAPI, Refusing()), incoming, admin=True
    )
    assert said == "❌ no model is pinned for text-to-image"


def test_the_slack_assistant_status_while_restarting_is_the_messages_one() -> None:
    board = Board()
    board.restarting = True
    assert status_line(board) == f"{RESTARTING_STATUS}…"


def test_no_plan_says_what_the_planner_saw() -> None:
    stronger = "This model is too weak to plan: set LLM_MODEL to a stronger model."
    assert wording(ErrorCode.NO_PLAN, cause="loop") == (
        "The language model kept repeating itself instead of writing a plan, so I stopped it "
        f"(twice). {stronger}"
    )
    assert wording(ErrorCode.NO_PLAN, cause="length") == (
        "The language model kept writing past the length a plan needs, so I stopped it "
        f"(twice). {stronger}"
    )
    assert wording(ErrorCode.NO_PLAN, cause="emptied", reason="Task 0 has no args.") == (
        "I could not turn your request into a workable plan (the language model's plan was "
        "invalid: Task 0 has no args. Asked to correct it, it answered with no task at all.) "
        "Try rephrasing it, or name the files to use."
    )
    assert wording(ErrorCode.NO_PLAN, cause="invalid", reason="Task 0 has no args.") == (
        "I could not turn your request into a workable plan (the language model's plan was "
        "invalid twice: Task 0 has no args.) Try rephrasing it, or name the files to use; or "
        "set LLM_MODEL to a stronger model."
    )
