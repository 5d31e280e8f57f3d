"""Every error code, worded with its fields: the words a person reads.

The core's codes are worded in core.errors (``str(err)``, the log line), the
adapters' in adapters/chat/messages.py; :func:`error_text` is what a person
is shown, and the status message's failure line uses it."""

from __future__ import annotations

import pickle

import pytest

from adapters.chat.messages import ChatCode, error_text
from adapters.cli import RENDERER as TERMINAL
from adapters.discord.surface import MESSAGE_LIMIT, RENDERER
from core.errors import Code, ErrorCode, ErrorFields, InputRejected, RunFailed, wording

MB = 1 << 20
LLM = "The language model at llm.test"

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
        {"value": "soon", "reason": "'soon' is not a period"},
        "'soon' is not a period",
    ),
    ErrorCode.PLAN_STALE: (
        {"reason": "task 0 is not offered"},
        "That plan cannot run here any more: task 0 is not offered",
    ),
    ErrorCode.BAD_RATING: ({"value": "meh"}, "feedback is 'good' or 'bad', not 'meh'"),
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
    assert str(err) == words  # the log line and the history say the same
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


def test_a_sentence_worded_by_the_raiser_is_kept() -> None:
    err = InputRejected("the daily quota is used up")
    assert (err.code, err.fields, str(err)) == (
        ErrorCode.MESSAGE,
        {"detail": "the daily quota is used up"},
        "the daily quota is used up",
    )


def test_the_failure_line_words_an_error_itself() -> None:
    err = RunFailed(ErrorCode.LLM_NO_ANSWER, host="llm.test")
    assert RENDERER.failed(err, (), MESSAGE_LIMIT) == f"❌ {LLM} returned no answer"
    assert TERMINAL.failed(err, (), 200) == RENDERER.failed(str(err), (), 200)


def test_an_error_survives_pickling_with_its_data() -> None:
    err = pickle.loads(pickle.dumps(InputRejected(ErrorCode.FILE_EMPTY, file="a.txt")))
    assert (err.code, err.fields, str(err)) == (
        ErrorCode.FILE_EMPTY,
        {"file": "a.txt"},
        "a.txt is empty",
    )
