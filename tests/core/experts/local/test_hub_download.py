"""Local mode as users expect it: a model id not on disk is downloaded from the
Hub into the Hugging Face cache on first use, then loaded like any other
directory.  The real ``huggingface_hub`` talks to a loopback file server
(:mod:`hub_files_fake`) serving tiny models saved with ``save_pretrained``."""

from __future__ import annotations

import asyncio
import logging
import shutil
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from huggingface_hub import constants

from core.errors import TaskFailed
from core.experts.local import LocalExpert
from core.experts.local_hub import diffusers_components, select_files
from core.results import TaskInputs
from tests.core.experts.local.hub_files_fake import FakeHubFiles, make_hub_files_fake
from tests.core.experts.local.inputs import model, png
from tests.fakes.loopback import free_port
from tests.said import raises_saying

pytestmark = pytest.mark.local

TEXT = TaskInputs(text="a good movie")
TASK = "text-classification"
REPO = "acme/tiny-sentiment"
TOKEN = "hf_test_secret_token"
SAVED = {"config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json", "vocab.txt"}
# what a real repo carries besides: other frameworks, ONNX, a checkpoint, docs —
# with sizes that would blow the cap if they were counted
EXTRA = {
    "pytorch_model.bin": b"torch pickle",
    "tf_model.h5": b"keras",
    "flax_model.msgpack": b"flax",
    "onnx/model.onnx": b"onnx",
    "checkpoint-500/model.safetensors": b"old",
    "training_args.bin": b"args",
    "README.md": b"# tiny",
    ".gitattributes": b"*.safetensors filter=lfs",
}
EXTRA_SIZES = {
    "pytorch_model.bin": 30 * 10**9,
    "tf_model.h5": 50 * 10**9,
    "onnx/model.onnx": 40 * 10**9,
}


@pytest.fixture
async def hub() -> AsyncIterator[FakeHubFiles]:
    async with make_hub_files_fake() as fake:
        yield fake


@pytest.fixture
def cache(tmp_path: Path) -> Path:
    return tmp_path / "hf-cache"


def local(hub: FakeHubFiles, cache: Path, **kw: Any) -> LocalExpert:
    args: dict[str, Any] = {
        "models_dir": None,
        "device": "cpu",
        "download": True,
        "hub_endpoint": hub.base_url,
        "hub_token": TOKEN,
        "hub_cache": cache,
    }
    return LocalExpert(**{**args, **kw})


def serve_sentiment(hub: FakeHubFiles, text_classifier: Path, repo: str = REPO) -> None:
    hub.add(repo, text_classifier, extra=EXTRA, sizes=EXTRA_SIZES)


def snapshots(cache: Path) -> list[Path]:
    return sorted(cache.glob("models--*/snapshots/*"))


async def test_first_call_downloads_then_runs_the_real_pipeline(
    hub: FakeHubFiles, cache: Path, text_classifier: Path, caplog: pytest.LogCaptureFixture
) -> None:
    serve_sentiment(hub, text_classifier)
    ex = local(hub, cache)
    m = model(TASK, model_id=REPO)
    assert ex.can_run(TASK, m) and ex.where(m) == "will download"
    assert hub.requests == []  # can_run asks no one: it runs on every request

    with caplog.at_level(logging.INFO, logger="core.experts.local_hub"):
        result = await ex.run(TASK, m, TEXT)
    assert result.labels and {lab.label for lab in result.labels} == {"NEGATIVE", "POSITIVE"}
    # configs, tokenizer and safetensors only; the 120 GB of other weights were not
    # fetched (nor counted against LOCAL_DOWNLOAD_MAX_GB=20)
    assert hub.fetched_files(REPO) == SAVED
    (snap,) = snapshots(cache)
    assert snap.parent.parent.name == "models--acme--tiny-sentiment"
    assert (snap.parent.parent / "refs" / "main").read_text() == snap.name
    assert {r.authorization for r in hub.requests if r.path.startswith("/api/")} == {
        f"Bearer {TOKEN}"
    }
    assert all(r.authorization is None for r in hub.requests if r.path.startswith("/cdn-lfs/"))
    lines = [r.getMessage() for r in caplog.records]
    assert any(line.startswith(f"local: downloading {REPO}") and "MB" in line for line in lines)
    assert any(line.startswith(f"local: downloaded {REPO}") and "s" in line for line in lines)
    assert TOKEN not in caplog.text

    seen = len(hub.requests)
    again = await ex.run(TASK, m, TEXT)
    assert again.labels == result.labels
    assert ex.where(m) == "cached" and ex.loads == 1
    await ex.aclose()

    fresh = local(hub, cache)  # a new process on the same cache
    assert fresh.where(m) == "cached"
    assert (await fresh.run(TASK, m, TEXT)).labels == result.labels
    assert len(hub.requests) == seen  # neither call went to the Hub
    await fresh.aclose()


