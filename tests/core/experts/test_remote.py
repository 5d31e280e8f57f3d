"""The hosted-inference expert on the task-API routes (HF_INFERENCE_URL, a model's
``endpoint``), driving the real AsyncInferenceClient against the fake.  The
Inference Providers route is tested in test_remote_providers.py."""

from __future__ import annotations

import asyncio
import base64
import io
from collections.abc import AsyncIterator, Callable

import pytest
from PIL import Image, PngImagePlugin

from adapters.chat.messages import error_text
from core.catalog import ModelInfo
from core.errors import TaskFailed
from core.experts.providers import SERVED_TASKS
from core.experts.remote import REMOTE_TASKS, RemoteExpert
from core.experts.remote_outputs import encode_image, sniff_mime
from core.results import Blob, Label, TaskInputs
from core.tasks import TASKS, TaskTimeouts
from tests.fakes.clock import FakeClock
from tests.fakes.hf_fake import FakeHF, HFCall, depth_response
from tests.fakes.samples import sample_jpeg, sample_mp4, sample_png, sample_wav
from tests.said import raises_saying

TOKEN = "hf_test_secret_token"


def png_blob() -> Blob:
    return Blob("image", "image/png", sample_png())


def wav_blob() -> Blob:
    return Blob("audio", "audio/wav", sample_wav())


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def timeouts(seconds: float) -> TaskTimeouts:
    return TaskTimeouts(seconds, seconds, seconds)


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def sleeps(clock: FakeClock) -> list[float]:
    """How long the expert asked to wait, each time (on the fake clock)."""
    return clock.sleeps


@pytest.fixture
async def expert(hf_fake: FakeHF, clock: FakeClock) -> AsyncIterator[RemoteExpert]:
    e = RemoteExpert(token=TOKEN, base_url=hf_fake.base_url, timeouts=timeouts(5), clock=clock)
    yield e
    await e.aclose()


async def run(
    fake: FakeHF, expert: RemoteExpert, task: str, model_id: str, inputs: TaskInputs, **serve
):
    fake.serve(model_id, task, **serve)
    result = await expert.run(task, ModelInfo(model_id, task), inputs)
    (call,) = fake.calls_for(model_id)
    return result, call


# --- the task table ------------------------------------------------------


def test_can_run_every_task_but_controlnet_and_video_classification() -> None:
    self_hosted = RemoteExpert(token=None, base_url="http://infer.local:8080")
    assert set(TASKS) - REMOTE_TASKS == {"controlnet-sd", "video-classification"}
    for task in TASKS:
        assert self_hosted.can_run(task) is (task in REMOTE_TASKS)


def test_the_service_offers_only_what_providers_serve() -> None:
    service = RemoteExpert(token=None)
    assert SERVED_TASKS < REMOTE_TASKS
    for task in TASKS:
        assert service.can_run(task) is (task in SERVED_TASKS)
    # a model is offered only when a provider the client can speak to serves it
    flux = ModelInfo("black-forest-labs/FLUX.1-dev", "text-to-image", providers=("fal-ai",))
    assert service.can_run("text-to-image", flux)
    assert not service.can_run("text-to-image", ModelInfo("x/y", "text-to-image"))
    assert not service.can_run(
        "text-to-image", ModelInfo("x/y", "text-to-image", providers=("cohere",))
    )
    # …and a model with its own endpoint runs there whatever the providers say
    own = ModelInfo("x/y", "audio-classification", endpoint="http://e.local/x")
    assert service.can_run("audio-classification", own)


INPUTS_FOR = {
    "text": TaskInputs(text="What is my name?\nMy name is Clara and I live in Berkeley."),
    "image": TaskInputs(text="What colour is the square?", image=png_blob()),
    "audio": TaskInputs(audio=wav_blob()),
}


