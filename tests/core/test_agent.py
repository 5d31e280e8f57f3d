"""The four stages end to end: the real Agent (built by bot.app) against the
OpenAI fake, the HF inference fake and a SQLite store."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from adapters.chat.messages import reply_text, task_error_text
from core.plan_schema import planning_token_cap
from core.response import answer_cap
from core.tasks import TaskTimeouts
from core.types import (
    AnswerDelta,
    Attachment,
    ConversationKey,
    Event,
    Finished,
    QueuePosition,
    Request,
    Stage,
    StageStarted,
    TasksChanged,
    TaskStatus,
)
from tests.fakes.agent_fixture import AgentEnv, model_a, model_b
from tests.fakes.clock import FakeClock
from tests.fakes.openai_fake import WeakModel, stage_of
from tests.fakes.samples import sample_png, sample_wav
from tests.fakes.speculation import Seen, choice_known

KEY = ConversationKey("cli", "local", "test", None)


def plan(*tasks: dict[str, Any]) -> str:
    return json.dumps(list(tasks))


def step(id: int, task: str, dep: list[int] | None = None, **args: str) -> dict[str, Any]:
    return {"task": task, "id": id, "dep": dep or [-1], "args": args}


def req(text: str, *files: Attachment, key: ConversationKey = KEY) -> Request:
    return Request(key, "u1", text, tuple(files))


def png(name: str = "photo.png") -> Attachment:
    return Attachment(name, "image/png", sample_png())


async def test_graph_runs_independent_tasks_concurrently_and_dependents_after(
    agent_env: AgentEnv,
) -> None:
    env = agent_env
    for task in ("text-to-image", "text-classification"):
        env.hf.serve(model_a(task), task, delay=0.4)
    env.hf.serve(model_a("image-classification"), "image-classification")
    env.llm.reply(
        "plan",
        plan(
            step(0, "text-to-image", text="a red fox"),
            step(1, "text-classification", text="I love foxes"),
            step(2, "image-classification", [0], image="<resource>-0"),
        ),
    )
    reply = await env.agent.handle(req("draw a fox, classify it, and rate my sentence"))
    assert not reply.error, reply_text(reply)
    assert [t.status for t in reply.tasks] == [TaskStatus.DONE] * 3
    t2i = env.hf.calls_for(model_a("text-to-image"))[0]
    cls = env.hf.calls_for(model_a("text-classification"))[0]
    img = env.hf.calls_for(model_a("image-classification"))[0]
    # the two independent tasks overlap in time…
    assert t2i.t_start < cls.t_end and cls.t_start < t2i.t_end
    # …and the dependent one starts only after its dependency finished
    assert img.t_start >= t2i.t_end
    r0, _, r2 = reply.tasks
    assert r0.started and r0.ended and r2.started and r2.started >= r0.ended


async def test_image_output_is_substituted_into_dependent_task(agent_env: AgentEnv) -> None:
    env = agent_env
    env.llm.reply(
        "plan",
        plan(
            step(0, "text-to-image", text="a red square"),
            step(1, "image-classification", [0], image="<resource>-0"),
        ),
    )
    reply = await env.agent.handle(req("draw then classify"))
    produced = reply.files[0]
    assert produced.kind == "image" and produced.handle == "image.png"
    sent = env.hf.calls_for(model_a("image-classification"))[0].body
    assert sent == sample_png() == produced.path.read_bytes()
    assert (
        reply.tasks[1].result and reply.tasks[1].result["labels"][0]["label"] == "tabby, tabby cat"
    )


async def test_text_output_is_substituted_into_dependent_task(agent_env: AgentEnv) -> None:
    env = agent_env
    env.llm.reply(
        "plan",
        plan(
            step(0, "image-to-text", image="photo.png"),
            step(1, "text-to-speech", [0], text="Caption: <resource>-0"),
        ),
    )
    reply = await env.agent.handle(req("describe my photo aloud", png()))
    assert not reply.error, reply_text(reply)
    tts = env.hf.calls_for(model_a("text-to-speech"))[0]
    assert tts.json["inputs"] == "Caption: a red square on a white background"
    assert env.hf.calls_for(model_a("image-to-text"))[0].body == sample_png()
    assert [f.kind for f in reply.files] == ["audio"]


async def test_failed_model_falls_back_to_next_candidate(agent_env: AgentEnv) -> None:
    env = agent_env
    env.hf.fail(model_a("summarization"), 500)
    env.llm.reply("plan", plan(step(0, "summarization", text="long text " * 50)))
    reply = await env.agent.handle(req("summarize this"))
    (rec,) = reply.tasks
    assert rec.status is TaskStatus.DONE
    assert rec.model == model_b("summarization")
    assert len(env.hf.calls_for(model_a("summarization"))) == 1
    assert len(env.hf.calls_for(model_b("summarization"))) == 1


async def test_failure_skips_dependents_and_independent_tasks_finish(agent_env: AgentEnv) -> None:
    env = agent_env
    env.hf.fail(model_a("text-to-image"), 500, times=-1)
    env.hf.fail(model_b("text-to-image"), 500, times=-1)
    env.llm.reply(
        "plan",
        plan(
            step(0, "text-to-image", text="a cat"),
            step(1, "image-classification", [0], image="<resource>-0"),
            step(2, "translation", text="hello"),
        ),
    )
    env.llm.reply("answer", "The image could not be made; translation: Bonjour le monde.")
    reply = await env.agent.handle(req("draw a cat, classify it, translate hello"))
    statuses = {t.id: t.status for t in reply.tasks}
    assert statuses == {0: TaskStatus.FAILED, 1: TaskStatus.SKIPPED, 2: TaskStatus.DONE}
    assert "500" in (reply.tasks[0].error or "")
    assert "task 0" in task_error_text(reply.tasks[1])
    assert env.hf.calls_for(model_a("image-classification")) == []
    # the responder was told what failed
    answer_prompt = json.dumps(env.llm.calls("answer")[0]["messages"])
    assert "failed" in answer_prompt and "skipped" in answer_prompt


async def test_malformed_plan_is_reasked_once(agent_env: AgentEnv) -> None:
    env = agent_env
    env.llm.reply("plan", "Sure! I'd love to help.", plan(step(0, "translation", text="hi")))
    reply = await env.agent.handle(req("translate hi"))
    assert not reply.error
    calls = env.llm.calls("plan")
    assert len(calls) == 2
    # the second call carries the first answer and the error
    second = json.dumps(calls[1]["messages"])
    assert "Sure! I'd love to help." in second
    assert reply.tasks[0].status is TaskStatus.DONE


async def test_plan_invalid_twice_gives_clear_error_and_keeps_history(agent_env: AgentEnv) -> None:
    env = agent_env
    env.llm.reply("plan", "nope", '[{"task": "brew-coffee", "id": 0, "dep": [-1], "args": {}}]')
    reply = await env.agent.handle(req("make coffee"))
    assert reply.error
    assert "plan" in reply_text(reply).lower()
    history = await env.agent.repo.load_history(KEY)
    assert [t.role for t in history.turns] == ["user", "assistant"]
    assert history.turns[0].text == "make coffee"


async def test_plan_naming_unknown_file_is_rejected_and_reasked(agent_env: AgentEnv) -> None:
    env = agent_env
    env.llm.reply(
        "plan",
        plan(step(0, "image-classification", image="/etc/passwd")),
        plan(step(0, "image-classification", image="photo.png")),
    )
    # two images: no one file to use instead (core.plan_repair), so it is asked again
    reply = await env.agent.handle(req("what is in my photo?", png(), png("other.png")))
    assert not reply.error, reply_text(reply)
    assert len(env.llm.calls("plan")) == 2
    assert "photo.png" in json.dumps(env.llm.calls("plan")[1]["messages"])
    assert env.hf.calls_for(model_a("image-classification"))[0].body == sample_png()


async def test_empty_plan_answers_directly(agent_env: AgentEnv) -> None:
    env = agent_env
    env.llm.reply("plan", "[]")
    env.llm.reply("answer", "Hello! How can I help?")
    reply = await env.agent.handle(req("hi there"))
    assert reply_text(reply) == "Hello! How can I help?"
    assert reply.tasks == ()
    assert env.llm.calls("select") == []
    assert len(env.llm.calls("answer")) == 1
    assert reply.usage.llm_calls == 2
    assert env.hf.calls == []


async def test_selection_is_one_batched_llm_call(
    agent_env: AgentEnv, monkeypatch: pytest.MonkeyPatch
) -> None:
    env = agent_env
    # the most downloaded summarizer is still running when the choice comes
    env.hf.serve(
        model_a("summarization"),
        "summarization",
        Seen("summarization", hold=choice_known(env, monkeypatch)),
    )
    env.llm.reply(
        "plan",
        plan(
            step(0, "summarization", text="a"),
            step(1, "translation", text="b"),
            step(2, "text-classification", text="c"),
        ),
    )
    env.llm.reply(
        "select",
        json.dumps(
            {
                "0": {"id": model_b("summarization"), "reason": "shorter summaries"},
                "1": {"id": "no/such-model", "reason": "made up"},
            }
        ),
    )
    reply = await env.agent.handle(req("do three things"))
    assert len(env.llm.calls("select")) == 1
    models = {t.id: t.model for t in reply.tasks}
    assert models[0] == model_b("summarization")
    assert models[1] == model_a("translation")  # unknown choice → top candidate
    assert models[2] == model_a("text-classification")  # missing choice → top candidate
    assert reply.tasks[0].reason == "shorter summaries"
    assert reply.usage.llm_calls == 3
    assert reply.usage.prompt_tokens > 0 and reply.usage.completion_tokens > 0


async def test_second_turn_uses_file_from_first(agent_env: AgentEnv) -> None:
    env = agent_env
    env.llm.reply("plan", plan(step(0, "text-to-image", text="a red square")))
    first = await env.agent.handle(req("draw a red square"))
    handle = first.files[0].handle
    env.llm.reply("plan", plan(step(0, "object-detection", image=handle)))
    second = await env.agent.handle(req(f"find objects in {handle}"))
    assert not second.error, reply_text(second)
    assert env.hf.calls_for(model_a("object-detection"))[0].body == first.files[0].path.read_bytes()
    # the planner was shown the file of the earlier turn
    assert handle in json.dumps(env.llm.calls("plan")[1]["messages"])
    # detection draws its boxes on the image as a new resource
    assert [f.handle for f in second.files] == ["detected.png"]


async def test_uploaded_names_are_made_unique_within_conversation(agent_env: AgentEnv) -> None:
    env = agent_env
    await env.agent.handle(req("keep this", png()))
    await env.agent.handle(req("and this", png()))
    history = await env.agent.repo.load_history(KEY)
    assert {"photo.png", "photo-2.png"} <= set(history.resources)


async def test_progress_events_cover_every_stage(agent_env: AgentEnv) -> None:
    env = agent_env
    env.llm.reply("plan", plan(step(0, "translation", text="hello")))
    env.llm.reply("answer", "Bonjour, the translation is done.")
    seen: list[Event] = []

    async def sink(p: Event) -> None:
        seen.append(p)

    reply = await env.agent.handle(req("translate hello"), sink)
    stages = [p.stage for p in seen if isinstance(p, StageStarted)]
    assert stages == [Stage.PLANNING, Stage.SELECTING, Stage.ANSWERING]
    kinds = [type(p) for p in seen]
    assert kinds.index(TasksChanged) < kinds.index(AnswerDelta)  # tasks run, then the answer
    running = [p for p in seen if isinstance(p, TasksChanged)]
    assert running[-1].tasks[0].status is TaskStatus.DONE
    assert running[-1].tasks[0].model == model_a("translation")
    # the answer streamed, and the run ends with the reply
    assert "".join(p.text for p in seen if isinstance(p, AnswerDelta)) == reply_text(reply)
    assert seen[-1] == Finished(reply)


async def test_broken_progress_sink_does_not_fail_the_request(agent_env: AgentEnv) -> None:
    async def sink(p: Event) -> None:
        raise RuntimeError("renderer bug")

    agent_env.llm.reply("plan", "[]")
    reply = await agent_env.agent.handle(req("hi"), sink)
    assert not reply.error


async def test_task_timeout_fails_task_and_falls_back(agent_env: AgentEnv) -> None:
    env = agent_env
    env.agent.executor.timeouts = TaskTimeouts(0.3, 0.3, 0.3)
    env.hf.serve(model_a("translation"), "translation", delay=3)
    env.llm.reply("plan", plan(step(0, "translation", text="hi")))
    reply = await env.agent.handle(req("translate"))
    (rec,) = reply.tasks
    assert rec.status is TaskStatus.DONE and rec.model == model_b("translation")


async def test_all_candidates_timing_out_gives_answer_naming_the_failure(
    agent_env: AgentEnv,
) -> None:
    env = agent_env
    env.agent.executor.timeouts = TaskTimeouts(0.2, 0.2, 0.2)
    env.hf.serve(model_a("translation"), "translation", delay=3)
    env.hf.serve(model_b("translation"), "translation", delay=3)
    env.llm.reply("plan", plan(step(0, "translation", text="hi")))
    env.llm.fail(500, stage="answer")  # and the responder is down too
    reply = await env.agent.handle(req("translate"))
    (rec,) = reply.tasks
    assert rec.status is TaskStatus.FAILED
    assert "timed out" in task_error_text(rec)
    assert "translation" in reply_text(reply) and "timed out" in reply_text(
        reply
    )  # fallback answer


async def test_dead_llm_endpoint_gives_clear_message(agent_env: AgentEnv) -> None:
    env = agent_env
    env.agent.llm = env.llm.client(base_url="http://127.0.0.1:9/v1")
    reply = await env.agent.handle(req("hello"))
    assert reply.error
    assert "could not be reached" in reply_text(reply)
    assert "sk-" not in reply_text(reply)
    # the user's message is still stored
    history = await env.agent.repo.load_history(KEY)
    assert history.turns[0].text == "hello"


async def test_attachment_that_is_not_what_its_name_says(agent_env: AgentEnv) -> None:
    env = agent_env
    fake = Attachment("cat.png", "image/png", b"<!DOCTYPE html><html><body>login</body></html>")
    reply = await env.agent.handle(req("what is this?", fake))
    assert reply.error
    assert "cat.png" in reply_text(reply) and "not an image" in reply_text(reply)
    assert env.llm.requests == []  # rejected before any LLM call


async def test_attachment_over_size_limit(agent_env: AgentEnv) -> None:
    env = agent_env
    env.agent.config = type(env.agent.config)(max_attachment_bytes=1000)
    big = Attachment("song.wav", "audio/wav", sample_wav(seconds=1.0))
    reply = await env.agent.handle(req("transcribe", big))
    assert reply.error and "song.wav" in reply_text(reply) and "limit" in reply_text(reply)


async def test_earlier_history_survives_a_failed_turn(agent_env: AgentEnv) -> None:
    env = agent_env
    env.llm.reply("plan", plan(step(0, "text-to-image", text="x")))
    first = await env.agent.handle(req("draw x"))
    env.llm.fail(500, times=3)
    failed = await env.agent.handle(req("now fail"))
    assert failed.error
    history = await env.agent.repo.load_history(KEY)
    assert first.files[0].handle in history.resources
    assert [t.text for t in history.turns if t.role == "user"] == ["draw x", "now fail"]


async def test_plan_only_runs_nothing(agent_env: AgentEnv) -> None:
    env = agent_env
    env.llm.reply(
        "plan", plan(step(0, "text-to-image", text="x"), step(1, "translation", text="y"))
    )
    preview = await env.agent.plan_only(req("draw x and translate y"))
    assert [s.task for s in preview.steps] == ["text-to-image", "translation"]
    assert preview.steps[0].model == model_a("text-to-image")
    assert env.hf.calls == []
    assert (await env.agent.repo.load_history(KEY)).turns == []


async def test_models_and_forget(agent_env: AgentEnv) -> None:
    env = agent_env
    assert [m.id for m in env.agent.models("Image-CLS")["image-classification"]] == [
        model_a("image-classification"),
        model_b("image-classification"),
    ]
    env.llm.reply("plan", "[]")
    await env.agent.handle(req("hi"))
    assert await env.agent.forget(KEY) == 2
    assert (await env.agent.repo.load_history(KEY)).turns == []


async def test_database_gone_gives_clear_message_not_a_crash(agent_env: AgentEnv) -> None:
    from core.store import Database, Repo

    env = agent_env
    dead = Database("postgresql+asyncpg://postgres@127.0.0.1:1/none", connect_timeout=2)
    env.agent.repo = Repo(dead, env.agent.media)
    try:
        reply = await env.agent.handle(req("hello"))
    finally:
        await dead.aclose()
    assert reply.error
    assert "database" in reply_text(reply).lower()
    assert "127.0.0.1:1" not in reply_text(reply)
    assert env.llm.requests == []


async def test_too_many_files_too_long_or_empty_is_refused_before_any_llm_call(
    agent_env: AgentEnv,
) -> None:
    env = agent_env
    many = tuple(png(f"p{i}.png") for i in range(11))
    reply = await env.agent.handle(req("look", *many))
    assert reply.error and "at most 10" in reply_text(reply)
    reply = await env.agent.handle(req("x" * 20_001))
    assert reply.error and "20,000" in reply_text(reply)
    reply = await env.agent.handle(req("   "))
    assert reply.error and "empty" in reply_text(reply)
    assert env.llm.requests == []


async def test_text_file_handle_as_text_argument_passes_its_content(agent_env: AgentEnv) -> None:
    env = agent_env
    doc = Attachment("notes.txt", "text/plain", b"The meeting moved to Friday at noon.")
    env.llm.reply("plan", plan(step(0, "summarization", text="notes.txt")))
    reply = await env.agent.handle(req("summarize my notes", doc))
    assert not reply.error, reply_text(reply)
    sent = env.hf.calls_for(model_a("summarization"))[0].json
    assert sent["inputs"] == "The meeting moved to Friday at noon."
    # a text argument that only looks like a file name stays as written
    env.llm.reply("plan", plan(step(0, "translation", text="readme.md")))
    await env.agent.handle(req("translate the word readme.md"))
    assert env.hf.calls_for(model_a("translation"))[0].json["inputs"] == "readme.md"


async def test_requests_in_one_conversation_queue_and_say_so(agent_env: AgentEnv) -> None:
    env = agent_env
    env.hf.serve(model_a("translation"), "translation", delay=0.3)
    env.llm.reply(
        "plan", plan(step(0, "translation", text="a")), plan(step(0, "translation", text="b"))
    )
    seen: list[Event] = []

    async def sink(p: Event) -> None:
        seen.append(p)

    started = asyncio.Event()

    async def first_sink(p: Event) -> None:
        started.set()  # emitted inside the conversation's lock

    first = asyncio.create_task(env.agent.handle(req("one"), first_sink))
    await started.wait()
    await env.agent.handle(req("two"), sink)
    await first
    assert seen[0] == QueuePosition(0, conversation_busy=True)
    history = await env.agent.repo.load_history(KEY)
    assert [t.text for t in history.turns if t.role == "user"] == ["one", "two"]


async def test_per_user_rate_limit(agent_env: AgentEnv) -> None:
    from core.ratelimit import QuotaLimiter, Quotas

    env = agent_env
    clock = FakeClock(60_000_000.0 + 20)  # 20 s into a minute
    env.agent.limiter = QuotaLimiter(
        env.agent.limiter.store, Quotas(user_per_minute=2), clock=clock
    )
    assert not (await env.agent.handle(req("one"))).error
    assert not (await env.agent.handle(req("two"))).error
    third = await env.agent.handle(req("three"))
    assert third.error
    assert reply_text(third) == "You have used your 2 requests this minute; try again in 40 s."
    other = Request(KEY, "someone-else", "hi")
    assert not (await env.agent.handle(other)).error  # the budget is per user
    clock.advance(40)  # the next minute
    assert not (await env.agent.handle(req("four"))).error
    assert len(env.llm.calls("plan")) == 4  # the refused one cost no LLM call


async def test_generated_gif_video_is_reencoded_to_mp4(agent_env: AgentEnv) -> None:
    import io

    from PIL import Image

    from core.experts.video import decode_video_frames

    frames = [Image.new("RGB", (32, 32), (i * 40, 0, 0)) for i in range(6)]
    buf = io.BytesIO()
    frames[0].save(buf, format="GIF", save_all=True, append_images=frames[1:], duration=125)
    env = agent_env
    env.hf.serve(
        model_a("text-to-video"), "text-to-video", buf.getvalue(), content_type="image/gif"
    )
    env.llm.reply("plan", plan(step(0, "text-to-video", text="a red pulse")))
    reply = await env.agent.handle(req("make a video"))
    (video,) = reply.files
    assert (video.kind, video.mime, video.handle) == ("video", "video/mp4", "video.mp4")
    assert len(decode_video_frames(video.path.read_bytes(), num_frames=100, size=None)) == 6


async def test_shutdown_refuses_new_requests_and_drains_running_ones(agent_env: AgentEnv) -> None:
    env = agent_env
    env.hf.serve(model_a("translation"), "translation", delay=0.5)
    env.llm.reply("plan", plan(step(0, "translation", text="hi")))
    started = asyncio.Event()

    async def sink(p: Event) -> None:
        started.set()

    running = asyncio.create_task(env.agent.handle(req("translate hi"), sink))
    await started.wait()
    assert env.agent.begin_shutdown() == 1
    refused = await env.agent.handle(
        Request(ConversationKey("cli", "local", "other"), "u2", "hello")
    )
    assert refused.error and "restarting" in reply_text(refused)
    assert not await env.agent.drain(0.01)  # still running
    assert await env.agent.drain(10)
    assert running.done() and not running.result().error
    # the refused message is in the history too: nothing the user sent is lost
    other = await env.agent.repo.load_history(ConversationKey("cli", "local", "other"))
    assert [(t.role, t.text) for t in other.turns] == [
        ("user", "hello"),
        ("assistant", "shutting_down"),  # the core's terse form: the chat log holds no words
    ]


# ----------------------------------------------- current models, weak local models


async def test_whole_request_on_a_reasoning_model_is_answered_unchanged(
    agent_env: AgentEnv, monkeypatch: pytest.MonkeyPatch
) -> None:
    env = agent_env
    env.hf.serve(
        model_a("summarization"),
        "summarization",
        Seen("summarization", hold=choice_known(env, monkeypatch)),
    )
    env.llm.reasoning_rules = True  # temperature != 1 or max_tokens: HTTP 400
    env.llm.reply("plan", plan(step(0, "summarization", text="a long text")))
    env.llm.reply("select", json.dumps({"0": {"id": model_b("summarization"), "reason": "r"}}))
    env.llm.reply("answer", "Here is your summary.")
    reply = await env.agent.handle(req("summarize this"))
    assert not reply.error and not reply.fallback
    assert reply_text(reply) == "Here is your summary."
    assert reply.tasks[0].model == model_b("summarization")
    bodies = env.llm.calls()
    assert [stage_of(b) for b in bodies] == ["plan", "select", "answer"]  # nothing refused
    for body in bodies:
        assert "temperature" not in body and "max_tokens" not in body
    caps = [b["max_completion_tokens"] for b in bodies]
    config = env.agent.config
    assert caps == [
        planning_token_cap(config.max_tasks, len("summarize this")),
        config.selection_max_tokens,
        answer_cap(config.answer_max_tokens, reasons=False),  # a local server: no thinking
    ]
    plan_format = bodies[0]["response_format"]
    assert plan_format["type"] == "json_schema" and plan_format["json_schema"]["name"] == "plan"
    assert "response_format" not in bodies[2]
    assert reply.usage.llm_calls == 3


async def test_a_schema_shaped_plan_runs(agent_env: AgentEnv) -> None:
    env = agent_env
    args = {"text": "hi", "image": None, "audio": None, "video": None}
    env.llm.reply("plan", json.dumps({"tasks": [{"task": "translation", "id": 0, "dep": [-1],
                                                 "args": args}]}))  # fmt: skip
    reply = await env.agent.handle(req("translate hi"))
    assert not reply.error, reply_text(reply)
    assert reply.tasks[0].status is TaskStatus.DONE


async def test_reask_after_a_plan_with_tasks_says_empty_is_wrong_and_refuses_it(
    agent_env: AgentEnv,
) -> None:
    env = agent_env
    env.llm.weak = WeakModel(empty_reask=True)  # a re-asked tiny model answers []
    env.llm.reply("plan", plan(step(0, "image-classification", image="/etc/passwd")))
    reply = await env.agent.handle(req("what is in my photo?", png(), png("other.png")))
    assert reply.error
    assert "no task" in reply_text(reply) and "plan" in reply_text(reply)
    _first, second = env.llm.calls("plan")
    reask = second["messages"][-1]["content"]
    assert "an empty list [] is wrong here" in reask and "if no model is needed" not in reask
    assert env.llm.calls("answer") == [] and env.hf.calls == []  # nothing invented
    assert reply.usage.llm_calls == 2


async def test_reask_with_files_says_empty_is_wrong(agent_env: AgentEnv) -> None:
    env = agent_env
    env.llm.reply(
        "plan", "Let me look at it.", plan(step(0, "image-classification", image="photo.png"))
    )
    reply = await env.agent.handle(req("what is in my photo?", png()))
    assert not reply.error, reply_text(reply)
    assert "an empty list [] is wrong here" in env.llm.calls("plan")[1]["messages"][-1]["content"]


async def test_reask_of_chit_chat_may_answer_empty(agent_env: AgentEnv) -> None:
    env = agent_env
    env.llm.reply("plan", "Hello there!", "[]")
    env.llm.reply("answer", "Hello! How can I help?")
    reply = await env.agent.handle(req("hi"))
    assert not reply.error and reply_text(reply) == "Hello! How can I help?"
    assert "(or [] if no model is needed)" in env.llm.calls("plan")[1]["messages"][-1]["content"]


async def test_echoed_markup_answer_is_replaced_by_the_fallback(agent_env: AgentEnv) -> None:
    env = agent_env
    env.llm.weak = WeakModel(echo=True)
    env.llm.reply("plan", plan(step(0, "translation", text="hi")))
    reply = await env.agent.handle(req("translate hi"))
    assert reply.fallback and not reply.error
    assert "<request>" not in reply_text(reply) and "<results>" not in reply_text(reply)
    assert "task 0, translation on acme/translation-a: done" in reply_text(reply)


async def test_looping_model_is_bounded_by_the_caps(agent_env: AgentEnv) -> None:
    env = agent_env
    env.llm.weak = WeakModel(loop=True)
    reply = await env.agent.handle(req("draw a cat"))
    assert (
        reply.error
        and "kept repeating itself" in reply_text(reply)
        and "LLM_MODEL" in reply_text(reply)
    )
    calls = env.llm.calls()
    cap = planning_token_cap(env.agent.config.max_tasks, len("draw a cat"))
    assert [b["max_completion_tokens"] for b in calls] == [cap] * 2
    assert reply.usage.llm_calls == 2


async def test_context_overflow_in_planning_is_clear(agent_env: AgentEnv) -> None:
    env = agent_env
    env.llm.weak = WeakModel(n_ctx=300, props=False)  # the planning prompt is ~600 tokens
    reply = await env.agent.handle(req("draw a cat"))
    assert reply.error
    assert "too long" in reply_text(reply) and "context holds 300" in reply_text(reply)
    assert "HTTP 400" not in reply_text(reply)
    assert len(env.llm.calls()) == 1 and reply.usage.llm_calls == 1


async def test_answer_stage_failure_is_a_counted_fallback(agent_env: AgentEnv) -> None:
    env = agent_env
    env.llm.fail(500, stage="answer")
    reply = await env.agent.handle(req("hi"))
    assert reply.fallback and not reply.error
    assert "HTTP 500" in reply_text(reply)
    assert reply.usage.llm_calls == 2  # the plan, and the failed answer
