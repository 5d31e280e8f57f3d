"""A Discord request's job carries the sizes Discord declared for its
attachments (admission weighs it by them), for /ask and for a mention."""

from __future__ import annotations

import sqlalchemy as sa

from core.store.models import StoredJob
from tests.adapters.discord.conftest import Harness
from tests.adapters.discord.helpers import plan, step
from tests.fakes.discord_fake import BOT_ID
from tests.fakes.samples import sample_png


async def weights(h: Harness) -> list[int]:
    async with h.env.agent.repo.db.sessions() as s:
        return list(
            (await s.scalars(sa.select(StoredJob.upload_bytes).order_by(StoredJob.id))).all()
        )


async def test_ask_and_mention_jobs_are_weighed_by_the_declared_sizes(harness: Harness) -> None:
    h, fake = harness, harness.fake
    for _ in range(3):
        h.env.llm.reply("plan", plan(step(0, "image-classification", image="photo.png")))
    photo = fake.attachment("photo.png", sample_png(), "image/png")
    other = fake.attachment("other.png", sample_png(), "image/png", declared_size=2_000)
    await h.interact(
        fake.interaction(
            "ask", {"prompt": "what is this?"}, attachments={"file1": photo, "file2": other}
        )
    )
    await h.interact(fake.interaction("ask", {"prompt": "hello"}))
    mentioned = fake.attachment("photo.png", sample_png(), "image/png", declared_size=3_000)
    await h.post(fake.message(f"<@{BOT_ID}> and this?", attachments=[mentioned]))
    assert await weights(h) == [len(sample_png()) + 2_000, 0, 3_000]