@pytest.mark.parametrize("task", sorted(REMOTE_TASKS))
async def test_every_remote_task_runs_on_the_fakes_default(
    hf_fake: FakeHF, expert: RemoteExpert, task: str
) -> None:
    spec = TASKS[task]
    inputs = INPUTS_FOR[spec.args[-1] if spec.args[-1] != "text" else spec.args[0]]
    if task == "tabular-classification":
        inputs = TaskInputs(text="a,b\n1,2")
    result, call = await run(hf_fake, expert, task, f"org/{task}-model", inputs)
    assert call.headers["Authorization"] == f"Bearer {TOKEN}"
    assert result.as_text() or result.media, result


# --- NLP -----------------------------------------------------------------


async def test_text_classification(hf_fake: FakeHF, expert: RemoteExpert) -> None:
    result, call = await run(
        hf_fake, expert, "text-classification", "distilbert/sst2", TaskInputs(text=" I love it ")
    )
    assert call.json == {"inputs": "I love it", "parameters": {}}
    assert result.labels == (Label("POSITIVE", 0.9987), Label("NEGATIVE", 0.0013))
    assert result.as_text() == "POSITIVE"


async def test_token_classification(hf_fake: FakeHF, expert: RemoteExpert) -> None:
    text = "My name is Sarah and I live in London"
    result, call = await run(
        hf_fake, expert, "token-classification", "dslim/ner", TaskInputs(text=text)
    )
    assert call.json == {"inputs": text, "parameters": {}}
    assert [(e.word, e.group, e.start, e.end) for e in result.entities] == [
        ("Sarah", "PER", 11, 16),
        ("London", "LOC", 29, 35),
    ]


async def test_token_classification_without_aggregation(
    hf_fake: FakeHF, expert: RemoteExpert
) -> None:
    raw = [{"entity": "B-PER", "score": 0.9, "word": "Sarah", "start": 0, "end": 5}]
    result, _ = await run(
        hf_fake, expert, "token-classification", "x/ner", TaskInputs(text="Sarah"), response=raw
    )
    assert result.entities[0].group == "B-PER"


@pytest.mark.parametrize(
    ("task", "parameters"),
    [
        ("text2text-generation", {}),
        ("text-generation", {"return_full_text": False}),
        ("conversational", {"return_full_text": False}),
    ],
)
async def test_generation_tasks(
    hf_fake: FakeHF, expert: RemoteExpert, task: str, parameters: dict
) -> None:
    result, call = await run(hf_fake, expert, task, "org/gen", TaskInputs(text="Hello there"))
    assert call.json == {"inputs": "Hello there", "parameters": parameters}
    assert result.text == "A generated reply from the fake model."


async def test_summarization(hf_fake: FakeHF, expert: RemoteExpert) -> None:
    result, call = await run(
        hf_fake, expert, "summarization", "facebook/bart-large-cnn", TaskInputs(text="Long text.")
    )
    assert call.json == {"inputs": "Long text.", "parameters": {}}
    assert result.text == "A short summary of the text."


@pytest.mark.parametrize(
    ("model_id", "text", "body"),
    [
        (
            "Helsinki-NLP/opus-mt-en-fr",
            "Translate to French: Hello world",
            {"inputs": "Hello world", "parameters": {}},
        ),
        (
            "t5-base",
            "Translate this into French:\nHello world",
            {"inputs": "translate English to French: Hello world", "parameters": {}},
        ),
        (
            "facebook/nllb-200-distilled-600M",
            "translate 'Hello world' from English into French.",
            {
                "inputs": "Hello world",
                "parameters": {"src_lang": "eng_Latn", "tgt_lang": "fra_Latn"},
            },
        ),
        (
            "facebook/m2m100_418M",
            "Translate to German: Hello world",
            {"inputs": "Hello world", "parameters": {"src_lang": "en", "tgt_lang": "de"}},
        ),
        (
            "Helsinki-NLP/opus-mt-en-de",
            "Good morning",
            {"inputs": "Good morning", "parameters": {}},
        ),
    ],
)
async def test_translation(
    hf_fake: FakeHF, expert: RemoteExpert, model_id: str, text: str, body: dict
) -> None:
    result, call = await run(hf_fake, expert, "translation", model_id, TaskInputs(text=text))
    assert call.json == body
    assert result.text == "Bonjour le monde."


