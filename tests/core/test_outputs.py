"""Model outputs checked against the task (core.outputs): a 200 that is an
error page, a JSON error, nothing, or the wrong kind of media is a failed call,
and the executor moves on to the next candidate.  The agent tests drive the
real AsyncInferenceClient against the HF fake; the unit tests pin each rule."""

from __future__ import annotations

import base64
import io
import json

import numpy as np
import pytest
from PIL import Image

from adapters.chat.messages import error_text, task_error_text
from core.errors import TaskCode, TaskFailed
from core.experts.video import encode_video
from core.outputs import check_output
from core.results import Answer, Blob, Box, Entity, Label, Segment, TaskResult
from core.tasks import TASKS
from core.types import Attachment, ConversationKey, Request, TaskStatus
from tests.fakes.agent_fixture import AgentEnv, model_a, model_b
from tests.fakes.hf_service_outputs import sample_mp3
from tests.fakes.samples import sample_jpeg, sample_mask_png, sample_mp4, sample_png, sample_wav
from tests.said import raises_saying

KEY = ConversationKey("cli", "local", "outputs", None)
HTML_PAGE = b"<!DOCTYPE html><html><head><title>502 Bad Gateway</title></head><body></body></html>"
JSON_ERROR = b'{"error": "CUDA out of memory. Tried to allocate 2.00 GiB"}'


def one_task(task: str, **args: str) -> str:
    return json.dumps([{"task": task, "id": 0, "dep": [-1], "args": args}])


def ask(text: str) -> Request:
    return Request(KEY, "u1", text)


# --- through the agent: the next candidate answers --------------------------------


@pytest.mark.parametrize(
    ("body", "content_type", "got"),
    [
        (HTML_PAGE, "text/html", "got='html'"),
        (JSON_ERROR, "application/json", "got='json_error'"),
        (b"", "audio/flac", "got='empty'"),
        (sample_png(), "audio/flac", "got='media' format='png' kind='image'"),
    ],
    ids=["html", "json-error", "empty", "image"],
)
async def test_tts_answering_200_with_something_else_fails_and_the_next_candidate_speaks(
    agent_env: AgentEnv, body: bytes, content_type: str, got: str
) -> None:
    env = agent_env
    env.hf.serve(model_a("text-to-speech"), "text-to-speech", body, content_type=content_type)
    env.llm.reply("plan", one_task("text-to-speech", text="Hello there"))
    reply = await env.agent.handle(ask("say hello"))
    assert not reply.error, reply.text
    (rec,) = reply.tasks
    assert rec.status is TaskStatus.DONE
    assert rec.model == model_b("text-to-speech")
    assert len(env.hf.calls_for(model_a("text-to-speech"))) == 1
    # the failed attempt, in the terse form the answer's language model reads
    failed = f"output_wrong_kind model={model_a('text-to-speech')!r} expected='audio' {got}"
    assert failed in (rec.reason or "")
    (speech,) = reply.files
    assert (speech.kind, speech.mime, speech.handle) == ("audio", "audio/ogg", "speech.ogg")


async def test_tts_error_pages_from_every_candidate_fail_the_task(agent_env: AgentEnv) -> None:
    env = agent_env
    for model in (model_a("text-to-speech"), model_b("text-to-speech")):
        env.hf.serve(model, "text-to-speech", HTML_PAGE, content_type="text/html")
    env.llm.reply("plan", one_task("text-to-speech", text="Hello there"))
    env.llm.reply("answer", "I could not make the audio.")
    reply = await env.agent.handle(ask("say hello"))
    (rec,) = reply.tasks
    assert rec.status is TaskStatus.FAILED
    assert task_error_text(rec) == (
        f"model {model_a('text-to-speech')} returned an HTML page instead of audio; "
        f"model {model_b('text-to-speech')} returned an HTML page instead of audio"
    )
    assert reply.files == ()  # no speech.html
    assert not list((env.settings.store.media_dir).rglob("*.html"))