async def test_concurrent_first_calls_download_once(
    hub: FakeHubFiles, cache: Path, text_classifier: Path
) -> None:
    serve_sentiment(hub, text_classifier)
    ex = local(hub, cache)
    m = model(TASK, model_id=REPO)
    results = await asyncio.gather(*(ex.run(TASK, m, TEXT) for _ in range(4)))
    assert len({r.labels for r in results}) == 1
    assert ex.hub.downloads == 1 and ex.loads == 1
    assert [r.path for r in hub.requests if r.path == f"/api/models/{REPO}"] == [
        f"/api/models/{REPO}"
    ]
    bodies = hub.downloads()
    assert len(bodies) == len(set(bodies)) == len(SAVED)  # every file once
    await ex.aclose()


async def test_a_model_over_the_size_cap_is_refused(
    hub: FakeHubFiles, cache: Path, text_classifier: Path
) -> None:
    hub.add(REPO, text_classifier, sizes={"model.safetensors": 32_100_000_000})
    ex = local(hub, cache, download_max_gb=20.0)
    m = model(TASK, model_id=REPO)
    assert ex.can_run(TASK, m)  # the size is only known by asking the Hub
    with raises_saying(TaskFailed, r"is 32\.1 GB, over LOCAL_DOWNLOAD_MAX_GB=20") as info:
        await ex.run(TASK, m, TEXT)
    assert not info.value.retryable
    assert hub.downloads() == [] and snapshots(cache) == []
    # the answer is kept: no more Hub calls, and routing stops offering it
    seen = len(hub.requests)
    assert not ex.can_run(TASK, m) and ex.where(m) is None
    with raises_saying(TaskFailed, "LOCAL_DOWNLOAD_MAX_GB"):
        await ex.run(TASK, m, TEXT)
    assert len(hub.requests) == seen


async def test_an_id_outside_the_allow_list_is_refused(
    hub: FakeHubFiles, cache: Path, text_classifier: Path
) -> None:
    serve_sentiment(hub, text_classifier)
    ex = local(hub, cache, download_allow=["trusted/*", "acme/other"])
    m = model(TASK, model_id=REPO)
    assert not ex.can_run(TASK, m) and ex.where(m) is None
    assert ex.can_run(TASK, model(TASK, model_id="Trusted/anything"))
    with raises_saying(TaskFailed, "not in LOCAL_DOWNLOAD_ALLOW=trusted/\\*,acme/other"):
        await ex.run(TASK, m, TEXT)
    assert hub.requests == []


async def test_downloads_off_keeps_on_disk_only(
    hub: FakeHubFiles, cache: Path, text_classifier: Path
) -> None:
    serve_sentiment(hub, text_classifier)
    off = local(hub, cache, download=False)
    m = model(TASK, model_id=REPO)
    assert not off.can_run(TASK, m) and off.where(m) is None
    with raises_saying(TaskFailed, r"not available locally under LOCAL_MODELS_DIR=.*"):
        await off.run(TASK, m, TEXT)
    assert hub.requests == []
    # what is already in the HF cache runs without downloads (transformers does the same)
    on = local(hub, cache)
    await on.download(REPO)
    await on.aclose()
    seen = len(hub.requests)
    assert off.can_run(TASK, m) and off.where(m) == "cached"
    assert (await off.run(TASK, m, TEXT)).labels
    assert len(hub.requests) == seen
    await off.aclose()


