"""The pixel limit for a model's output images is its own
(``core.outputs.OUTPUT_MAX_PIXELS``), not the ``MAX_IMAGE_PIXELS`` setting
that caps what people upload."""

from __future__ import annotations

import io
import json
from pathlib import Path

from PIL import Image

from core.errors import TaskFailed
from core.outputs import OUTPUT_MAX_PIXELS, check_output
from core.results import Blob, TaskResult
from core.types import ConversationKey, Request, TaskStatus
from tests.fakes.agent_fixture import open_agent_env
from tests.fakes.hf_fake import FakeHF
from tests.fakes.openai_fake import FakeLLM
from tests.fakes.samples import sample_png
from tests.said import raises_saying


def _png(width: int, height: int) -> bytes:
    buf = io.BytesIO()
    Image.new("1", (width, height)).save(buf, format="PNG")  # 1 bit a pixel: small
    return buf.getvalue()


def test_the_output_limit_is_checked_by_default() -> None:
    side = int(OUTPUT_MAX_PIXELS**0.5) + 1  # just over the limit
    big = Blob("image", "image/png", _png(side, side))
    with raises_saying(TaskFailed, "too large to open"):
        check_output("text-to-image", "org/m", TaskResult(media=(big,)))
    check_output(
        "text-to-image", "org/m", TaskResult(media=(Blob("image", "image/png", _png(64, 64)),))
    )


async def test_a_low_upload_limit_does_not_fail_generated_images(
    tmp_path: Path, llm_fake: FakeLLM, hf_fake: FakeHF
) -> None:
    # Uploads capped at 1,000 pixels; the model's 64×64 (4,096 px) picture is fine.
    async with open_agent_env(tmp_path, llm_fake, hf_fake, max_image_pixels=1000) as env:
        llm_fake.reply(
            "plan",
            json.dumps(
                [{"task": "text-to-image", "id": 0, "dep": [-1], "args": {"text": "a fox"}}]
            ),
        )
        reply = await env.agent.handle(
            Request(ConversationKey("cli", "local", "px", None), "u1", "draw a fox")
        )
    assert [t.status for t in reply.tasks] == [TaskStatus.DONE], reply.text
    (image,) = reply.files
    assert image.size == len(sample_png())
