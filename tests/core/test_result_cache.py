"""Reuse: the same model on the same input bytes within a conversation is not
run twice.  The cache on its own (keys, bounds), then end to end on the real
Agent with the HF fake counting model calls."""

from __future__ import annotations

import json

from core.result_cache import Cached, ResultCache, result_size
from core.results import Blob, Label, TaskInputs, TaskResult
from core.types import Attachment, ConversationKey, Request
from tests.fakes.agent_fixture import AgentEnv, model_a
from tests.fakes.samples import sample_png

PHOTO = Blob("image", "image/png", sample_png(32, 32), handle="photo.png")
LABELS = TaskResult(labels=(Label("cat", 0.9),))


async def test_the_key_is_the_input_bytes_not_the_file_name() -> None:
    cache = ResultCache()
    renamed = Blob("image", "image/png", PHOTO.data, handle="copy.png")
    other = Blob("image", "image/png", sample_png(33, 33), handle="photo.png")
    key = await cache.key("c1", "image-classification", "m/a", TaskInputs(image=PHOTO))
    assert key is not None
    assert key == await cache.key("c1", "image-classification", "m/a", TaskInputs(image=renamed))
    for changed in (
        await cache.key("c1", "image-classification", "m/a", TaskInputs(image=other)),
        await cache.key("c2", "image-classification", "m/a", TaskInputs(image=PHOTO)),  # scope
        await cache.key("c1", "image-classification", "m/b", TaskInputs(image=PHOTO)),  # model
        await cache.key("c1", "object-detection", "m/a", TaskInputs(image=PHOTO)),  # task
        await cache.key("c1", "image-classification", "m/a", TaskInputs("x", image=PHOTO)),
    ):
        assert changed is not None and changed != key


async def test_sampling_tasks_and_a_disabled_cache_have_no_key() -> None:
    assert await ResultCache().key("c1", "text-to-image", "m/a", TaskInputs("a fox")) is None
    assert await ResultCache().key("c1", "text-generation", "m/a", TaskInputs("once")) is None
    off = ResultCache(max_entries=0)
    assert await off.key("c1", "summarization", "m/a", TaskInputs("text")) is None


async def test_least_recently_used_go_first_within_entries_and_bytes() -> None:
    cache = ResultCache(max_entries=2)
    keys = [await cache.key("c", "summarization", "m", TaskInputs(f"text {i}")) for i in range(3)]
    for k in keys[:2]:
        cache.put(k, Cached(TaskResult(text="s"), "m", "remote"))
    assert cache.get(keys[0]) is not None  # keys[0] is now the most recent
    cache.put(keys[2], Cached(TaskResult(text="s"), "m", "remote"))
    assert cache.get(keys[1]) is None and cache.get(keys[0]) is not None
    assert cache.stats().entries == 2 and cache.stats().hits == 2 and cache.stats().misses == 1

    big = TaskResult(media=(Blob("image", "image/png", b"x" * 10_000),))
    small = ResultCache(max_bytes=25_000)
    two = [await small.key("c", "depth-estimation", "m", TaskInputs(f"{i}")) for i in range(3)]
    for k in two:
        small.put(k, Cached(big, "m", "remote"))
    assert small.stats().entries == 2 and small.stats().bytes <= 25_000
    assert small.get(two[0]) is None and small.get(two[2]) is not None
    huge = TaskResult(media=(Blob("image", "image/png", b"x" * 30_000),))
    small.put(two[0], Cached(huge, "m", "remote"))  # larger than the whole cache: not kept
    assert small.get(two[0]) is None and small.stats().entries == 2
    assert result_size(big) >= 10_000


KEY = ConversationKey("cli", "local", "reuse", None)


def classify(handle: str) -> str:
    return json.dumps(
        [{"task": "image-classification", "id": 0, "dep": [-1], "args": {"image": handle}}]
    )


async def test_a_repeated_question_on_the_same_photo_is_answered_without_the_model(
    agent_env: AgentEnv,
) -> None:
    env = agent_env
    model = model_a("image-classification")
    photo = Attachment("photo.png", "image/png", sample_png())
    env.llm.reply("plan", classify("photo.png"), classify("photo.png"), classify("copy.png"))
    first = await env.agent.handle(Request(KEY, "u1", "what is in photo.png?", (photo,)))
    again = await env.agent.handle(Request(KEY, "u1", "and photo.png again?"))
    copy = Attachment("copy.png", "image/png", photo.data)
    renamed = await env.agent.handle(Request(KEY, "u1", "and this copy?", (copy,)))
    for reply in (first, again, renamed):
        assert not reply.error, reply.text
        assert reply.tasks[0].model == model and reply.tasks[0].result == first.tasks[0].result
    assert len(env.hf.calls_for(model)) == 1  # asked three times, run once
    stats = env.agent.executor.cache.stats() if env.agent.executor.cache else None
    assert stats is not None and (stats.hits, stats.misses) == (2, 1)

    elsewhere = ConversationKey("cli", "local", "another", None)
    env.llm.reply("plan", classify("photo.png"))
    other = await env.agent.handle(Request(elsewhere, "u1", "what is this?", (photo,)))
    assert not other.error and len(env.hf.calls_for(model)) == 2  # not shared between them


async def test_a_drawing_asked_for_again_is_drawn_again(agent_env: AgentEnv) -> None:
    env = agent_env
    draw = json.dumps([{"task": "text-to-image", "id": 0, "dep": [-1], "args": {"text": "a fox"}}])
    env.llm.reply("plan", draw, draw)
    for text in ("draw a fox", "draw another fox"):
        reply = await env.agent.handle(Request(KEY, "u1", text))
        assert not reply.error, reply.text
    assert len(env.hf.calls_for(model_a("text-to-image"))) == 2