async def test_image_task_answering_a_json_error_with_200_uses_the_next_candidate(
    agent_env: AgentEnv,
) -> None:
    env = agent_env
    env.hf.serve(model_a("text-to-image"), "text-to-image", JSON_ERROR, content_type="image/png")
    env.llm.reply("plan", one_task("text-to-image", text="a red square"))
    reply = await env.agent.handle(ask("draw a red square"))
    (rec,) = reply.tasks
    assert rec.status is TaskStatus.DONE and rec.model == model_b("text-to-image")
    # The client decodes images itself, so it is the one that fails here.
    assert f"response_unreadable model={model_a('text-to-image')!r}" in (rec.reason or "")
    (image,) = reply.files
    assert image.kind == "image" and image.path.read_bytes() == sample_png()


async def test_video_task_answering_an_html_page_uses_the_next_candidate(
    agent_env: AgentEnv,
) -> None:
    env = agent_env
    env.hf.serve(model_a("text-to-video"), "text-to-video", HTML_PAGE, content_type="video/mp4")
    env.llm.reply("plan", one_task("text-to-video", text="a sliding square"))
    reply = await env.agent.handle(ask("make a video"))
    (rec,) = reply.tasks
    assert rec.status is TaskStatus.DONE and rec.model == model_b("text-to-video")
    failed = f"output_wrong_kind model={model_a('text-to-video')!r} expected='video' got='html'"
    assert failed in (rec.reason or "")
    assert [f.kind for f in reply.files] == ["video"]


async def test_audio_to_audio_answering_an_image_fails(agent_env: AgentEnv) -> None:
    env = agent_env
    b64 = base64.b64encode(sample_jpeg()).decode()
    for model in (model_a("audio-to-audio"), model_b("audio-to-audio")):
        env.hf.serve(
            model,
            "audio-to-audio",
            [{"label": "speech_enhanced", "content-type": "audio/wav", "blob": b64}],
        )
    env.llm.reply("plan", one_task("audio-to-audio", audio="clip.wav"))
    env.llm.reply("answer", "No luck.")
    clip = Attachment("clip.wav", "audio/wav", sample_wav())
    reply = await env.agent.handle(Request(KEY, "u1", "clean it", (clip,)))
    (rec,) = reply.tasks
    assert rec.status is TaskStatus.FAILED
    assert "returned a JPG image instead of audio" in task_error_text(rec)


# --- check_output, rule by rule ------------------------------------------------------


def _gif() -> bytes:
    frames = [Image.new("RGB", (16, 16), (i * 60, 0, 0)) for i in range(3)]
    buf = io.BytesIO()
    frames[0].save(buf, format="GIF", save_all=True, append_images=frames[1:], duration=100)
    return buf.getvalue()


def _mp4() -> bytes:
    return encode_video([np.zeros((16, 16, 3), np.uint8)] * 3)


IMG = Blob("image", "image/png", sample_png())
WAV = Blob("audio", "audio/wav", sample_wav())
VALID: dict[str, TaskResult] = {
    "text-classification": TaskResult(labels=(Label("POSITIVE", 0.99),)),
    "token-classification": TaskResult(entities=(Entity("Sarah", "PER", 0.99, 0, 5),)),
    "text2text-generation": TaskResult(text="rewritten"),
    "summarization": TaskResult(text="short"),
    "translation": TaskResult(text="Bonjour"),
    "question-answering": TaskResult(answers=(Answer("Clara", 0.9),)),
    "conversational": TaskResult(text="hi!"),
    "text-generation": TaskResult(text="once upon a time"),
    "tabular-classification": TaskResult(text="1", extra={"predictions": ["1"]}),
    "image-to-text": TaskResult(text="a red square"),
    "text-to-image": TaskResult(media=(IMG,)),
    "visual-question-answering": TaskResult(answers=(Answer("red", 0.9),)),
    "image-segmentation": TaskResult(segments=(Segment("square", 0.99, sample_mask_png()),)),
    "document-question-answering": TaskResult(answers=(Answer("$1,250.00", None),)),
    "image-classification": TaskResult(labels=(Label("tabby", 0.91), Label("cat", 0.05))),
    "image-to-image": TaskResult(media=(Blob("image", "image/jpeg", sample_jpeg()),)),
    "object-detection": TaskResult(boxes=(Box("cat", 0.99, 16, 16, 47, 47),)),
    "controlnet-sd": TaskResult(media=(IMG, IMG), extra={"control": "canny"}),
    "depth-estimation": TaskResult(media=(IMG,), extra={"depth_min": 1.0}),
    "text-to-video": TaskResult(media=(Blob("video", "video/mp4", sample_mp4()),)),
    "video-classification": TaskResult(labels=(Label("dancing", 0.7),)),
    "text-to-speech": TaskResult(media=(WAV,)),
    "audio-classification": TaskResult(labels=(Label("dog_bark", 0.88),)),
    "automatic-speech-recognition": TaskResult(text="hello world"),
    "audio-to-audio": TaskResult(media=(WAV, WAV), extra={"audio_labels": ["a", "b"]}),
}