@pytest.mark.parametrize(
    "text",
    [
        "What is my name?\nMy name is Clara and I live in Berkeley.",
        "question: What is my name? context: My name is Clara and I live in Berkeley.",
        "Context: My name is Clara and I live in Berkeley.\nQuestion: What is my name?",
        "What is my name? My name is Clara and I live in Berkeley.",
    ],
)
async def test_question_answering(hf_fake: FakeHF, expert: RemoteExpert, text: str) -> None:
    result, call = await run(
        hf_fake, expert, "question-answering", "deepset/roberta-base-squad2", TaskInputs(text=text)
    )
    assert call.json == {
        "inputs": {
            "question": "What is my name?",
            "context": "My name is Clara and I live in Berkeley.",
        },
        "parameters": {},
    }
    assert result.answers[0].answer == "Clara"
    assert result.answers[0].score == pytest.approx(0.9327)


async def test_question_answering_without_context_is_refused(
    hf_fake: FakeHF, expert: RemoteExpert
) -> None:
    hf_fake.serve("qa/model", "question-answering")
    with raises_saying(TaskFailed, "question and a context") as info:
        await expert.run(
            "question-answering",
            ModelInfo("qa/model", "question-answering"),
            TaskInputs(text="Who?"),
        )
    assert info.value.retryable is False
    assert hf_fake.calls == []


async def test_tabular_classification(hf_fake: FakeHF, expert: RemoteExpert) -> None:
    csv_text = "fixed_acidity; alcohol\n7.4; 9.4\n7.8; 9.8\n"
    result, call = await run(
        hf_fake,
        expert,
        "tabular-classification",
        "julien-c/wine-quality",
        TaskInputs(text=csv_text),
    )
    assert call.json == {
        "table": {"fixed_acidity": ["7.4", "7.8"], "alcohol": ["9.4", "9.8"]},
        "parameters": {},
    }
    assert result.text == "5, 5"
    assert result.extra == {"predictions": ["5", "5"]}


async def test_tabular_rejects_ragged_csv(hf_fake: FakeHF, expert: RemoteExpert) -> None:
    hf_fake.serve("t/m", "tabular-classification")
    with raises_saying(TaskFailed, "CSV"):
        await expert.run(
            "tabular-classification",
            ModelInfo("t/m", "tabular-classification"),
            TaskInputs(text="a,b\n1"),
        )


# --- vision --------------------------------------------------------------


async def test_image_to_text_sends_raw_bytes(hf_fake: FakeHF, expert: RemoteExpert) -> None:
    result, call = await run(
        hf_fake, expert, "image-to-text", "nlpconnect/vit-gpt2", TaskInputs(image=png_blob())
    )
    assert call.body == sample_png()
    assert call.json is None
    assert result.text == "a red square on a white background"


async def test_text_to_image(hf_fake: FakeHF, expert: RemoteExpert) -> None:
    result, call = await run(
        hf_fake, expert, "text-to-image", "runwayml/sd", TaskInputs(text="a red square")
    )
    assert call.json == {"inputs": "a red square", "parameters": {}}
    assert call.headers["Accept"] == "image/png"
    (blob,) = result.media
    assert (blob.kind, blob.mime) == ("image", "image/png")
    img = Image.open(io.BytesIO(blob.data))
    assert img.size == (64, 64)
    assert img.convert("RGB").getpixel((32, 32)) == (255, 0, 0)


async def test_text_to_image_keeps_jpeg(hf_fake: FakeHF, expert: RemoteExpert) -> None:
    result, _ = await run(
        hf_fake, expert, "text-to-image", "x/sd", TaskInputs(text="x"), response=sample_jpeg()
    )
    assert result.media[0].mime == "image/jpeg"
    assert sniff_mime(result.media[0].data) == "image/jpeg"


async def test_visual_question_answering(hf_fake: FakeHF, expert: RemoteExpert) -> None:
    inputs = TaskInputs(text="What colour is the square?", image=png_blob())
    result, call = await run(hf_fake, expert, "visual-question-answering", "dandelin/vilt", inputs)
    assert call.json == {
        "inputs": b64(sample_png()),
        "parameters": {},
        "question": "What colour is the square?",
        "image": b64(sample_png()),
    }
    assert [a.answer for a in result.answers] == ["red", "orange"]


