"""Image+text and speech generation tasks on tiny models, through LocalExpert.run.

Each tiny model mirrors a model of the default catalog: vit-gpt2 and BLIP
captioners, ViLT and BLIP VQA, a Donut document reader, a VITS (MMS) voice.
Decoders are scripted or biased (see ``tiny_models``) so their text is known.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from core.errors import TaskFailed
from core.experts.audio import audio_duration
from core.experts.local import LocalExpert
from core.experts.local_tasks import MAX_NEW_TOKENS
from core.results import TaskInputs
from tests.core.experts.local import tiny_models
from tests.core.experts.local.inputs import model, png
from tests.said import raises_saying

pytestmark = pytest.mark.local


def _repeats(text: str, word: str) -> bool:
    """``text`` is ``word`` again and again until the backend's token limit (a
    forced first or last special token may take one place)."""
    words = text.split()
    return set(words) == {word} and MAX_NEW_TOKENS - 2 <= len(words) <= MAX_NEW_TOKENS


QUESTION = "what is the cat doing?"


async def test_image_to_text_vision_encoder_decoder(
    expert: LocalExpert, vit_gpt2_captioner: Path
) -> None:
    """vit-gpt2 ships no processor, which the image-text-to-text pipeline needs."""
    m = model("image-to-text", vit_gpt2_captioner)
    assert expert.can_run("image-to-text", m)
    result = await expert.run("image-to-text", m, TaskInputs(image=png()))
    assert result.text == "hello world"


async def test_image_to_text_blip_without_a_prompt(
    expert: LocalExpert, blip_captioner: Path
) -> None:
    """The image-text-to-text pipeline insists on a prompt; a captioner needs none."""
    m = model("image-to-text", blip_captioner)
    result = await expert.run("image-to-text", m, TaskInputs(image=png()))
    assert result.text is not None
    assert _repeats(result.text, "cat")


async def test_image_to_text_needs_an_image(expert: LocalExpert, vit_gpt2_captioner: Path) -> None:
    m = model("image-to-text", vit_gpt2_captioner)
    with raises_saying(TaskFailed, "needs an image"):
        await expert.run("image-to-text", m, TaskInputs(text="a caption please"))


async def test_vqa_classifier(expert: LocalExpert, vilt_vqa: Path) -> None:
    m = model("visual-question-answering", vilt_vqa)
    assert expert.can_run("visual-question-answering", m)
    inputs = TaskInputs(text=QUESTION, image=png())
    result = await expert.run("visual-question-answering", m, inputs)
    assert {a.answer for a in result.answers} == set(tiny_models.VQA_LABELS.values())
    scores = [a.score or 0.0 for a in result.answers]
    assert scores == sorted(scores, reverse=True) and sum(scores) == pytest.approx(1.0, abs=1e-4)
    assert result.as_text() == result.answers[0].answer


async def test_vqa_generative_blip(expert: LocalExpert, blip_vqa: Path) -> None:
    """BLIP's VQA model writes its answer rather than scoring a label set."""
    m = model("visual-question-answering", blip_vqa)
    inputs = TaskInputs(text=QUESTION, image=png())
    result = await expert.run("visual-question-answering", m, inputs)
    (answer,) = result.answers
    assert _repeats(answer.answer, "cat")
    assert answer.score is None


async def test_document_question_answering_donut(expert: LocalExpert, donut: Path) -> None:
    """Donut reads the page itself (no OCR) and tags its answer."""
    m = model("document-question-answering", donut)
    assert expert.can_run("document-question-answering", m)
    inputs = TaskInputs(text="what is the total?", image=png((64, 80)))
    result = await expert.run("document-question-answering", m, inputs)
    (answer,) = result.answers
    assert answer.answer == "hello"  # between <s_answer> and </s_answer>
    assert answer.score is None  # Donut gives none; not a made-up 0.0


async def test_document_question_answering_layoutlm_without_ocr(
    expert: LocalExpert, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """LayoutLM needs Tesseract for words and boxes: without it the failure says
    so (and stays retryable, so the executor tries a Donut model next)."""
    import transformers.utils

    monkeypatch.setattr(transformers.utils, "is_pytesseract_available", lambda: False)
    path = tiny_models.config_only(tmp_path / "layoutlm", "layoutlm")
    m = model("document-question-answering", path)
    with raises_saying(TaskFailed, "needs Tesseract OCR") as info:
        await expert.run("document-question-answering", m, TaskInputs(text="total?", image=png()))
    assert info.value.retryable


async def test_text_to_speech_vits(expert: LocalExpert, vits_tts: Path) -> None:
    m = model("text-to-speech", vits_tts)
    assert expert.can_run("text-to-speech", m)
    result = await expert.run("text-to-speech", m, TaskInputs(text="hello world"))
    audio = result.media_of("audio")
    assert audio is not None and audio.mime in {"audio/ogg", "audio/mpeg", "audio/wav"}
    assert audio_duration(audio.data) > 0
    assert result.text is None and not result.answers


async def test_text_to_speech_speecht5_fails_clearly(expert: LocalExpert, tmp_path: Path) -> None:
    """SpeechT5 needs a vocoder and speaker x-vectors the pipeline would fetch
    from the Hub: refuse before trying the network."""
    path = tiny_models.config_only(tmp_path / "speecht5", "speecht5")
    m = model("text-to-speech", path)
    with raises_saying(TaskFailed, "SpeechT5 needs a separate HiFi-GAN vocoder"):
        await expert.run("text-to-speech", m, TaskInputs(text="hello"))
    assert expert.cached() == []
