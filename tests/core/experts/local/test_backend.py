"""The local backend's machinery: model lookup, the LRU cache, load-once under
concurrency, errors, and the promise that importing it does not import torch."""

from __future__ import annotations

import asyncio
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from core.errors import TaskFailed
from core.experts.local import LocalExpert
from core.results import TaskInputs
from core.tasks import TASKS
from tests.core.experts.local.inputs import model, png
from tests.said import raises_saying

pytestmark = pytest.mark.local

TEXT = TaskInputs(text="a good movie")


def test_local_stack_is_installed() -> None:
    """In CI this group runs with the local extra; say so loudly if it is missing."""
    ex = LocalExpert(models_dir=None)
    assert ex.available()
    for lib in ("torch", "transformers", "diffusers"):
        __import__(lib)


def test_importing_the_backend_does_not_import_torch() -> None:
    code = "import sys, core.experts.local; assert 'torch' not in sys.modules, 'torch imported'"
    subprocess.run([sys.executable, "-c", code], check=True, cwd=Path(__file__).parents[4])


def test_tasks_it_can_serve() -> None:
    ex = LocalExpert(models_dir=None)
    served = {t for t in TASKS if ex.can_run(t)}
    assert {"controlnet-sd", "video-classification", "text-to-image", "object-detection"} <= served
    # No transformers or diffusers pipeline exists for these two.
    assert served == set(TASKS) - {"tabular-classification", "audio-to-audio"}


def test_model_lookup(tmp_path: Path, text_classifier: Path) -> None:
    root = tmp_path / "models"
    (root / "owner").mkdir(parents=True)
    shutil.copytree(text_classifier, root / "owner" / "nested")
    shutil.copytree(text_classifier, root / "owner--flat")
    cache = root / "models--owner--cached"
    shutil.copytree(text_classifier, cache / "snapshots" / "abc123")
    (cache / "refs").mkdir()
    (cache / "refs" / "main").write_text("abc123")
    ex = LocalExpert(models_dir=root)
    task = "text-classification"
    assert ex.resolve(model(task, model_id="owner/nested")) == root / "owner" / "nested"
    assert ex.resolve(model(task, model_id="owner/flat")) == root / "owner--flat"
    assert ex.resolve(model(task, model_id="owner/cached")) == cache / "snapshots" / "abc123"
    assert ex.resolve(model(task, text_classifier, model_id="x/y")) == text_classifier
    assert ex.can_run(task, model(task, model_id="owner/flat"))


def test_can_run_false_without_the_weights(tmp_path: Path) -> None:
    ex = LocalExpert(models_dir=tmp_path)
    task = "text-classification"
    assert not ex.can_run(task, model(task, tmp_path / "does-not-exist"))
    assert not ex.can_run(task, model(task, model_id="owner/not-downloaded"))
    (tmp_path / "empty").mkdir()  # a directory without config.json is no model
    assert not ex.can_run(task, model(task, tmp_path / "empty"))
    assert not ex.can_run("tabular-classification")


async def test_missing_model_fails_with_where_it_looked(tmp_path: Path) -> None:
    ex = LocalExpert(models_dir=tmp_path)
    with raises_saying(
        TaskFailed, r"owner/absent is not available locally under LOCAL_MODELS_DIR="
    ):
        await ex.run(
            "text-classification", model("text-classification", model_id="owner/absent"), TEXT
        )


async def test_broken_model_dir_is_a_task_failure(tmp_path: Path) -> None:
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "config.json").write_text("{not json")
    ex = LocalExpert(models_dir=tmp_path, device="cpu")
    m = model("text-classification", broken, model_id="owner/broken")
    assert ex.can_run("text-classification", m)  # it looks like a model…
    with raises_saying(TaskFailed, "owner/broken could not be loaded") as info:
        await ex.run("text-classification", m, TEXT)
    assert info.value.retryable  # …so the executor tries the next candidate
    assert ex.cached() == [] and ex.loads == 0


async def test_missing_input_is_not_retried(expert: LocalExpert, image_classifier: Path) -> None:
    m = model("image-classification", image_classifier)
    with raises_saying(TaskFailed, "needs an image") as info:
        await expert.run("image-classification", m, TaskInputs(text="no picture"))
    assert not info.value.retryable


async def test_unreadable_image_is_a_task_failure(
    expert: LocalExpert, image_classifier: Path
) -> None:
    from core.results import Blob

    bad = TaskInputs(image=Blob(kind="image", mime="image/png", data=b"not a png"))
    with raises_saying(TaskFailed, "could not be read"):
        await expert.run(
            "image-classification", model("image-classification", image_classifier), bad
        )


async def test_lru_keeps_at_most_max_loaded(
    text_classifier: Path, token_classifier: Path, image_classifier: Path
) -> None:
    ex = LocalExpert(models_dir=None, max_loaded=2, device="cpu")
    text = model("text-classification", text_classifier)
    tokens = model("token-classification", token_classifier)
    image = model("image-classification", image_classifier)
    await ex.run("text-classification", text, TEXT)
    await ex.run("token-classification", tokens, TEXT)
    await ex.run("text-classification", text, TEXT)  # used again: now the newest
    assert ex.loads == 2
    await ex.run("image-classification", image, TaskInputs(image=png()))
    assert ex.loads == 3
    assert ex.cached() == [
        ("text-classification", str(text_classifier)),
        ("image-classification", str(image_classifier)),
    ]  # the least recently used one (tokens) went
    await ex.run("token-classification", tokens, TEXT)
    assert ex.loads == 4  # evicted, so loaded again
    assert len(ex.cached()) == 2
    await ex.aclose()
    assert ex.cached() == []


async def test_concurrent_first_calls_load_once(text_classifier: Path) -> None:
    ex = LocalExpert(models_dir=None, device="cpu")
    m = model("text-classification", text_classifier)
    results = await asyncio.gather(*(ex.run("text-classification", m, TEXT) for _ in range(4)))
    assert ex.loads == 1
    assert len({r.labels for r in results}) == 1  # same model, same input, same answer
    await ex.aclose()