async def test_document_question_answering(hf_fake: FakeHF, expert: RemoteExpert) -> None:
    inputs = TaskInputs(text="What is the total?", image=png_blob())
    result, call = await run(
        hf_fake, expert, "document-question-answering", "impira/layoutlm", inputs
    )
    assert call.json == {
        "inputs": {"question": "What is the total?", "image": b64(sample_png())},
        "parameters": {},
    }
    assert result.as_text() == "$1,250.00"


async def test_image_segmentation_masks_are_png(hf_fake: FakeHF, expert: RemoteExpert) -> None:
    result, call = await run(
        hf_fake, expert, "image-segmentation", "nvidia/segformer", TaskInputs(image=png_blob())
    )
    assert call.body == sample_png()
    assert [s.label for s in result.segments] == ["square", "background"]
    mask = Image.open(io.BytesIO(result.segments[0].mask or b""))
    assert mask.format == "PNG" and mask.size == (64, 64)
    assert mask.getpixel((32, 32)) == 255 and mask.getpixel((0, 0)) == 0


async def test_image_classification(hf_fake: FakeHF, expert: RemoteExpert) -> None:
    result, call = await run(
        hf_fake, expert, "image-classification", "google/vit", TaskInputs(image=png_blob())
    )
    assert call.body == sample_png()
    assert result.labels[0] == Label("tabby, tabby cat", 0.9102)


@pytest.mark.parametrize("prompt", ["make it blue", None])
async def test_image_to_image(hf_fake: FakeHF, expert: RemoteExpert, prompt: str | None) -> None:
    inputs = TaskInputs(text=prompt, image=png_blob())
    result, call = await run(hf_fake, expert, "image-to-image", "timbrooks/pix2pix", inputs)
    if prompt:
        assert call.json == {"inputs": b64(sample_png()), "parameters": {"prompt": prompt}}
    else:
        assert call.body == sample_png()
    assert result.media[0].mime == "image/png"


async def test_object_detection(hf_fake: FakeHF, expert: RemoteExpert) -> None:
    result, call = await run(
        hf_fake, expert, "object-detection", "facebook/detr-resnet-50", TaskInputs(image=png_blob())
    )
    assert call.body == sample_png()
    box = result.boxes[0]
    assert (box.label, box.xmin, box.ymin, box.xmax, box.ymax) == ("cat", 16, 16, 47, 47)
    assert result.as_text() == "cat, remote"


# --- depth (no client method: raw image POSTed through the hub session) ---


def _depth_shapes(call: HFCall) -> dict[str, object]:
    full = depth_response(call)
    return {
        "both": full,
        "values": {"predicted_depth": full["predicted_depth"]},
        "image": {"depth": full["depth"]},
        "list": [full],
    }


@pytest.mark.parametrize("shape", ["both", "values", "image", "list"])
async def test_depth_estimation(hf_fake: FakeHF, expert: RemoteExpert, shape: str) -> None:
    photo = sample_png(48, 32)
    result, call = await run(
        hf_fake,
        expert,
        "depth-estimation",
        "Intel/dpt-large",
        TaskInputs(image=Blob("image", "image/png", photo)),
        response=lambda c: _depth_shapes(c)[shape],
    )
    assert call.body == photo  # the raw image, as the client sends image tasks
    assert call.headers["Authorization"] == f"Bearer {TOKEN}"
    (blob,) = result.media
    assert (blob.kind, blob.mime) == ("image", "image/png")
    im = Image.open(io.BytesIO(blob.data))
    assert im.format == "PNG" and im.mode == "RGB" and im.size == (48, 32)
    column = [im.getpixel((10, y)) for y in range(32)]
    assert len(set(column)) > 10, "far-to-near rows get different colours"
    assert im.getpixel((0, 5)) == im.getpixel((47, 5))
    if shape == "image":  # grey levels only: the range says so
        assert result.extra == {
            "depth_scale": "relative (grey levels of a depth image)",
            "depth_min": 0.0,
            "depth_max": 255.0,
        }
    else:
        assert result.extra == {"depth_min": 1.0, "depth_max": 10.0}
    assert result.summary()["depth_max"] == result.extra["depth_max"]


