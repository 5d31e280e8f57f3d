"""ControlNet preprocessors beyond canny and depth: a seg map from the local
segmentation model (LOCAL_SEG_MODEL), a normal map from the depth model,
scribble edges, and the photo as it is (said so) for OpenPose and M-LSD."""

from __future__ import annotations

import io
import logging
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from PIL import Image

from core.errors import TaskFailed
from core.experts.local import LocalExpert
from core.results import Blob, TaskInputs, TaskResult
from tests.core.experts.local.inputs import model, png
from tests.said import raises_saying

pytestmark = pytest.mark.local

PHOTO = TaskInputs(text="a meadow", image=png((80, 60)))
SKY, GRASS = (6, 230, 230), (4, 250, 7)  # ADE20K's colours of the tiny segmenter's labels


def _pixels(blob: Blob) -> np.ndarray:
    assert blob.kind == "image" and blob.mime == "image/png"
    im = Image.open(io.BytesIO(blob.data))
    assert im.format == "PNG" and im.mode == "RGB"
    return np.asarray(im)


def _two_images(result: TaskResult) -> np.ndarray:
    """The drawing first (what later tasks take), then the control image's pixels."""
    generated, control = result.media
    assert result.media_of("image") is generated
    assert _pixels(generated).shape == (48, 64, 3)
    pixels = _pixels(control)
    assert pixels.shape == (48, 64, 3)  # the photo as the pipeline took it: 64 px, 4:3
    return pixels


@pytest.fixture
async def control_expert(
    models_root: Path, depth_estimator: Path, segmenter: Path
) -> AsyncIterator[LocalExpert]:
    ex = LocalExpert(
        models_dir=models_root,
        max_loaded=4,
        device="cpu",
        controlnet_base="tiny/stable-diffusion",
        diffusion_steps=2,
        depth_model="tiny/glpn-depth",  # an id under LOCAL_MODELS_DIR
        seg_model=str(segmenter),  # a directory
    )
    yield ex
    await ex.aclose()


async def test_seg_controlnet_draws_from_an_ade20k_coloured_map(
    control_expert: LocalExpert, seg_controlnet: Path
) -> None:
    m = model("controlnet-sd", model_id="tiny/sd-controlnet-seg")
    assert control_expert.resolve(m) == seg_controlnet
    result = await control_expert.run("controlnet-sd", m, PHOTO)
    assert result.extra == {"control": "seg"}
    pixels = _two_images(result)
    colours = {tuple(int(v) for v in c) for c in np.unique(pixels.reshape(-1, 3), axis=0)}
    assert colours and colours <= {SKY, GRASS}, "only the palette's colours of the labels"


async def test_normal_controlnet_draws_from_normals_of_the_depth_model(
    control_expert: LocalExpert, normal_controlnet: Path
) -> None:
    m = model("controlnet-sd", model_id="tiny/control_v11p_sd15_normalbae")
    result = await control_expert.run("controlnet-sd", m, PHOTO)
    assert result.extra == {"control": "normal"}
    rgb = _two_images(result).astype(int)
    assert rgb[..., 2].min() >= 127, "every normal faces the camera (z up)"
    bluish = (rgb[..., 2] > rgb[..., 0]) & (rgb[..., 2] > rgb[..., 1])
    assert bluish.mean() > 0.8
    assert len(np.unique(rgb.reshape(-1, 3), axis=0)) > 10, "a shaped surface, not one colour"


async def test_scribble_controlnet_draws_from_thick_edges(
    control_expert: LocalExpert, scribble_controlnet: Path
) -> None:
    m = model("controlnet-sd", model_id="tiny/sd-controlnet-scribble")
    result = await control_expert.run("controlnet-sd", m, PHOTO)
    assert result.extra == {"control": "scribble (edge approximation)"}
    pixels = _two_images(result)
    assert set(np.unique(pixels)) == {0, 255}, "white strokes on black"
    white = pixels[..., 0] == 255
    assert (pixels[..., 0] == pixels[..., 2]).all()
    assert 0.02 < white.mean() < 0.4, "mostly black"
    # The photo's square (10..30 of 80 px) is at 8..24 of 64 px: strokes trace it.
    assert white[:, 4:10].any() and white[:, 22:28].any()
    assert not white[:, 34:].any() and not white[34:].any(), "nothing away from the square"
    assert not white[14:18, 14:18].any(), "the square's inside is not scribbled over"


async def test_openpose_controlnet_takes_the_photo_and_says_why(
    control_expert: LocalExpert, openpose_controlnet: Path
) -> None:
    m = model("controlnet-sd", model_id="tiny/sd-controlnet-openpose")
    result = await control_expert.run("controlnet-sd", m, PHOTO)
    assert result.extra == {"control": "none: openpose needs a pose detector"}
    assert len(result.media) == 1


async def test_seg_controlnet_with_a_missing_seg_model(
    models_root: Path, seg_controlnet: Path
) -> None:
    ex = LocalExpert(
        models_dir=models_root,
        device="cpu",
        controlnet_base="tiny/stable-diffusion",
        seg_model="nobody/missing-seg",
    )
    try:
        with raises_saying(TaskFailed, r"nobody/missing-seg.*LOCAL_SEG_MODEL"):
            await ex.run("controlnet-sd", model("controlnet-sd", seg_controlnet), PHOTO)
        assert ex.loads == 0  # refused before the diffusion model was read
    finally:
        await ex.aclose()


