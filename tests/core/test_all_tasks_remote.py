"""Every task the hosted inference API serves, end to end through the agent:
plan → selection → the real AsyncInferenceClient → the HF fake → the store."""

from __future__ import annotations

import json

import pytest

from core.experts.audio import audio_duration
from core.experts.images import image_size
from core.tasks import TASKS
from core.types import Attachment, ConversationKey, Request, TaskStatus
from tests.fakes.agent_fixture import REMOTE_TASKS, AgentEnv, model_a
from tests.fakes.samples import sample_png, sample_wav

KEY = ConversationKey("cli", "local", "all-tasks", None)

ARGS = {
    "tabular-classification": {"text": "age,income\n42,50000"},
    "question-answering": {"text": "Who wrote it?\nThe book was written by Clara."},
    "visual-question-answering": {"text": "What colour is the square?", "image": "photo.png"},
    "document-question-answering": {"text": "What is the total?", "image": "photo.png"},
    "image-to-image": {"text": "make it blue", "image": "photo.png"},
}

# What each task leaves in its structured result or as a file.
EXPECT_FILE = {
    "text-to-image": "image",
    "image-to-image": "image",
    "object-detection": "image",  # boxes drawn on the input
    "image-segmentation": "image",  # mask overlay
    "depth-estimation": "image",  # colour depth map
    "text-to-video": "video",
    "text-to-speech": "audio",
    "audio-to-audio": "audio",
}


def args_for(task: str) -> dict[str, str]:
    if task in ARGS:
        return ARGS[task]
    need = TASKS[task].args
    out: dict[str, str] = {}
    if "text" in need:
        out["text"] = "The quick brown fox jumps over the lazy dog."
    if "image" in need:
        out["image"] = "photo.png"
    if "audio" in need:
        out["audio"] = "clip.wav"
    return out


def assert_drawn_on_input(task: str, data: bytes) -> None:
    """Boxes / masks changed the input's pixels where the model said."""
    import io

    from PIL import Image

    before = Image.open(io.BytesIO(sample_png())).convert("RGB")
    after = Image.open(io.BytesIO(data)).convert("RGB")
    if task == "object-detection":  # the fake's first box: (16, 16)-(47, 47)
        assert after.size == before.size
        assert after.getpixel((16, 30)) != before.getpixel((16, 30))  # on the left edge
        assert after.getpixel((60, 5)) == before.getpixel((60, 5))  # far from every box
    else:
        changed = sum(
            after.getpixel((x, y)) != before.getpixel((x, y)) for x in range(64) for y in range(64)
        )
        assert changed > 100


def assert_depth_map(data: bytes) -> None:
    """A real colour image of the input's size whose colour follows the fake's
    depth (far at the top, near at the bottom), not one flat colour."""
    import io

    from PIL import Image

    im = Image.open(io.BytesIO(data))
    assert im.format == "PNG" and im.mode == "RGB"
    assert im.size == image_size(sample_png())
    top, bottom = im.getpixel((32, 0)), im.getpixel((32, 63))
    assert top != bottom
    assert im.getpixel((0, 0)) == im.getpixel((63, 0))  # one depth per row
    colours = {im.getpixel((32, y)) for y in range(64)}
    assert len(colours) > 10, "a gradient of depths, not a few flat bands"


def test_remote_tasks_cover_the_table() -> None:
    assert len(TASKS) == 25  # the paper's 24 and depth-estimation
    assert len(REMOTE_TASKS) == 23
    assert "depth-estimation" in REMOTE_TASKS
    assert set(TASKS) - set(REMOTE_TASKS) == {"controlnet-sd", "video-classification"}


@pytest.mark.parametrize("task", REMOTE_TASKS)
async def test_task_end_to_end(agent_env: AgentEnv, task: str) -> None:
    env = agent_env
    env.llm.reply(
        "plan", json.dumps([{"task": task, "id": 0, "dep": [-1], "args": args_for(task)}])
    )
    request = Request(
        KEY,
        "u1",
        f"please run {task}",
        (
            Attachment("photo.png", "image/png", sample_png()),
            Attachment("clip.wav", "audio/wav", sample_wav()),
        ),
    )
    reply = await env.agent.handle(request)
    assert not reply.error, reply.text
    (rec,) = reply.tasks
    assert rec.status is TaskStatus.DONE, rec.error
    assert rec.model == model_a(task)
    assert len(env.hf.calls_for(model_a(task))) == 1
    assert rec.result, "the structured result is recorded"
    kinds = [f.kind for f in reply.files]
    if task in EXPECT_FILE:
        assert kinds == [EXPECT_FILE[task]]
        data = reply.files[0].path.read_bytes()
        if kinds[0] == "audio":
            # WAV from the model is re-encoded so it plays on phones
            assert reply.files[0].mime == "audio/ogg"
            assert audio_duration(data) > 0.4
        if kinds[0] == "image":
            assert image_size(data)[0] > 0
        if task in ("object-detection", "image-segmentation"):
            assert_drawn_on_input(task, data)
        if task == "depth-estimation":
            assert reply.files[0].handle.startswith("depth")
            assert_depth_map(data)
            assert env.hf.calls_for(model_a(task))[0].body == sample_png()  # the raw image
            assert rec.result["depth_min"] == 1.0 and rec.result["depth_max"] == 10.0
    else:
        assert kinds == []
    # the answer prompt saw the result
    answer_prompt = json.dumps(env.llm.calls("answer")[0]["messages"])
    assert task in answer_prompt