async def test_depth_estimation_errors_are_mapped_too(
    hf_fake: FakeHF, expert: RemoteExpert
) -> None:
    hf_fake.serve("Intel/dpt-hybrid-midas", "depth-estimation")
    hf_fake.fail("Intel/dpt-hybrid-midas", status=401)
    model = ModelInfo("Intel/dpt-hybrid-midas", "depth-estimation")
    with raises_saying(TaskFailed, r"refused the credentials \(HTTP 401\)") as info:
        await expert.run("depth-estimation", model, TaskInputs(image=png_blob()))
    assert TOKEN not in str(info.value) and TOKEN not in error_text(info.value)
    with raises_saying(TaskFailed, "depth-estimation needs an image") as info:
        await expert.run("depth-estimation", model, TaskInputs(text="x"))
    assert info.value.retryable is False
    assert len(hf_fake.calls) == 1  # the refused input made no call


# --- video and audio -----------------------------------------------------


async def test_text_to_video(hf_fake: FakeHF, expert: RemoteExpert) -> None:
    result, call = await run(
        hf_fake, expert, "text-to-video", "damo-vilab/t2v", TaskInputs(text="a sliding square")
    )
    assert call.json == {"inputs": "a sliding square", "parameters": {}}
    (blob,) = result.media
    assert (blob.kind, blob.mime, blob.data) == ("video", "video/mp4", sample_mp4())


async def test_text_to_speech(hf_fake: FakeHF, expert: RemoteExpert) -> None:
    result, call = await run(
        hf_fake, expert, "text-to-speech", "espnet/vits", TaskInputs(text="Hello there")
    )
    assert call.json == {"inputs": "Hello there", "parameters": {}}
    (blob,) = result.media
    assert (blob.kind, blob.mime, blob.data) == ("audio", "audio/wav", sample_wav())


async def test_audio_classification(hf_fake: FakeHF, expert: RemoteExpert) -> None:
    result, call = await run(
        hf_fake, expert, "audio-classification", "MIT/ast", TaskInputs(audio=wav_blob())
    )
    assert call.body == sample_wav()
    assert result.labels[0].label == "dog_bark"


async def test_speech_recognition(hf_fake: FakeHF, expert: RemoteExpert) -> None:
    result, call = await run(
        hf_fake,
        expert,
        "automatic-speech-recognition",
        "openai/whisper",
        TaskInputs(audio=wav_blob()),
    )
    assert call.body == sample_wav()
    assert result.text == "hello world"


async def test_audio_to_audio(hf_fake: FakeHF, expert: RemoteExpert) -> None:
    result, call = await run(
        hf_fake, expert, "audio-to-audio", "speechbrain/metricgan", TaskInputs(audio=wav_blob())
    )
    assert call.body == sample_wav()
    (blob,) = result.media
    assert (blob.kind, blob.mime, blob.data) == ("audio", "audio/wav", sample_wav())
    assert result.extra == {"audio_labels": ["speech_enhanced"]}


# --- routing, credentials, failures --------------------------------------


async def test_endpoint_override_is_called_instead_of_the_base(
    hf_fake: FakeHF, expert: RemoteExpert
) -> None:
    hf_fake.serve("endpoints/my-sst2", "text-classification")
    model = ModelInfo(
        "org/sst2", "text-classification", endpoint=f"{hf_fake.base_url}/endpoints/my-sst2"
    )
    result = await expert.run("text-classification", model, TaskInputs(text="great"))
    assert result.labels
    assert [c.path for c in hf_fake.calls] == ["endpoints/my-sst2"]
    assert hf_fake.calls_for("org/sst2") == []


