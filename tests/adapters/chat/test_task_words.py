"""A task's failures as a person reads them: each :class:`TaskCode` worded
with its fields (adapters/chat/error_words.py); the core's ``str(err)`` is
the terse form the logs and the answer's language model read.  The status
line, Slack's task cards, a past request's details and a fallback answer's
task lines all word a task's errors here (``task_error_text``); a task of an
older checkpoint, which kept the sentence itself, is shown as it was."""

from __future__ import annotations

import pytest

from adapters.chat.error_words import TASK_WORDS, render_task
from adapters.chat.messages import error_text, reply_text, task_error_text
from adapters.chat.render import Markup
from adapters.chat.reports import details
from adapters.discord.surface import RENDERER
from adapters.slack.assistant import card_of
from core.errors import ErrorFields, TaskCode, TaskFailed
from core.response import fallback_answer
from core.types import (
    EVENT_ADAPTER,
    ConversationKey,
    PastRequest,
    PlannedStep,
    Reply,
    ReplyStatus,
    TaskError,
    TaskRecord,
    TasksChanged,
    TaskState,
    TaskStatus,
    Usage,
)

# code -> (its fields, what the person reads); codes the experts' own tests
# do not word end to end
CASES: dict[TaskCode, tuple[ErrorFields, str]] = {
    TaskCode.OUTPUT_UNKNOWN_KIND: (
        {"model": "m/x", "kind": "pdf"},
        "model m/x returned a file of an unknown kind (pdf)",
    ),
    TaskCode.OUTPUT_WRONG_KIND: (
        {
            "model": "m/x",
            "expected": "image",
            "got": "document",
            "format": "pdf",
            "content": "a PDF document",
        },
        "model m/x returned a PDF document instead of an image",
    ),
    TaskCode.OUTPUT_NOT_TEXT: ({"model": "m/x"}, "model m/x returned a text that is not text"),
    TaskCode.INPUT_NOT_MADE: (
        {"dependency": 0, "task": "text-to-image", "kind": "image"},
        "task 0 (text-to-image) produced no image for this task",
    ),
    TaskCode.INPUT_WRONG_KIND: ({"file": "a.png", "kind": "audio"}, "a.png is not an audio"),
    TaskCode.NO_SUCH_FILE: ({"file": "a.png"}, "there is no file named a.png here"),
    TaskCode.STORED_FILE_MISSING: ({"file": "a.png"}, "the stored file a.png is missing"),
    TaskCode.NEEDS_ARGUMENT: ({"kind": "image"}, "this task needs an image argument"),
    TaskCode.INPUT_UNREADABLE: (
        {"kind": "audio", "said": "no frames"},
        "the audio could not be read: no frames",
    ),
    TaskCode.SKIPPED: (
        {"dependency": 0, "task": "text-to-image"},
        "task 0 (text-to-image) did not succeed",
    ),
    TaskCode.NO_MODEL: ({}, "no model available for this task"),
    TaskCode.NO_MODEL_RAN: ({}, "no model could run"),
    TaskCode.NO_BACKEND: ({"model": "m/x"}, "m/x: no backend can serve it"),
    TaskCode.EXPERT_CRASHED: (
        {"model": "m/x", "cause": "KeyError"},
        "m/x failed unexpectedly (KeyError)",
    ),
    TaskCode.NOT_LIVE_FOR_CHAT: ({"model": "m/x"}, "no provider serves m/x live for chat"),
    TaskCode.HUB_TOKEN_REFUSED: (
        {"model": "m/x", "status": 401},
        "the Hub refused the credentials looking up m/x (HTTP 401); check HF_TOKEN",
    ),
    TaskCode.HUB_LOOKUP_HTTP: (
        {"model": "m/x", "status": 500},
        "the Hub could not be asked which provider serves m/x (HTTP 500)",
    ),
    TaskCode.HUB_LOOKUP_UNREACHABLE: (
        {"model": "m/x", "cause": "ConnectError"},
        "could not reach the Hub to look up m/x (ConnectError)",
    ),
    TaskCode.DOWNLOADS_OFF: ({}, "downloads are off (LOCAL_DOWNLOAD=false)"),
    TaskCode.NOT_REPO_ID: ({"model": "../x"}, "../x is not a Hub model id"),
    TaskCode.OFFLINE: ({}, "HF_HUB_OFFLINE=1 forbids downloading it"),
    TaskCode.NO_COMMIT: ({"model": "m/x"}, "the Hub gave no commit for model m/x"),
    TaskCode.DISK_FULL: (
        {"model": "m/x", "size": 3_200_000_000, "free": 1_000_000_000, "path": "/c"},
        "model m/x needs 3.2 GB but the Hugging Face cache (/c) has 1.0 GB free",
    ),
    TaskCode.DOWNLOAD_INCOMPLETE: (
        {"model": "m/x", "count": 2, "file": "a.bin"},
        "the download of model m/x is incomplete (2 files missing, e.g. a.bin); "
        "it resumes on the next call",
    ),
    TaskCode.DOWNLOAD_REFUSED: (
        {"model": "m/x", "status": 403},
        "the Hub refused model m/x (403): check HF_TOKEN",
    ),
    TaskCode.DOWNLOAD_HTTP: (
        {"model": "m/x", "status": 500},
        "the Hub answered 500 while downloading model m/x",
    ),
    TaskCode.DOWNLOAD_FAILED: (
        {"model": "m/x", "said": "OSError('disk')"},
        "downloading model m/x failed: OSError('disk')",
    ),
    TaskCode.LOCAL_NOT_AVAILABLE: (
        {
            "model": "m/x",
            "path": "(unset)",
            "cache": "/c",
            "inner": {"code": "downloads_off", "fields": {}},
        },
        "model m/x is not available locally under LOCAL_MODELS_DIR=(unset) or in the "
        "Hugging Face cache (/c), and downloads are off (LOCAL_DOWNLOAD=false)",
    ),
    TaskCode.LOCAL_CANNOT_RUN: (
        {"task": "text-to-video"},
        "local inference cannot run text-to-video",
    ),
    TaskCode.LOCAL_NEEDS_TORCH: (
        {"task": "summarization"},
        "local inference of summarization needs torch, transformers and diffusers: "
        "pip install '.[local]'",
    ),
    TaskCode.LOCAL_FAILED: (
        {"task": "summarization", "model": "m/x", "said": "CUDA out of memory"},
        "local summarization with m/x failed: CUDA out of memory",
    ),
    TaskCode.HELPER_MISSING: (
        {
            "kind": "depth",
            "task": "depth-estimation",
            "model": "m/d",
            "setting": "LOCAL_DEPTH_MODEL",
        },
        "the depth ControlNet needs the depth model m/d (LOCAL_DEPTH_MODEL), which is not "
        "available locally",
    ),
    TaskCode.BASE_MISSING: (
        {"model": "m/sd"},
        "ControlNet needs its base model m/sd, which is not available locally (put it under "
        "LOCAL_MODELS_DIR)",
    ),
    TaskCode.NO_ANSWER_FOUND: ({}, "the model found no answer in the document"),
    TaskCode.QA_NEEDS_LINES: ({}, "question-answering needs 'question\\ncontext'"),
}


