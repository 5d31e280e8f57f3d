"""Long provider polls do not hold up the rest of the process: the real
AsyncInferenceClient against the loopback emulation of the 2026 service.

The client polls a queued job (fal-ai's image-to-image here) with
``time.sleep`` in a thread of the loop's default executor for the whole
generation.  With more of them polling than that executor used to have
threads (``min(32, cores + 4)``), another request's upload check, output
check and first model calls complete while every job still polls: the
bot's own work runs on its own threads (core.threads.work) and the loop
(as ``bot.app.open_agent`` sets it up) has threads to spare for the
client's other waits.  The jobs are held by the fake (pending until
released), so this is read from what completed, never from timings.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from core.catalog import ModelInfo
from core.experts.providers import configure
from core.experts.remote import RemoteExpert
from core.outputs import check_output_async
from core.results import Blob, TaskInputs, TaskResult
from core.store.media import MediaStore
from core.tasks import TaskTimeouts
from core.threads import wait_in_many_threads
from core.turn import Turn
from core.types import Attachment, ConversationKey, Request
from tests.fakes.clock import FakeClock
from tests.fakes.hf_service import FakeHFService
from tests.fakes.samples import sample_png, sample_wav

TOKEN = "hf_test_token"
OLD_DEFAULT = min(32, (os.cpu_count() or 1) + 4)  # the default executor's threads before
EDITOR = ModelInfo("org/editor", "image-to-image", providers=("fal-ai",))
PAINTER = ModelInfo("org/painter", "text-to-image", providers=("fal-ai",))
SUMMER = ModelInfo("org/summer", "summarization", providers=("hf-inference",))


@pytest.fixture
def svc(hf_service: FakeHFService) -> Iterator[FakeHFService]:
    hf_service.add_model(
        EDITOR.id, "image-to-image", mappings={"fal-ai": ("fal-ai/editor", "image-to-image")}
    )
    hf_service.add_model(
        PAINTER.id, "text-to-image", mappings={"fal-ai": ("fal-ai/painter", "text-to-image")}
    )
    hf_service.add_model(
        SUMMER.id, "summarization", mappings={"hf-inference": (SUMMER.id, "summarization")}
    )
    with hf_service.configure_client():
        configure(router_url=hf_service.router_url, hub_url=hf_service.hub_url)
        yield hf_service


@pytest.fixture
async def expert(svc: FakeHFService) -> AsyncIterator[RemoteExpert]:
    e = RemoteExpert(token=TOKEN, timeouts=TaskTimeouts(60, 60, 60), clock=FakeClock())
    yield e
    await e.aclose()


def polled_jobs(svc: FakeHFService) -> set[str]:
    """The queued jobs whose status the client has asked for (from a thread)."""
    return {c.path for c in svc.calls if c.kind == "poll" and c.path.endswith("/status")}


async def test_other_work_completes_while_more_jobs_poll_than_the_old_default_had_threads(
    svc: FakeHFService, expert: RemoteExpert, tmp_path: Path
) -> None:
    wait_in_many_threads(asyncio.get_running_loop())  # as bot.app.open_agent does
    svc.pending_polls = 10**9  # every job polls until finish_jobs()
    jobs = OLD_DEFAULT + 1
    edit = TaskInputs(text="make it blue", image=Blob("image", "image/png", sample_png(32, 32)))
    generations = [
        asyncio.create_task(expert.run("image-to-image", EDITOR, edit)) for _ in range(jobs)
    ]
    try:
        async with asyncio.timeout(30):  # a bound, not a measurement: stuck otherwise
            while True:  # the fake records the polls on its own loop: look again
                if len(polled_jobs(svc)) == jobs:  # each job's poll holds a thread
                    break
                await asyncio.sleep(0.01)
            # Another request: its upload check (decode, then the media store) ...
            turn = Turn(
                Request(
                    ConversationKey("cli", "local", "c1"),
                    "u1",
                    "what is in this picture?",
                    attachments=(Attachment("cat.png", "image/png", sample_png(48, 48)),),
                )
            )
            (stored,) = await turn.put_uploads(
                MediaStore(tmp_path), max_bytes=10**7, max_pixels=10**7
            )
            # ... an output check that decodes (audio: in a worker thread) ...
            speech = TaskResult(media=(Blob("audio", "audio/wav", sample_wav()),))
            await check_output_async("text-to-speech", "org/speaker", speech)
            # ... a first call on hf-inference (look-ups and session first) ...
            summary = await expert.run("summarization", SUMMER, TaskInputs(text="a long text"))
            # ... and a fal-ai picture, whose output the client downloads in a
            # thread of the loop's default executor, beside the polls.
            picture = await expert.run("text-to-image", PAINTER, TaskInputs(text="a fox"))
        assert stored.kind == "image" and stored.path.exists()
        assert summary.text and picture.media
        assert not any(g.done() for g in generations)  # all still polling
        assert len(polled_jobs(svc)) == jobs
    finally:
        svc.finish_jobs()
        async with asyncio.timeout(30):
            results = await asyncio.gather(*generations, return_exceptions=True)
    assert all(isinstance(r, TaskResult) and r.media for r in results), results