def test_urls() -> None:
    hosted = RemoteExpert(token=None, base_url=None)
    model = ModelInfo("google/vit-base-patch16-224", "image-classification")
    assert hosted.url_for(model) is None  # Inference Providers: the client routes by id
    custom = RemoteExpert(token=None, base_url="http://infer.local:8080/")
    assert custom.url_for(model) == "http://infer.local:8080/models/google/vit-base-patch16-224"


async def test_no_token_sends_no_bearer_of_ours(hf_fake: FakeHF, monkeypatch) -> None:
    monkeypatch.delenv("HF_TOKEN", raising=False)
    expert = RemoteExpert(token=None, base_url=hf_fake.base_url, timeouts=timeouts(5))
    try:
        await run(hf_fake, expert, "text-classification", "a/b", TaskInputs(text="x"))
    finally:
        await expert.aclose()
    assert TOKEN not in hf_fake.calls[0].headers.get("Authorization", "")


@pytest.mark.parametrize(
    ("status", "words"),
    [
        (401, "refused the credentials (HTTP 401)"),
        (422, "rejected the input (HTTP 422)"),
        (500, "failed on the server (HTTP 500)"),
    ],
)
async def test_http_errors_become_task_failed(
    hf_fake: FakeHF, expert: RemoteExpert, status: int, words: str
) -> None:
    hf_fake.serve("org/flaky", "image-classification")
    hf_fake.fail("org/flaky", status=status)
    model = ModelInfo("org/flaky", "image-classification")
    with pytest.raises(TaskFailed) as info:
        await expert.run("image-classification", model, TaskInputs(image=png_blob()))
    message = error_text(info.value)
    assert message == f"model org/flaky {words}" or message.startswith(f"model org/flaky {words}")
    assert TOKEN not in message
    assert info.value.retryable is True
    # The failure was used up: the next call succeeds.
    assert (await expert.run("image-classification", model, TaskInputs(image=png_blob()))).labels


@pytest.mark.parametrize(
    ("status", "body", "headers", "waited"),
    [
        (503, {"error": "Model org/m is currently loading", "estimated_time": 12.5}, None, 12.5),
        (503, {"error": "loading", "estimated_time": 400.0}, None, 30.0),  # capped
        (429, {"error": "slow down"}, {"Retry-After": "7"}, 7.0),
    ],
)
async def test_loading_and_rate_limits_are_waited_for_then_retried(
    hf_fake: FakeHF,
    expert: RemoteExpert,
    sleeps: list[float],
    status: int,
    body: dict[str, object],
    headers: dict[str, str] | None,
    waited: float,
) -> None:
    hf_fake.serve("org/m", "image-classification")
    hf_fake.fail("org/m", status=status, body=body, headers=headers)
    model = ModelInfo("org/m", "image-classification")
    result = await expert.run("image-classification", model, TaskInputs(image=png_blob()))
    assert result.labels
    assert sleeps == [waited]
    assert len(hf_fake.calls_for("org/m")) == 2


async def test_waits_are_bounded_then_the_model_fails(
    hf_fake: FakeHF, expert: RemoteExpert, sleeps: list[float]
) -> None:
    hf_fake.serve("org/m", "image-classification")
    hf_fake.fail("org/m", status=503, times=-1)  # loading forever
    with raises_saying(TaskFailed, r"is loading or unavailable \(HTTP 503\)"):
        await expert.run(
            "image-classification",
            ModelInfo("org/m", "image-classification"),
            TaskInputs(image=png_blob()),
        )
    assert len(sleeps) == 3
    assert len(hf_fake.calls_for("org/m")) == 4


async def test_out_of_credits_says_where_to_top_up_and_is_final(
    hf_fake: FakeHF, expert: RemoteExpert, sleeps: list[float]
) -> None:
    hf_fake.serve("org/m", "summarization")
    hf_fake.fail("org/m", status=402, body={"error": "You have exceeded your monthly credits"})
    with pytest.raises(TaskFailed) as info:
        await expert.run("summarization", ModelInfo("org/m", "summarization"), TaskInputs(text="x"))
    assert "used up its Inference Providers credits (HTTP 402" in error_text(info.value)
    assert "huggingface.co/settings/billing" in error_text(info.value)
    assert info.value.final  # the next model would cost a call and fail the same
    assert sleeps == []