def test_every_task_has_a_valid_case() -> None:
    assert set(VALID) == set(TASKS)


@pytest.mark.parametrize("task", sorted(VALID))
def test_a_valid_answer_passes_for_every_task(task: str) -> None:
    check_output(task, "org/model", VALID[task])


@pytest.mark.parametrize(
    "blob",
    [
        Blob("video", "image/gif", _gif()),  # what many text-to-video models return
        Blob("video", "video/mp4", _mp4()),
        Blob("audio", "audio/mpeg", sample_mp3()),
    ],
    ids=["gif", "mp4", "mp3"],
)
def test_other_playable_media_pass(blob: Blob) -> None:
    task = "text-to-video" if blob.kind == "video" else "text-to-speech"
    check_output(task, "org/model", TaskResult(media=(blob,)))


def fails(task: str, result: TaskResult, message: str) -> TaskFailed:
    with pytest.raises(TaskFailed) as info:
        check_output(task, "org/m", result)
    assert error_text(info.value) == message  # what a person reads, worded by the adapters
    assert info.value.retryable and not info.value.final
    return info.value


@pytest.mark.parametrize(
    ("task", "blob", "message"),
    [
        (
            "text-to-speech",
            Blob("audio", "audio/flac", HTML_PAGE),
            "model org/m returned an HTML page instead of audio",
        ),
        (
            "text-to-image",
            Blob("image", "image/png", JSON_ERROR),
            "model org/m returned an error message (JSON) instead of an image",
        ),
        (
            "text-to-video",
            Blob("video", "video/mp4", b""),
            "model org/m returned an empty response instead of a video",
        ),
        (
            "text-to-speech",
            Blob("audio", "audio/flac", sample_png()),
            "model org/m returned a PNG image instead of audio",
        ),
        (
            "text-to-image",
            Blob("image", "image/png", sample_wav()),
            "model org/m returned a WAV audio file instead of an image",
        ),
        (
            "text-to-video",
            Blob("video", "video/mp4", sample_jpeg()),
            "model org/m returned a JPG image instead of a video",
        ),
        (
            "text-to-video",
            Blob("video", "video/mp4", sample_wav()),
            "model org/m returned a file with no video in it instead of a video",
        ),
        (
            "text-to-speech",
            Blob("audio", "audio/wav", sample_wav()[:12] + bytes(200)),
            "model org/m returned a damaged WAV file instead of audio",
        ),
        (
            "text-to-speech",
            Blob("audio", "audio/flac", bytes(range(256)) * 4),
            "model org/m returned data that is not audio instead of audio",
        ),
        (
            "text-to-video",
            Blob("video", "video/mp4", sample_mp4()[: len(sample_mp4()) // 2]),
            "model org/m returned a damaged MP4 file instead of a video",
        ),
        (
            "text-to-image",
            Blob("image", "image/png", sample_png()[:-30]),
            "model org/m returned a damaged PNG image",
        ),
        (
            "text-to-speech",
            Blob("audio", "audio/flac", b'{"ok": true}'),
            "model org/m returned JSON data instead of audio",
        ),
        (
            "text-to-speech",
            Blob("audio", "audio/flac", b"<?xml version='1.0'?><Error>AccessDenied</Error>"),
            "model org/m returned an XML document instead of audio",
        ),
        (
            "text-to-speech",
            Blob("audio", "audio/flac", b"Internal Server Error"),
            "model org/m returned plain text instead of audio",
        ),
    ],
)
def test_media_that_is_not_what_the_task_makes_fails(task: str, blob: Blob, message: str) -> None:
    fails(task, TaskResult(media=(blob,)), message)


def test_an_image_over_the_pixel_limit_fails_without_decoding() -> None:
    with raises_saying(
        TaskFailed, r"returned an image too large to open \(the image is 64×64"
    ) as info:
        check_output("text-to-image", "org/m", TaskResult(media=(IMG,)), max_pixels=1000)
    assert (info.value.code, info.value.fields) == (
        TaskCode.OUTPUT_IMAGE_TOO_LARGE,
        {"model": "org/m", "limit": 1000, "width": 64, "height": 64},
    )


@pytest.mark.parametrize(
    ("task", "result", "message"),
    [
        ("text-to-speech", TaskResult(), "model org/m returned no audio"),
        ("text-to-speech", TaskResult(media=(IMG,)), "model org/m returned an image but no audio"),
        ("text-to-image", TaskResult(media=(WAV,)), "model org/m returned audio but no image"),
        ("text-to-video", TaskResult(media=(IMG,)), "model org/m returned an image but no video"),
        ("summarization", TaskResult(text="  \n"), "model org/m returned no text"),
        ("automatic-speech-recognition", TaskResult(), "model org/m returned no text"),
        ("image-classification", TaskResult(text="cat"), "model org/m returned no labels"),
        ("question-answering", TaskResult(answers=(Answer(""),)), "model org/m returned no answer"),
        ("image-segmentation", TaskResult(), "model org/m returned no segments"),
    ],
)
def test_missing_parts_fail(task: str, result: TaskResult, message: str) -> None:
    fails(task, result, message)


SHAPE = "of the wrong shape (missing names, or scores or coordinates that are not numbers)"


@pytest.mark.parametrize(
    ("task", "result", "what"),
    [
        ("text-classification", TaskResult(labels=(Label("", 0.5),)), "labels"),
        ("text-classification", TaskResult(labels=(Label("x", float("nan")),)), "labels"),
        ("object-detection", TaskResult(boxes=(Box("cat", 0.9, 0, 0, float("inf"), 5),)), "boxes"),
        ("object-detection", TaskResult(boxes=(Box("", 0.9, 0, 0, 5, 5),)), "boxes"),
        ("token-classification", TaskResult(entities=(Entity("x", "PER", None),)), "entities"),  # type: ignore[arg-type]
        ("question-answering", TaskResult(answers=(Answer(None),)), "answers"),  # type: ignore[arg-type]
    ],
)
def test_structured_parts_of_the_wrong_shape_fail(task: str, result: TaskResult, what: str) -> None:
    fails(task, result, f"model org/m returned {what} {SHAPE}")


def test_a_segment_mask_that_is_not_an_image_fails() -> None:
    fails(
        "image-segmentation",
        TaskResult(segments=(Segment("sky", 0.9, JSON_ERROR),)),
        "model org/m returned a segment mask that is not a readable image",
    )


@pytest.mark.parametrize("task", ["object-detection", "token-classification"])
def test_nothing_found_is_an_answer_where_it_can_be(task: str) -> None:
    check_output(task, "org/m", TaskResult())


def test_the_server_text_is_logged_not_shown(caplog: pytest.LogCaptureFixture) -> None:
    err = fails(
        "text-to-speech",
        TaskResult(media=(Blob("audio", "audio/flac", JSON_ERROR),)),
        "model org/m returned an error message (JSON) instead of audio",
    )
    assert "CUDA" not in str(err) and "CUDA" not in error_text(err)
    assert str(err) == (  # the terse form logs and the language model read
        "output_wrong_kind model='org/m' expected='audio' got='json_error'"
    )
    assert any("CUDA out of memory" in r.getMessage() for r in caplog.records)
