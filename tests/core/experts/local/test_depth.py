"""depth-estimation on a tiny GLPN through LocalExpert.run, and the depth
ControlNet whose control image that model makes (LOCAL_DEPTH_MODEL)."""

from __future__ import annotations

import io
from collections.abc import AsyncIterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
from PIL import Image

from core.errors import TaskFailed
from core.experts.local import LocalExpert
from core.results import Blob, TaskInputs
from tests.core.experts.local.inputs import model, png
from tests.said import raises_saying

pytestmark = pytest.mark.local

PHOTO = TaskInputs(text="a cat", image=png((80, 60)))


def _pixels(blob: Blob) -> np.ndarray:
    assert blob.kind == "image" and blob.mime == "image/png"
    im = Image.open(io.BytesIO(blob.data))
    assert im.format == "PNG" and im.mode == "RGB"
    return np.asarray(im)


def _controlnet_expert(models_root: Path, depth_model: str | None) -> LocalExpert:
    return LocalExpert(
        models_dir=models_root,
        device="cpu",
        controlnet_base="tiny/stable-diffusion",
        diffusion_steps=2,
        depth_model=depth_model,
    )


@pytest.fixture
async def depth_expert(models_root: Path) -> AsyncIterator[LocalExpert]:
    ex = _controlnet_expert(models_root, "tiny/glpn-depth")  # an id under LOCAL_MODELS_DIR
    yield ex
    await ex.aclose()


async def test_depth_estimation(expert: LocalExpert, depth_estimator: Path) -> None:
    m = model("depth-estimation", depth_estimator)
    assert expert.can_run("depth-estimation", m)
    result = await expert.run("depth-estimation", m, TaskInputs(image=png((80, 60))))
    (blob,) = result.media
    pixels = _pixels(blob)
    assert pixels.shape == (60, 80, 3)  # the input's size, not the model's 64×32
    assert len(np.unique(pixels.reshape(-1, 3), axis=0)) > 1, "a map, not one colour"
    assert set(result.extra) == {"depth_min", "depth_max"}
    assert result.extra["depth_min"] < result.extra["depth_max"]


async def test_depth_controlnet_returns_the_image_and_its_depth_map(
    depth_expert: LocalExpert, depth_controlnet: Path, depth_estimator: Path
) -> None:
    m = model("controlnet-sd", model_id="tiny/sd-controlnet-depth")
    assert depth_expert.resolve(m) == depth_controlnet
    result = await depth_expert.run("controlnet-sd", m, PHOTO)
    assert result.extra == {"control": "depth"}
    generated, depth = result.media
    assert result.media_of("image") is generated  # what a later task takes
    assert _pixels(generated).shape == (48, 64, 3)  # 64 px long side, the photo's 4:3
    grey = _pixels(depth)
    assert grey.shape == (48, 64, 3)
    assert (grey[..., 0] == grey[..., 1]).all() and (grey[..., 1] == grey[..., 2]).all()
    assert grey.min() == 0 and grey.max() == 255, "stretched over the full grey range"


async def test_depth_controlnet_without_a_depth_model_takes_the_photo(
    expert: LocalExpert, depth_controlnet: Path
) -> None:
    m = model("controlnet-sd", model_id="tiny/sd-controlnet-depth")
    result = await expert.run("controlnet-sd", m, PHOTO)
    assert result.extra == {"control": "none"}
    assert len(result.media) == 1


async def test_depth_controlnet_with_a_missing_depth_model(
    models_root: Path, depth_controlnet: Path
) -> None:
    ex = _controlnet_expert(models_root, "nobody/missing-depth")
    try:
        with raises_saying(TaskFailed, r"nobody/missing-depth.*LOCAL_DEPTH_MODEL"):
            await ex.run("controlnet-sd", model("controlnet-sd", depth_controlnet), PHOTO)
        assert ex.loads == 0  # refused before the diffusion model was read
    finally:
        await ex.aclose()


@pytest.mark.parametrize(
    ("where", "kind"),
    [
        ("models/tiny--sd-controlnet-depth", "depth"),
        ("hub/models--lllyasviel--sd-controlnet-depth/snapshots/0a1b2c", "depth"),
        ("hub/models--lllyasviel--sd-controlnet-canny/snapshots/0a1b2c", "canny"),
        ("models/lllyasviel--sd-controlnet-openpose", "none"),
    ],
)
def test_the_controlnet_name_picks_the_preprocessor(where: str, kind: str) -> None:
    """In a Hub cache the directory is a commit hash: the cache folder names the model."""
    from core.experts.local_diffusion import _model_name, _preprocessor

    assert _preprocessor(_model_name(Path("/data") / where)) == kind


class _StubDepth:
    """Stands in for a depth pipeline: depth grows down the rows, 1 to 5."""

    def __init__(self, model_type: str) -> None:
        self.model = SimpleNamespace(config=SimpleNamespace(model_type=model_type))

    def __call__(self, image: Any) -> dict[str, Any]:
        import torch

        return {"predicted_depth": torch.linspace(1.0, 5.0, 8)[:, None].expand(8, 6)}


@pytest.mark.parametrize(
    ("model_type", "white_row", "black_row"), [("dpt", -1, 0), ("glpn", 0, -1)]
)
def test_depth_control_puts_near_white(model_type: str, white_row: int, black_row: int) -> None:
    """MiDaS-style models say near = large, metric ones (GLPN) far = large; the
    control image is near white either way, as depth ControlNets were trained."""
    from core.experts.local_diffusion import depth_control

    grey = np.asarray(depth_control(_StubDepth(model_type), Image.new("RGB", (12, 16))))
    assert grey.shape == (16, 12, 3)  # resized to the control image
    assert grey[white_row].min() > 240 and grey[black_row].max() < 15


def test_local_depth_model_setting_reaches_the_backend() -> None:
    from bot.app import router_from_settings
    from bot.settings import Settings

    def local(depth: str) -> LocalExpert:
        values: dict[str, Any] = {"inference_mode": "local", "local_depth_model": depth}
        expert = router_from_settings(Settings(_env_file=None, **values)).local  # type: ignore[call-arg]
        assert isinstance(expert, LocalExpert)
        return expert

    assert local("Intel/dpt-large").depth_model == "Intel/dpt-large"
    assert local("").depth_model is None  # LOCAL_DEPTH_MODEL= in .env: unset