@pytest.mark.parametrize("status", [404, 410])
async def test_not_served_models_are_skipped_from_then_on(
    hf_fake: FakeHF, expert: RemoteExpert, status: int
) -> None:
    hf_fake.serve("org/gone", "summarization")
    hf_fake.fail("org/gone", status=status)
    model = ModelInfo("org/gone", "summarization")
    assert expert.can_run("summarization", model)
    with raises_saying(TaskFailed, f"HTTP {status}"):
        await expert.run("summarization", model, TaskInputs(text="x"))
    assert not expert.can_run("summarization", model)
    assert expert.directory.why_dead("org/gone") == f"HTTP {status} from the service"


async def test_unknown_model_is_404(hf_fake: FakeHF, expert: RemoteExpert) -> None:
    with raises_saying(TaskFailed, r"model nobody/nothing is not served .*\(HTTP 404\)"):
        await expert.run(
            "summarization", ModelInfo("nobody/nothing", "summarization"), TaskInputs(text="x")
        )


async def test_timeout_fails_quickly(hf_fake: FakeHF) -> None:
    hf_fake.serve("slow/model", "summarization", delay=3)
    expert = RemoteExpert(token=TOKEN, base_url=hf_fake.base_url, timeouts=timeouts(0.3))
    try:  # the message names the 0.3 s limit: the call gave up then, not after the 3 s answer
        with raises_saying(TaskFailed, r"model slow/model timed out after 0.3 s"):
            await expert.run(
                "summarization", ModelInfo("slow/model", "summarization"), TaskInputs(text="x")
            )
    finally:
        await expert.aclose()


@pytest.mark.parametrize(
    ("task", "inputs", "response", "content_type"),
    [
        ("text-classification", TaskInputs(text="x"), "{not json", "application/json"),
        ("image-classification", TaskInputs(image=png_blob()), {"unexpected": "shape"}, None),
        ("question-answering", TaskInputs(text="Q?\nC"), [1, 2, 3], None),
        ("text-to-image", TaskInputs(text="x"), b"definitely not an image", "image/png"),
        ("depth-estimation", TaskInputs(image=png_blob()), b"\x89PNG raw bytes", "image/png"),
        ("depth-estimation", TaskInputs(image=png_blob()), {"unexpected": "shape"}, None),
        ("depth-estimation", TaskInputs(image=png_blob()), {"predicted_depth": [1, 2]}, None),
        ("depth-estimation", TaskInputs(image=png_blob()), {"depth": "no base64!"}, None),
        ("depth-estimation", TaskInputs(image=png_blob()), {"depth": b64(b"not png")}, None),
        ("depth-estimation", TaskInputs(image=png_blob()), [{"a": 1}, {"b": 2}], None),
    ],
)
async def test_unreadable_responses_become_task_failed(
    hf_fake: FakeHF, expert: RemoteExpert, task: str, inputs: TaskInputs, response, content_type
) -> None:
    hf_fake.serve("bad/model", task, response, content_type=content_type)
    with raises_saying(TaskFailed, "model bad/model returned a response that could not be read"):
        await expert.run(task, ModelInfo("bad/model", task), inputs)


async def test_unreachable_server(unused_tcp_port: int) -> None:
    expert = RemoteExpert(
        token=TOKEN, base_url=f"http://127.0.0.1:{unused_tcp_port}", timeouts=timeouts(5)
    )
    try:
        with raises_saying(TaskFailed, "could not reach the inference service for model a/b"):
            await expert.run(
                "summarization", ModelInfo("a/b", "summarization"), TaskInputs(text="x")
            )
    finally:
        await expert.aclose()


async def test_missing_input_is_refused_without_a_call(
    hf_fake: FakeHF, expert: RemoteExpert
) -> None:
    with raises_saying(TaskFailed, "image-classification needs an image") as info:
        await expert.run(
            "image-classification", ModelInfo("a/b", "image-classification"), TaskInputs(text="x")
        )
    assert info.value.retryable is False
    with raises_saying(TaskFailed, "cannot run"):
        await expert.run("controlnet-sd", ModelInfo("a/b", "controlnet-sd"), TaskInputs(text="x"))
    assert hf_fake.calls == []