async def test_local_models_dir_still_wins(
    hub: FakeHubFiles, cache: Path, tmp_path: Path, text_classifier: Path
) -> None:
    serve_sentiment(hub, text_classifier)
    root = tmp_path / "models"
    shutil.copytree(text_classifier, root / "acme" / "tiny-sentiment")
    ex = local(hub, cache, models_dir=root)
    m = model(TASK, model_id=REPO)
    assert ex.where(m) == "on disk"
    await ex.run(TASK, m, TEXT)
    assert ex.cached() == [(TASK, str(root / "acme" / "tiny-sentiment"))]
    assert hub.requests == [] and snapshots(cache) == []
    await ex.aclose()


async def test_an_unreachable_hub_is_a_retryable_failure(cache: Path) -> None:
    ex = LocalExpert(
        models_dir=None,
        device="cpu",
        download=True,
        hub_endpoint=f"http://127.0.0.1:{free_port()}",  # nothing listens there
        hub_cache=cache,
    )
    m = model(TASK, model_id=REPO)
    with raises_saying(TaskFailed, r"the Hub .* could not be reached") as info:
        await ex.run(TASK, m, TEXT)
    assert info.value.retryable
    assert ex.can_run(TASK, m)  # a network failure is not remembered: next time may work


async def test_unknown_and_gated_repos_name_the_model_and_hf_token(
    hub: FakeHubFiles, cache: Path, text_classifier: Path
) -> None:
    hub.add("acme/gated", text_classifier, gated=True)
    ex = local(hub, cache)
    with raises_saying(TaskFailed, r"acme/nope was not found on the Hub .*HF_TOKEN") as info:
        await ex.run(TASK, model(TASK, model_id="acme/nope"), TEXT)
    assert not info.value.retryable
    with raises_saying(TaskFailed, r"acme/gated is gated on the Hub.*HF_TOKEN"):
        await ex.run(TASK, model(TASK, model_id="acme/gated"), TEXT)
    assert not list(cache.rglob("*.safetensors"))


