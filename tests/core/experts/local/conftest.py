"""Fixtures of the local-inference tests: tiny models built once per session.

These tests need the ``local`` extra (torch, transformers, diffusers), which
the shared dev virtualenv does not have.  Outside CI they are skipped when it
is missing; in CI (``CI`` set) they run regardless, so a missing install
fails loudly instead of hiding the feature.
"""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Callable
from pathlib import Path

import pytest

from core.experts.local import LocalExpert

STACK = ("torch", "transformers", "diffusers")
MISSING = [m for m in STACK if importlib.util.find_spec(m) is None]
HERE = Path(__file__).parent


# Without the local extra these modules cannot even be imported (torch), so
# outside CI they are left out of collection and the header says why; in CI
# (``CI`` set) they are collected regardless and a missing install fails loudly.
collect_ignore_glob = ["test_*.py"] if MISSING and not os.environ.get("CI") else []


def pytest_report_header(config: pytest.Config) -> str | None:
    if collect_ignore_glob:
        return (
            f"local-inference tests not collected: {', '.join(MISSING)} missing "
            "(make test-local runs them in .venv-local)"
        )
    return None


def _build(factory: pytest.TempPathFactory, name: str, builder: str) -> Path:
    from tests.core.experts.local import tiny_models

    build: Callable[[Path], Path] = getattr(tiny_models, builder)
    return build(factory.mktemp("models") / name)


@pytest.fixture(scope="session")
def models_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """LOCAL_MODELS_DIR of these tests: ids resolve under it."""
    return tmp_path_factory.mktemp("local_models")


@pytest.fixture(scope="session")
def text_classifier(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _build(tmp_path_factory, "text-cls", "text_classifier")


@pytest.fixture(scope="session")
def token_classifier(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _build(tmp_path_factory, "token-cls", "token_classifier")


@pytest.fixture(scope="session")
def question_answerer(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _build(tmp_path_factory, "qa", "question_answerer")


@pytest.fixture(scope="session")
def image_classifier(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _build(tmp_path_factory, "image-cls", "image_classifier")


@pytest.fixture(scope="session")
def object_detector(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _build(tmp_path_factory, "detector", "object_detector")


@pytest.fixture(scope="session")
def segmenter(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _build(tmp_path_factory, "segmenter", "segmenter")


@pytest.fixture(scope="session")
def depth_estimator(models_root: Path) -> Path:
    """Under LOCAL_MODELS_DIR (``tiny--glpn-depth``), so LOCAL_DEPTH_MODEL can name it by id."""
    from tests.core.experts.local import tiny_models

    return tiny_models.depth_estimator(models_root / "tiny--glpn-depth")


@pytest.fixture(scope="session")
def video_classifier(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _build(tmp_path_factory, "video-cls", "video_classifier")


@pytest.fixture(scope="session")
def audio_classifier(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _build(tmp_path_factory, "audio-cls", "audio_classifier")


@pytest.fixture(scope="session")
def speech_recognizer(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _build(tmp_path_factory, "asr", "speech_recognizer")


@pytest.fixture(scope="session")
def stable_diffusion(models_root: Path) -> Path:
    """Saved as the ControlNet base id resolves: ``owner/name`` under the root."""
    from tests.core.experts.local import tiny_models

    return tiny_models.stable_diffusion(models_root / "tiny" / "stable-diffusion")


@pytest.fixture(scope="session")
def canny_controlnet(models_root: Path, stable_diffusion: Path) -> Path:
    """A bare ControlNet in the ``owner--name`` layout, next to its base model."""
    from tests.core.experts.local import tiny_models

    return tiny_models.controlnet(models_root / "tiny--sd-controlnet-canny")


@pytest.fixture(scope="session")
def depth_controlnet(models_root: Path, stable_diffusion: Path) -> Path:
    """The same tiny ControlNet saved under a depth name: the name picks the preprocessor."""
    from tests.core.experts.local import tiny_models

    return tiny_models.controlnet(models_root / "tiny--sd-controlnet-depth")


@pytest.fixture(scope="session")
def text_to_video(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _build(tmp_path_factory, "t2v", "text_to_video")


@pytest.fixture
async def expert(models_root: Path):  # type: ignore[no-untyped-def]
    ex = LocalExpert(
        models_dir=models_root,
        max_loaded=4,
        device="cpu",
        controlnet_base="tiny/stable-diffusion",
        diffusion_steps=2,
    )
    yield ex
    await ex.aclose()


# --- generation and multimodal models (test_generation_tasks, test_multimodal_tasks) ---


@pytest.fixture(scope="session")
def chatty_gpt2(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _build(tmp_path_factory, "gpt2", "chatty_gpt2")


@pytest.fixture(scope="session")
def seq2seq_bart(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _build(tmp_path_factory, "bart", "seq2seq_bart")


@pytest.fixture(scope="session")
def vit_gpt2_captioner(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _build(tmp_path_factory, "vit-gpt2", "vit_gpt2_captioner")


@pytest.fixture(scope="session")
def donut(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _build(tmp_path_factory, "donut", "donut")


@pytest.fixture(scope="session")
def vilt_vqa(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _build(tmp_path_factory, "vilt", "vilt_vqa")


@pytest.fixture(scope="session")
def blip_vqa(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from tests.core.experts.local import tiny_models

    return tiny_models.blip(
        tmp_path_factory.mktemp("models") / "blip-vqa", "BlipForQuestionAnswering"
    )


@pytest.fixture(scope="session")
def blip_captioner(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from tests.core.experts.local import tiny_models

    return tiny_models.blip(
        tmp_path_factory.mktemp("models") / "blip-caption", "BlipForConditionalGeneration"
    )


@pytest.fixture(scope="session")
def vits_tts(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _build(tmp_path_factory, "vits", "vits")


# --- ControlNets per preprocessor (test_control): the tiny ControlNet under each name ---


def _named_controlnet(models_root: Path, name: str) -> Path:
    from tests.core.experts.local import tiny_models

    return tiny_models.controlnet(models_root / name)


@pytest.fixture(scope="session")
def seg_controlnet(models_root: Path, stable_diffusion: Path) -> Path:
    return _named_controlnet(models_root, "tiny--sd-controlnet-seg")


@pytest.fixture(scope="session")
def normal_controlnet(models_root: Path, stable_diffusion: Path) -> Path:
    return _named_controlnet(models_root, "tiny--control_v11p_sd15_normalbae")


@pytest.fixture(scope="session")
def scribble_controlnet(models_root: Path, stable_diffusion: Path) -> Path:
    return _named_controlnet(models_root, "tiny--sd-controlnet-scribble")


@pytest.fixture(scope="session")
def openpose_controlnet(models_root: Path, stable_diffusion: Path) -> Path:
    return _named_controlnet(models_root, "tiny--sd-controlnet-openpose")
