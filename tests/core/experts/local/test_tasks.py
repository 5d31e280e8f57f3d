"""Every task the local backend serves, run on a tiny model through LocalExpert.run
exactly as a user's downloaded model would be (a ModelInfo whose ``local`` is
the directory ``save_pretrained`` wrote)."""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from core.experts.local import LocalExpert
from core.experts.video import decode_video_frames, encode_video
from core.results import Blob, TaskInputs
from tests.core.experts.local.inputs import model, png, sine_wav

pytestmark = pytest.mark.local

SENTENCE = "my name is sarah and i live in london"


def _image(blob: Blob) -> Image.Image:
    assert blob.kind == "image" and blob.mime == "image/png"
    im = Image.open(io.BytesIO(blob.data))
    assert im.format == "PNG"
    return im


async def test_text_classification(expert: LocalExpert, text_classifier: Path) -> None:
    m = model("text-classification", text_classifier)
    assert expert.can_run("text-classification", m)
    result = await expert.run("text-classification", m, TaskInputs(text="a good movie"))
    assert {x.label for x in result.labels} == {"NEGATIVE", "POSITIVE"}
    assert sum(x.score for x in result.labels) == pytest.approx(1.0, abs=1e-4)
    assert result.labels[0].score >= result.labels[1].score
    assert result.as_text() == result.labels[0].label


async def test_token_classification(expert: LocalExpert, token_classifier: Path) -> None:
    m = model("token-classification", token_classifier)
    result = await expert.run("token-classification", m, TaskInputs(text=SENTENCE))
    assert result.entities, "the biased tagger marks every word a person"
    for e in result.entities:
        assert e.group == "PER"
        assert e.start is not None and e.end is not None
        assert SENTENCE[e.start : e.end] == e.word
    assert "sarah" in {e.word for e in result.entities}


async def test_question_answering(expert: LocalExpert, question_answerer: Path) -> None:
    m = model("question-answering", question_answerer)
    inputs = TaskInputs(text=f"where does sarah live?\n{SENTENCE}")
    result = await expert.run("question-answering", m, inputs)
    (answer,) = result.answers
    assert answer.answer and answer.answer in SENTENCE
    assert answer.score is not None and 0 < answer.score <= 1


async def test_image_classification(expert: LocalExpert, image_classifier: Path) -> None:
    m = model("image-classification", image_classifier)
    result = await expert.run("image-classification", m, TaskInputs(image=png()))
    assert [x.label for x in result.labels] and {x.label for x in result.labels} == {
        "cat",
        "dog",
        "bird",
    }
    scores = [x.score for x in result.labels]
    assert scores == sorted(scores, reverse=True)


async def test_object_detection(expert: LocalExpert, object_detector: Path) -> None:
    m = model("object-detection", object_detector)
    result = await expert.run("object-detection", m, TaskInputs(image=png((48, 40))))
    assert result.boxes
    for b in result.boxes:
        assert b.label == "cat" and b.score > 0.5
        assert 0 <= b.xmin <= b.xmax <= 48 and 0 <= b.ymin <= b.ymax <= 40


async def test_image_segmentation(expert: LocalExpert, segmenter: Path) -> None:
    m = model("image-segmentation", segmenter)
    result = await expert.run("image-segmentation", m, TaskInputs(image=png((48, 40))))
    assert result.segments and {s.label for s in result.segments} <= {"sky", "grass"}
    covered = np.zeros((40, 48), dtype=bool)
    for seg in result.segments:
        assert seg.mask is not None
        mask = Image.open(io.BytesIO(seg.mask))
        assert mask.format == "PNG" and mask.mode == "L" and mask.size == (48, 40)
        covered |= np.asarray(mask) > 127
    assert covered.all(), "a semantic segmentation labels every pixel"