@pytest.mark.parametrize(
    ("name", "kind"),
    [
        ("lllyasviel--sd-controlnet-seg", "seg"),
        ("models--lllyasviel--control_v11p_sd15_seg", "seg"),
        ("lllyasviel--sd-controlnet-normal", "normal"),
        ("lllyasviel--control_v11p_sd15_normalbae", "normal"),
        ("lllyasviel--sd-controlnet-scribble", "scribble"),
        ("lllyasviel--control_v11p_sd15_scribble", "scribble"),
        ("lllyasviel--sd-controlnet-hed", "softedge"),
        ("lllyasviel--control_v11p_sd15_softedge", "softedge"),
        ("lllyasviel--control_v11f1p_sd15_depth", "depth"),
        ("diffusers--controlnet-canny-sdxl-1.0", "canny"),
        ("lllyasviel--sd-controlnet-openpose", "none"),
        ("lllyasviel--sd-controlnet-mlsd", "none"),
        ("lllyasviel--control_v11e_sd15_ip2p", "none"),
        ("someone--finished-controlnet", "none"),  # "hed" inside a word is not HED
    ],
)
def test_the_controlnet_name_picks_its_preprocessor(name: str, kind: str) -> None:
    from core.experts.local_control import preprocessor

    assert preprocessor(name) == kind


@pytest.mark.parametrize(
    ("name", "extra"),
    [
        ("lllyasviel--control_v11p_sd15_openpose", "none: openpose needs a pose detector"),
        ("lllyasviel--sd-controlnet-mlsd", "none: mlsd needs a line detector"),
        ("lllyasviel--control_v11e_sd15_ip2p", "none"),  # takes the photo by design
    ],
)
def test_what_a_controlnet_without_its_detector_reports(name: str, extra: str) -> None:
    from core.experts.local_control import label, missing_detector

    assert label("none", missing_detector(name)) == extra


def test_a_missing_detector_is_logged_once_per_model(caplog: pytest.LogCaptureFixture) -> None:
    from core.experts.local_control import missing_detector

    with caplog.at_level(logging.WARNING, logger="core.experts.local_control"):
        for _ in range(3):
            missing_detector("test--once-controlnet-openpose")
        missing_detector("test--once-controlnet-mlsd")
    assert [r.getMessage().split(":")[0] for r in caplog.records] == [
        "ControlNet test--once-controlnet-openpose gets the photo as it is",
        "ControlNet test--once-controlnet-mlsd gets the photo as it is",
    ]


def test_normals_of_a_slope_and_of_the_background() -> None:
    """Nearness rising to the right: the surface faces left (red up), not up
    or down (green neutral); the far part, below 40 %, faces the camera."""
    from core.experts.local_control import normals_from_nearness

    near = np.tile(np.linspace(0.0, 1.0, 64), (32, 1))
    rgb = normals_from_nearness(near).astype(int)
    slope = rgb[:, 40]  # nearness 0.63: the foreground
    assert (slope[:, 0] > 150).all() and (abs(slope[:, 1] - 127) <= 1).all()
    assert (slope[:, 2] > 127).all() and (slope[:, 2] < 255).all()
    assert (rgb[:, 5] == (127, 127, 255)).all(), "the background is flat"
    assert (normals_from_nearness(np.full((8, 8), 0.9)) == (127, 127, 255)).all()


def test_seg_colours_follow_ade20k_and_stay_fixed() -> None:
    from core.experts.local_control import seg_colour

    assert seg_colour("sky") == SKY == seg_colour("Sky-other-merged")  # COCO panoptic names
    assert seg_colour("person, individual") == (150, 5, 61)
    odd = [seg_colour(name) for name in ("giraffe", "lamp", "teapot")]
    assert odd == [seg_colour(name) for name in ("giraffe", "lamp", "teapot")]
    assert len(set(odd)) == 3 and all(max(c) > 100 for c in odd), "distinct, never black"


def test_soft_edges_are_blurred_strokes() -> None:
    from core.experts.local_control import scribble_control

    photo = Image.open(io.BytesIO(png((64, 48)).data)).convert("RGB")
    hard = np.asarray(scribble_control(photo))[..., 0]
    soft = np.asarray(scribble_control(photo, soft=True))[..., 0]
    assert len(np.unique(soft)) > 2 and soft.max() > 200, "grey levels around white cores"
    assert soft[hard == 255].mean() > soft[hard == 0].mean()
    assert not soft[:, 40:].any(), "black far from the square"


def test_local_seg_model_setting_reaches_the_backend() -> None:
    from bot.app import router_from_settings
    from bot.settings import Settings

    def local(seg: str) -> LocalExpert:
        values: dict[str, Any] = {"inference_mode": "hybrid", "local_seg_model": seg}
        expert = router_from_settings(Settings(_env_file=None, **values)).local  # type: ignore[call-arg]
        assert isinstance(expert, LocalExpert)
        return expert

    assert local("nvidia/segformer-b0-finetuned-ade-512-512").seg_model == (
        "nvidia/segformer-b0-finetuned-ade-512-512"
    )
    assert local("").seg_model is None  # LOCAL_SEG_MODEL= in .env: unset