async def test_offline_mode_uses_only_the_cache(
    hub: FakeHubFiles, cache: Path, text_classifier: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    serve_sentiment(hub, text_classifier)
    serve_sentiment(hub, text_classifier, "acme/elsewhere")
    ex = local(hub, cache)
    await ex.download(REPO)
    seen = len(hub.requests)
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    there, absent = model(TASK, model_id=REPO), model(TASK, model_id="acme/elsewhere")
    assert ex.can_run(TASK, there) and not ex.can_run(TASK, absent)
    assert (await ex.run(TASK, there, TEXT)).labels
    with raises_saying(TaskFailed, "HF_HUB_OFFLINE=1"):
        await ex.run(TASK, absent, TEXT)
    assert len(hub.requests) == seen
    await ex.aclose()


async def test_an_interrupted_download_is_not_taken_for_a_model(
    hub: FakeHubFiles, cache: Path, text_classifier: Path
) -> None:
    serve_sentiment(hub, text_classifier)
    ex = local(hub, cache)
    snap = await ex.download(REPO)
    (snap / "model.safetensors").unlink()  # as if the process died before the weights
    fresh = local(hub, cache)
    m = model(TASK, model_id=REPO)
    assert fresh.where(m) == "will download"
    assert not local(hub, cache, download=False).can_run(TASK, m)
    before = len(hub.downloads())
    assert (await fresh.run(TASK, m, TEXT)).labels
    assert (snap / "model.safetensors").is_file()
    assert len(hub.downloads()) == before  # the blob was still in the cache: relinked, not fetched
    await fresh.aclose()


async def test_diffusers_pipeline_and_its_base_are_downloaded(
    hub: FakeHubFiles, cache: Path, stable_diffusion: Path, canny_controlnet: Path
) -> None:
    """A ControlNet id and the Stable Diffusion base it needs (fetched from the
    loader's worker thread), with only the pipeline's own component files."""
    hub.add(
        "acme/tiny-sd",
        stable_diffusion,
        extra={
            "v1-5-pruned-emaonly.safetensors": b"single-file checkpoint",
            "unet/diffusion_pytorch_model.fp16.safetensors": b"variant",
            "unet/diffusion_flax_model.msgpack": b"flax",
            "vae/diffusion_pytorch_model.bin": b"older format",
            "safety_checker/config.json": b"{}",  # [null, null] in model_index.json
        },
    )
    hub.add("acme/sd-controlnet-canny", canny_controlnet)
    ex = local(hub, cache, controlnet_base="acme/tiny-sd", diffusion_steps=2)
    m = model("controlnet-sd", model_id="acme/sd-controlnet-canny")
    assert ex.can_run("controlnet-sd", m)
    out = await ex.run("controlnet-sd", m, TaskInputs(text="a fox", image=png()))
    assert out.media and out.media[0].data[:8] == b"\x89PNG\r\n\x1a\n"
    saved = {
        p.relative_to(stable_diffusion).as_posix()
        for p in stable_diffusion.rglob("*")
        if p.is_file()
    }
    assert hub.fetched_files("acme/tiny-sd") == saved
    assert hub.fetched_files("acme/sd-controlnet-canny") == {
        "config.json",
        "diffusion_pytorch_model.safetensors",
    }
    assert ex.hub.downloads == 2
    await ex.aclose()


# --- which files a pipeline needs (no network) ------------------------------------------


def test_file_selection_prefers_safetensors_and_skips_the_rest() -> None:
    files = [
        "config.json",
        "generation_config.json",
        "tokenizer.model",
        "chat_template.jinja",
        "additional_chat_templates/tool.jinja",
        "model-00001-of-00002.safetensors",
        "model-00002-of-00002.safetensors",
        "model.safetensors.index.json",
        "pytorch_model-00001-of-00002.bin",
        "pytorch_model.bin.index.json",
        "model.fp16.safetensors",
        "tf_model.h5",
        "rust_model.ot",
        "model.gguf",
        "onnx/model.onnx",
        "onnx/config.json",
        "README.md",
        "training_args.bin",
    ]
    assert select_files("a/b", files, None) == [
        "additional_chat_templates/tool.jinja",
        "chat_template.jinja",
        "config.json",
        "generation_config.json",
        "model-00001-of-00002.safetensors",
        "model-00002-of-00002.safetensors",
        "model.safetensors.index.json",
        "tokenizer.model",
    ]
    # no safetensors: the PyTorch pickles
    assert select_files("a/b", ["config.json", "pytorch_model.bin", "tf_model.h5"], None) == [
        "config.json",
        "pytorch_model.bin",
    ]
    with raises_saying(TaskFailed, "no PyTorch weights"):
        select_files("a/b", ["config.json", "tf_model.h5", "onnx/model.onnx"], None)
    with raises_saying(TaskFailed, r"no config\.json or model_index\.json"):
        select_files("a/b", ["v1-5-pruned.ckpt", "README.md"], None)


def test_diffusers_components_come_from_model_index() -> None:
    index = {
        "_class_name": "StableDiffusionPipeline",
        "unet": ["diffusers", "UNet2DConditionModel"],
        "safety_checker": [None, None],
        "scheduler": ["diffusers", "PNDMScheduler"],
        "requires_safety_checker": False,
    }
    assert diffusers_components(index) == ["unet", "scheduler"]
    files = [
        "model_index.json",
        "v1-5-pruned.safetensors",
        "unet/config.json",
        "unet/diffusion_pytorch_model.safetensors",
        "unet/diffusion_pytorch_model.non_ema.safetensors",
        "unet/diffusion_pytorch_model.bin",
        "scheduler/scheduler_config.json",
        "safety_checker/model.safetensors",
    ]
    assert select_files("a/sd", files, diffusers_components(index)) == [
        "model_index.json",
        "scheduler/scheduler_config.json",
        "unet/config.json",
        "unet/diffusion_pytorch_model.safetensors",
    ]