def test_every_task_code_has_words() -> None:
    assert set(TASK_WORDS) == set(TaskCode)


@pytest.mark.parametrize("code", list(CASES), ids=str)
def test_each_task_code_renders_with_its_fields(code: TaskCode) -> None:
    fields, words = CASES[code]
    err = TaskFailed(code, **fields)
    assert error_text(err) == words
    assert render_task(code, fields) == words
    assert words not in str(err)  # the terse form: the code and the fields


def test_a_code_of_a_newer_version_is_shown_in_its_terse_form() -> None:
    assert render_task("from_the_future", {"n": 1}) == "from_the_future n=1"


TIMED_OUT = TaskError(TaskCode.TIMED_OUT, {"model": "m/a", "seconds": 30.0})
NOT_SERVED = TaskError(TaskCode.MODEL_HTTP, {"model": "m/b", "status": 404})
WORDS = (
    "model m/a timed out after 30 s; model m/b is not served by the inference service (HTTP 404)"
)


def failed_task() -> TaskState:
    return TaskState(
        0, "translation", "m/b", TaskStatus.FAILED, "timed_out …", (TIMED_OUT, NOT_SERVED)
    )


def test_the_status_line_words_each_model_tried() -> None:
    assert task_error_text(failed_task()) == WORDS
    assert RENDERER.task_line(failed_task()) == f"❌ 0. translation · `m/b` — {WORDS}"
    _, _, card = card_of(failed_task())
    assert card == WORDS