async def test_video_classification(expert: LocalExpert, video_classifier: Path) -> None:
    frames = [np.full((32, 32, 3), 20 * i, dtype=np.uint8) for i in range(12)]
    video = Blob(kind="video", mime="video/mp4", data=encode_video(frames, fps=8))
    m = model("video-classification", video_classifier)
    assert expert.can_run("video-classification", m)
    result = await expert.run("video-classification", m, TaskInputs(video=video))
    assert {x.label for x in result.labels} == {"dancing", "cooking", "running"}
    assert sum(x.score for x in result.labels) == pytest.approx(1.0, abs=1e-4)


async def test_audio_classification(expert: LocalExpert, audio_classifier: Path) -> None:
    m = model("audio-classification", audio_classifier)
    result = await expert.run("audio-classification", m, TaskInputs(audio=sine_wav()))
    assert {x.label for x in result.labels} == {"yes", "no"}


async def test_speech_recognition(expert: LocalExpert, speech_recognizer: Path) -> None:
    m = model("automatic-speech-recognition", speech_recognizer)
    result = await expert.run("automatic-speech-recognition", m, TaskInputs(audio=sine_wav()))
    assert result.text == "a"  # CTC collapses the repeated "a" of the biased head


async def test_text_to_image(expert: LocalExpert, stable_diffusion: Path) -> None:
    m = model("text-to-image", stable_diffusion)
    result = await expert.run("text-to-image", m, TaskInputs(text="a cat"))
    im = _image(result.media_of("image"))  # type: ignore[arg-type]
    assert im.size == (64, 64)  # sample_size 32 × the VAE's factor 2
    assert np.asarray(im).std() > 0, "a drawn image, not a blank one"


async def test_image_to_image_reuses_a_text_to_image_model(
    expert: LocalExpert, stable_diffusion: Path
) -> None:
    m = model("image-to-image", stable_diffusion)
    result = await expert.run("image-to-image", m, TaskInputs(text="in blue", image=png((40, 40))))
    im = _image(result.media_of("image"))  # type: ignore[arg-type]
    assert im.size == (64, 64)


async def test_controlnet_canny_with_base_from_models_dir(
    expert: LocalExpert, canny_controlnet: Path
) -> None:
    """A bare ControlNet found by id (``owner--name``) plugs into its base model,
    found by id too; the input photo goes through the canny preprocessor."""
    m = model("controlnet-sd", model_id="tiny/sd-controlnet-canny")
    assert expert.resolve(m) == canny_controlnet
    assert expert.can_run("controlnet-sd", m)
    result = await expert.run("controlnet-sd", m, TaskInputs(text="a cat", image=png((80, 60))))
    assert result.extra == {"control": "canny"}
    im = _image(result.media_of("image"))  # type: ignore[arg-type]
    assert im.size == (64, 48)  # the model's 64 px on the long side, the photo's 4:3 kept


async def test_controlnet_needs_its_base(canny_controlnet: Path, models_root: Path) -> None:
    ex = LocalExpert(models_dir=models_root, controlnet_base="nobody/missing-sd")
    m = model("controlnet-sd", canny_controlnet)
    assert not ex.can_run("controlnet-sd", m)


async def test_text_to_video(expert: LocalExpert, text_to_video: Path) -> None:
    m = model("text-to-video", text_to_video)
    result = await expert.run("text-to-video", m, TaskInputs(text="a dog running"))
    video = result.media_of("video")
    assert video is not None and video.mime == "video/mp4"
    frames = decode_video_frames(video.data, num_frames=4, size=None)
    assert len(frames) == 4 and frames[0].shape == (32, 32, 3)


def test_canny_finds_the_square_outline() -> None:
    from core.experts.local_diffusion import canny

    src = Image.open(io.BytesIO(png((48, 40)).data))
    edges = np.asarray(canny(src))[..., 0] > 0
    assert edges.any()
    ys, xs = np.nonzero(edges)
    # Edges hug the square (10..30 × 10..30), none in flat areas.
    assert xs.min() >= 7 and xs.max() <= 32 and ys.min() >= 7 and ys.max() <= 32
    assert not edges[18:22, 18:22].any() and not edges[:5].any()