async def test_calls_run_concurrently_on_one_client(hf_fake: FakeHF, expert: RemoteExpert) -> None:
    hf_fake.serve("org/slow", "summarization", delay=0.3)
    model = ModelInfo("org/slow", "summarization")
    results = await asyncio.gather(
        *(expert.run("summarization", model, TaskInputs(text=f"text {i}")) for i in range(3))
    )
    assert all(r.text for r in results)
    calls = hf_fake.calls_for("org/slow")
    assert len(calls) == 3
    # All three were in flight at once: each started before any finished.
    assert max(c.t_start for c in calls) < min(c.t_end for c in calls)


def test_sniff_mime() -> None:
    assert sniff_mime(sample_png()) == "image/png"
    assert sniff_mime(sample_jpeg()) == "image/jpeg"
    assert sniff_mime(sample_wav()) == "audio/wav"
    assert sniff_mime(sample_mp4()) == "video/mp4"
    assert sniff_mime(b"fLaC\x00\x00") == "audio/flac"
    assert sniff_mime(b"OggS\x00") == "audio/ogg"
    assert sniff_mime(b"ID3\x03") == "audio/mpeg"
    assert sniff_mime(b"\x1a\x45\xdf\xa3\x9f\x42\x82\x84webm") == "video/webm"
    assert sniff_mime(b"????", "audio/flac") == "audio/flac"


async def test_text_to_video_errors_are_mapped_too(hf_fake: FakeHF, expert: RemoteExpert) -> None:
    """text-to-video goes through the hub session, not the client: same mapping."""
    hf_fake.serve("damo/t2v", "text-to-video", delay=0.2)
    hf_fake.fail("damo/t2v", status=503, body={"error": "overloaded"})  # no estimate: no wait
    model = ModelInfo("damo/t2v", "text-to-video")
    with raises_saying(TaskFailed, r"model damo/t2v is loading or unavailable \(HTTP 503\)"):
        await expert.run("text-to-video", model, TaskInputs(text="x"))
    slow = RemoteExpert(token=TOKEN, base_url=hf_fake.base_url, timeouts=timeouts(0.05))
    try:
        with raises_saying(TaskFailed, "timed out"):
            await slow.run("text-to-video", model, TaskInputs(text="x"))
    finally:
        await slow.aclose()


def provider_png() -> bytes:
    """A PNG as a provider may write it (its own compression, a text chunk):
    bytes that decoding and encoding again would not give back."""
    info = PngImagePlugin.PngInfo()
    info.add_text("parameters", "a red square, 20 steps")
    buf = io.BytesIO()
    Image.new("RGB", (64, 64), (255, 0, 0)).save(buf, "PNG", pnginfo=info, compress_level=1)
    return buf.getvalue()


@pytest.mark.parametrize("sample", [provider_png, sample_jpeg], ids=["png", "jpeg"])
async def test_a_made_picture_is_kept_as_the_provider_sent_it(
    hf_fake: FakeHF, expert: RemoteExpert, sample: Callable[[], bytes]
) -> None:
    """The provider's own bytes, not the picture decoded and compressed again
    (the Hub client hands over a PIL image opened from them)."""
    result, _ = await run(
        hf_fake, expert, "text-to-image", "x/sd", TaskInputs(text="x"), response=sample()
    )
    assert result.media[0].data == sample()


def test_a_changed_picture_is_encoded_again() -> None:
    """Only an image still holding the file it came from is passed on as is."""
    img = Image.open(io.BytesIO(sample_png()))
    img.load()  # Pillow lets go of the file: the pixels are what there is
    img.putpixel((0, 0), (0, 0, 255))
    data, mime = encode_image(img)
    assert mime == "image/png"
    assert Image.open(io.BytesIO(data)).convert("RGB").getpixel((0, 0)) == (0, 0, 255)