def test_a_task_of_an_older_checkpoint_shows_its_sentence() -> None:
    old = TaskState(0, "translation", "m/a", TaskStatus.FAILED, "model m/a timed out after 30 s")
    assert RENDERER.task_line(old) == ("❌ 0. translation · `m/a` — model m/a timed out after 30 s")


def test_a_fallback_answer_words_its_failed_tasks() -> None:
    records = (
        TaskRecord(
            0, "translation", "m/b", TaskStatus.FAILED, error=str(TIMED_OUT), errors=(TIMED_OUT,)
        ),
        TaskRecord(1, "summarization", "m/s", TaskStatus.DONE, result={"text": "short"}),
        TaskRecord(
            2,
            "text-to-speech",
            None,
            TaskStatus.SKIPPED,
            error="x",
            errors=(TaskError(TaskCode.SKIPPED, {"dependency": 0, "task": "translation"}),),
        ),
    )
    text = fallback_answer(records, (), error="llm_empty_answer")
    assert "timed_out" in text  # the core's text: the terse form, for the chat log
    reply = Reply(text, tasks=records, status=ReplyStatus.FALLBACK, error_code="llm_empty_answer")
    assert reply_text(reply).split("\n")[2:] == [
        "- task 0, translation on m/b: failed (model m/a timed out after 30 s)",
        "- task 1, summarization on m/s: done. Result: short",
        "- task 2, text-to-speech: skipped (task 0 (translation) did not succeed)",
    ]


def test_a_past_requests_details_word_its_failed_task() -> None:
    reply = Reply(
        "",
        tasks=(TaskRecord(0, "translation", "m/a", TaskStatus.FAILED, errors=(TIMED_OUT,)),),
    )
    past = PastRequest(
        "r1",
        ConversationKey("cli", "local", "c"),
        "u",
        "translate",
        (PlannedStep(0, "translation", (), {}, "m/a", None),),
        reply,
        Usage(),
    )
    assert "    model m/a timed out after 30 s" in details(past, Markup()).split("\n")


def test_a_task_state_keeps_its_errors_through_the_event_stream_json() -> None:
    """The run's events cross a process (the CLI worker): a task's errors
    arrive as data the receiving side words."""
    event = TasksChanged((failed_task(),))
    again = EVENT_ADAPTER.validate_json(EVENT_ADAPTER.dump_json(event))
    assert isinstance(again, TasksChanged)
    assert task_error_text(again.tasks[0]) == WORDS


def test_a_skipped_task_says_skipped_once() -> None:
    why = TaskError(TaskCode.SKIPPED, {"dependency": 0, "task": "translation"})
    task = TaskState(1, "text-to-speech", "m/t", TaskStatus.SKIPPED, str(why), (why,))
    assert card_of(task)[2] == "skipped: task 0 (translation) did not succeed"
    assert RENDERER.task_line(task) == (
        "⏭️ 1. text-to-speech · `m/t` — task 0 (translation) did not succeed"
    )
