"""Slack's AI-app surface end to end: signed events → the real Bolt app (its
AsyncAssistant middleware) → the real agent on the LLM/HF fakes → what the
fake Slack Web API received: suggested prompts, the thread's title, the
status line, one streamed message with the plan as task cards and the
answer, feedback buttons whose clicks are stored with the turn, and the
fall-back to the status-message flow where the feature is missing."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest
from slack_sdk.web.async_client import AsyncWebClient

from adapters.chat.board import Board
from adapters.slack import SlackConfig
from adapters.slack.assistant import AssistantSurface, Features
from core.store.feedback import FeedbackStore
from core.types import ConversationKey, Stage, StageStarted
from tests.adapters.slack.conftest import BotFactory, SlackBot
from tests.fakes.agent_fixture import AgentEnv, model_a, open_agent_env
from tests.fakes.hf_fake import HFCall
from tests.fakes.job_fixtures import FakeClock, status_recorded, task_checkpointed
from tests.fakes.samples import sample_png
from tests.fakes.slack_fake import (
    BOT_TOKEN,
    SIGNING_SECRET,
    TEAM_ID,
    Call,
    FakeSlack,
    Stream,
    assistant_message,
    assistant_thread_started,
    event_body,
    feedback_click,
    mention_event,
)

THREAD = "1700000100.000100"
ANSWER = (
    "A red fox: a small wild canid with a bushy tail.\n"
    "The picture shows one, classified as **fox**."
)
DRAW_AND_CLASSIFY = [
    {"task": "text-to-image", "id": 0, "dep": [-1], "args": {"text": "a fox"}},
    {"task": "image-classification", "id": 1, "dep": [0], "args": {"image": "<resource>-0"}},
]


async def until(predicate: Callable[[], Any], within: float = 20.0) -> None:
    async with asyncio.timeout(within):
        while True:
            if predicate():
                return
            await asyncio.sleep(0.02)  # the fake's records, written by the app's tasks


def statuses(fake: FakeSlack) -> list[str]:
    return [str(c.args["status"]) for c in fake.calls_to("assistant.threads.setStatus")]


def chunk_kinds(fake: FakeSlack) -> list[str]:
    """Every chunk the streaming calls carried, in order."""
    kinds: list[str] = []
    for call in fake.calls:
        if call.method in ("chat.startStream", "chat.appendStream", "chat.stopStream"):
            kinds += [str(c["type"]) for c in call.args.get("chunks") or []]
    return kinds


def live(fake: FakeSlack) -> list[Stream]:
    return [s for s in fake.streams() if not s.deleted]


@pytest.fixture
async def feedback(agent_env: AgentEnv) -> AsyncIterator[FeedbackStore]:
    yield FeedbackStore(agent_env.agent.repo.db)


async def test_opening_a_chat_offers_suggested_prompts(slack_bot: SlackBot) -> None:
    await slack_bot.deliver(event_body(assistant_thread_started(thread_ts=THREAD)))

    (call,) = await slack_bot.fake.wait_for("assistant.threads.setSuggestedPrompts")
    assert (call.args["channel_id"], call.args["thread_ts"]) == ("D0DM", THREAD)
    prompts = call.args["prompts"]
    assert 2 <= len(prompts) <= 4 and all(p["title"] and p["message"] for p in prompts)
    assert any("Draw" in p["title"] for p in prompts) and call.args["title"]
    assert slack_bot.agent.claims == [] and slack_bot.agent.requests == []  # not a request


async def test_a_context_change_is_acknowledged_and_costs_no_call(slack_bot: SlackBot) -> None:
    changed = assistant_thread_started(thread_ts=THREAD, viewing="C0OTHER")
    changed["type"] = "assistant_thread_context_changed"
    delivery = await slack_bot.deliver(event_body(changed))
    assert delivery.status == 200
    await slack_bot.deliver(event_body(assistant_thread_started(thread_ts=THREAD)))
    await slack_bot.fake.wait_for("assistant.threads.setSuggestedPrompts")
    # Bolt's default would keep the context in a message's metadata: no such call
    calls = [c.method for c in slack_bot.fake.calls if c.method != "auth.test"]  # Bolt's own
    assert calls == ["assistant.threads.setSuggestedPrompts"]


async def test_an_assistant_thread_streams_the_plan_as_task_cards_then_the_answer(
    make_slack_bot: BotFactory, agent_env: AgentEnv, feedback: FeedbackStore
) -> None:
    env = agent_env
    bot = await make_slack_bot(env.agent, stream_buffer_chars=1, feedback=feedback)
    fake = bot.fake
    running = asyncio.Event()

    async def classify(call: HFCall) -> Any:
        await running.wait()  # held until its card says it is running
        return [{"label": "red fox", "score": 0.93}]

    planning = asyncio.Event()

    async def plan(body: dict[str, Any]) -> str:
        await planning.wait()  # held until the status line says it is planning
        return json.dumps(DRAW_AND_CLASSIFY)

    env.hf.serve(model_a("image-classification"), "image-classification", classify)
    env.llm.reply("plan", plan)
    env.llm.reply("answer", ANSWER)
    env.llm.stream_chunk_chars = 8
    event = assistant_message("draw a fox and say what it is", thread_ts=THREAD)

    assert (await bot.deliver(event_body(event))).status == 200
    await fake.wait_for(
        "assistant.threads.setStatus", where=lambda c: "planning" in c.args["status"]
    )
    planning.set()
    await until(
        lambda: any(
            u["id"] == "1" and u["status"] == "in_progress"
            for s in fake.streams()
            for u in s.task_history
        )
    )
    running.set()
    (stop,) = await fake.wait_for("chat.stopStream")
    await fake.wait_for("assistant.threads.setStatus", where=lambda c: c.args["status"] == "")

    (request,) = bot.agent.requests
    assert request.conversation == ConversationKey("slack", TEAM_ID, "D0DM", THREAD)
    # the thread is named after the request
    (title,) = fake.calls_to("assistant.threads.setTitle")
    assert title.args == {
        "channel_id": "D0DM",
        "thread_ts": THREAD,
        "title": "draw a fox and say what it is",
    }
    # the status line follows the stages, and is cleared at the end
    said = statuses(fake)
    assert said[0] == "is reading your message…"
    assert "is reading the conversation and planning…" in said
    assert any(s.startswith("is running tasks (") for s in said)
    assert said[-2:] == ["is sending 1 file…", ""]
    # one streamed message in the thread: the plan's cards, then the answer
    (stream,) = fake.streams()
    assert (stream.channel, stream.thread_ts, stream.stopped, stream.deleted) == (
        "D0DM",
        THREAD,
        True,
        False,
    )
    assert stream.args["task_display_mode"] == "plan"
    assert (stream.args["recipient_team_id"], stream.args["recipient_user_id"]) == (
        TEAM_ID,
        "U0USER",
    )
    assert stream.text == ANSWER
    assert {k: v["status"] for k, v in stream.tasks.items()} == {"0": "complete", "1": "complete"}
    assert stream.tasks["0"]["title"] == f"0. text-to-image · {model_a('text-to-image')}"
    states_of_1 = [u["status"] for u in stream.task_history if u["id"] == "1"]
    assert states_of_1.index("in_progress") < states_of_1.index("complete")
    assert stream.plan_titles[0] == "Plan: 2 tasks" and stream.plan_titles[-1] == "Ran 2 tasks"
    kinds = chunk_kinds(fake)
    assert kinds.index("task_update") < kinds.index("markdown_text")  # the plan first
    assert kinds.count("markdown_text") >= 4  # the answer came in pieces as it was written
    # 👍/👎 under the answer, naming the request
    (actions,) = stop.args["blocks"]
    (buttons,) = actions["elements"]
    assert (actions["type"], buttons["type"]) == ("context_actions", "feedback_buttons")
    assert buttons["positive_button"]["value"] == f"good:{request.request_id}"
    assert buttons["negative_button"]["value"] == f"bad:{request.request_id}"
    # no status message, no answer message: the file goes into the thread after it
    assert fake.calls_to("chat.postMessage") == [] and fake.calls_to("chat.update") == []
    await fake.wait_for("files.completeUploadExternal")  # the file goes after the stream
    (upload,) = fake.uploaded()
    assert (upload.filename, upload.channel, upload.thread_ts) == ("image.png", "D0DM", THREAD)
    assert upload.data == sample_png()


async def test_feedback_clicks_are_stored_with_the_turn_and_acknowledged(
    make_slack_bot: BotFactory, agent_env: AgentEnv, feedback: FeedbackStore
) -> None:
    bot = await make_slack_bot(agent_env.agent, feedback=feedback)
    fake = bot.fake
    await bot.deliver(event_body(assistant_message("tell me a joke", thread_ts=THREAD)))
    (stop,) = await fake.wait_for("chat.stopStream")
    (request,) = bot.agent.requests
    good, bad = (
        stop.args["blocks"][0]["elements"][0][b]["value"]
        for b in ("positive_button", "negative_button")
    )

    def click(value: str, user: str = "U0USER") -> dict[str, Any]:
        return feedback_click(value, message_ts=stop.args["ts"], thread_ts=THREAD, user=user)

    assert (await bot.interact(click(good))).status == 200
    (thanks,) = await fake.wait_for("chat.postEphemeral")
    assert await feedback.for_request(request.request_id) == {"U0USER": "good"}
    assert (thanks.args["user"], thanks.args["channel"], thanks.args["thread_ts"]) == (
        "U0USER",
        "D0DM",
        THREAD,
    )
    assert "👍" in thanks.args["text"]

    await bot.interact(click(bad))  # changed their mind: the last click counts
    await bot.interact(click(good, user="U0OTHER"))
    await fake.wait_for("chat.postEphemeral", count=3)
    assert await feedback.for_request(request.request_id) == {"U0USER": "bad", "U0OTHER": "good"}

    # a value that names no request is acknowledged, and nothing is stored
    assert (await bot.interact(click("good:"))).status == 200
    assert (await bot.interact(click("great:abc"))).status == 200
    assert len(fake.calls_to("chat.postEphemeral")) == 3


async def test_a_failed_request_says_why_in_the_thread(
    slack_bot: SlackBot, agent_env: AgentEnv
) -> None:
    agent_env.llm.fail(500, times=5)
    await slack_bot.deliver(event_body(assistant_message("draw a cat", thread_ts=THREAD)))

    (failure,) = await slack_bot.fake.wait_for(
        "chat.postMessage", where=lambda c: str(c.args["text"]).startswith("❌")
    )
    await slack_bot.fake.wait_for(
        "assistant.threads.setStatus", where=lambda c: c.args["status"] == ""
    )
    assert failure.args["thread_ts"] == THREAD and "HTTP 500" in failure.args["text"]
    assert slack_bot.fake.streams() == []  # nothing was planned, nothing streamed
    assert len(slack_bot.fake.calls_to("chat.postMessage")) == 1


async def test_a_stream_that_breaks_off_is_replaced_by_one_answer(
    make_slack_bot: BotFactory, agent_env: AgentEnv
) -> None:
    env = agent_env
    bot = await make_slack_bot(env.agent, stream_buffer_chars=1)
    env.llm.reply("plan", json.dumps(DRAW_AND_CLASSIFY[:1]))
    env.llm.reply("answer", ANSWER)
    env.llm.stream_chunk_chars = 8
    env.llm.break_stream(40, stage="answer")
    await bot.deliver(event_body(assistant_message("draw a fox", thread_ts=THREAD)))

    await bot.fake.wait_for("chat.stopStream", where=lambda c: "blocks" in c.args)
    await bot.fake.wait_for("assistant.threads.setStatus", where=lambda c: c.args["status"] == "")

    broken = [s for s in bot.fake.streams() if s.deleted]
    (answer,) = live(bot.fake)
    assert len(broken) == 1 and broken[0].text and ANSWER.startswith(broken[0].text)
    assert (
        answer.text.startswith("I could not write a full answer") and ANSWER[:30] not in answer.text
    )
    assert {k: v["status"] for k, v in answer.tasks.items()} == {"0": "complete"}  # shown again
    await bot.fake.wait_for("files.completeUploadExternal")  # the file goes after the stream
    assert [u.filename for u in bot.fake.uploaded()] == ["image.png"]


@pytest.mark.parametrize(
    ("method", "error"),
    [
        ("assistant.threads.setStatus", "unknown_method"),
        ("assistant.threads.setTitle", "missing_scope"),
        ("chat.startStream", "not_allowed_token_type"),
        ("chat.startStream", "feature_not_enabled"),
    ],
)
async def test_without_the_feature_the_thread_gets_the_status_message_flow(
    slack_bot: SlackBot, agent_env: AgentEnv, method: str, error: str
) -> None:
    fake = slack_bot.fake
    fake.lack_feature(method, error=error)
    agent_env.llm.reply(
        "plan", json.dumps(DRAW_AND_CLASSIFY[:1]), json.dumps(DRAW_AND_CLASSIFY[:1])
    )
    agent_env.llm.reply("answer", "**Here** is your fox.", "Another fox.")

    await slack_bot.deliver(event_body(assistant_message("draw a fox", thread_ts=THREAD)))
    status, final = await finished(fake, THREAD)

    assert final.startswith("✅") and "text-to-image" in final
    assert posts_in(fake) == [status.args["text"], "*Here* is your fox."]  # mrkdwn, once
    assert live(fake) == [] and [u.thread_ts for u in fake.uploaded()] == [THREAD]
    native = {"assistant.threads.setStatus", "assistant.threads.setTitle", "chat.startStream"}
    tried = len([c for c in fake.calls if c.method in native])

    # the workspace is remembered: its next turn goes straight to a status message
    await slack_bot.deliver(
        event_body(assistant_message("again", thread_ts=THREAD, ts="1700000100.000900"))
    )
    await fake.wait_for(
        "chat.update", where=lambda c: str(c.args["text"]).startswith("✅"), count=2
    )
    assert len([c for c in fake.calls if c.method in native]) == tried
    assert "Another fox." in posts_in(fake)


async def test_a_channel_mention_keeps_its_status_message(slack_bot: SlackBot) -> None:
    event = mention_event("tell me a joke", ts="1700000200.000100")
    await slack_bot.deliver(event_body(event))
    await slack_bot.fake.wait_for(
        "chat.update", where=lambda c: str(c.args["text"]).startswith("✅")
    )
    methods = {c.method for c in slack_bot.fake.calls}
    assert not {m for m in methods if m.startswith("assistant.") or "Stream" in m}
    assert "Here is the answer." in posts_in(slack_bot.fake, "1700000200.000100", "C0CHAN")


async def test_a_resumed_assistant_job_answers_in_its_thread_once(
    make_slack_bot: BotFactory, agent_env: AgentEnv, tmp_path: Path
) -> None:
    """The process dies with the plan streamed and a task running; Slack
    redelivers the event to the restarted process, which removes the
    half-written stream and answers in the same thread: one answer, the
    finished task not run again."""
    env = agent_env
    env.llm.reply("plan", json.dumps(DRAW_AND_CLASSIFY))
    env.llm.reply("answer", "A fox, and what it is.")

    async def hang(call: HFCall) -> Any:
        await asyncio.Event().wait()

    env.hf.serve(model_a("image-classification"), "image-classification", hang)
    body = event_body(assistant_message("draw a fox", thread_ts=THREAD), event_id="Ev0AIRESUME")
    first = await make_slack_bot(env.agent)
    await first.deliver(body)
    await until(lambda: env.hf.calls_for(model_a("image-classification")))
    await task_checkpointed(env.agent, 0)
    await until(
        lambda: any(
            s.tasks.get("1", {}).get("status") == "in_progress" for s in first.fake.streams()
        )
    )
    (old,) = first.fake.streams()
    # Slack has the stream before the job records it: killed in between, the
    # stream could not be found again (a window no order of the two closes)
    await status_recorded(env.agent, lambda posted: posted.get("stream") == old.ts)
    await env.agent.jobs.abandon()  # killed: nothing more from this process

    clock = FakeClock()
    clock.advance(env.agent.config.job_lease_seconds + 1)
    env.hf.serve(
        model_a("image-classification"), "image-classification", [{"label": "fox", "score": 1.0}]
    )
    async with open_agent_env(tmp_path, env.llm, env.hf) as restarted:
        restarted.agent.jobs.clock = clock
        second = await make_slack_bot(restarted.agent)
        assert (await second.deliver(body, retry_num=1)).status == 200
        await second.fake.wait_for("chat.stopStream", where=lambda c: "blocks" in c.args, within=20)
        await second.fake.wait_for("files.completeUploadExternal")

    assert old.deleted  # the half-written one is gone
    (answer,) = live(second.fake)
    assert (answer.channel, answer.thread_ts, answer.text) == (
        "D0DM",
        THREAD,
        "A fox, and what it is.",
    )
    assert {k: v["status"] for k, v in answer.tasks.items()} == {"0": "complete", "1": "complete"}
    assert any("Resuming" in s or "resuming" in s for s in statuses(second.fake))
    assert len(env.hf.calls_for(model_a("text-to-image"))) == 1  # not run again
    assert [(u.filename, u.thread_ts) for u in second.fake.uploaded()] == [("image.png", THREAD)]


async def test_a_waiting_request_says_its_place_in_the_status_line(
    slack_bot: SlackBot, agent_env: AgentEnv
) -> None:
    env, fake = agent_env, slack_bot.fake
    env.agent.jobs.max_inflight = 1
    opened = asyncio.Event()

    async def slow(call: HFCall) -> Any:
        await opened.wait()
        return [{"translation_text": "bonjour"}]

    env.hf.serve(model_a("translation"), "translation", slow)
    translate = {"task": "translation", "id": 0, "dep": [-1], "args": {"text": "hello"}}
    env.llm.reply("plan", json.dumps([translate]), json.dumps([translate]))
    second = "1700000100.000777"
    await slack_bot.deliver(event_body(assistant_message("translate hello", thread_ts=THREAD)))
    await until(lambda: env.hf.calls_for(model_a("translation")))
    await slack_bot.deliver(event_body(assistant_message("and this", thread_ts=second)))

    (queued,) = await fake.wait_for(
        "assistant.threads.setStatus", where=lambda c: c.args["thread_ts"] == second
    )
    assert queued.args["status"] == "is queued: you're next (I'm busy with other requests)…"
    opened.set()
    await fake.wait_for("chat.stopStream", count=2)
    assert {s.thread_ts for s in live(fake)} == {THREAD, second}
    assert fake.calls_to("chat.postMessage") == []  # no status message for the queue either


# ------------------------------------------------------------------ helpers


def posts_in(fake: FakeSlack, thread_ts: str = THREAD, channel: str = "D0DM") -> list[str]:
    return [
        str(c.args["text"])
        for c in fake.calls_to("chat.postMessage")
        if c.result.get("ok")
        and c.args.get("thread_ts") == thread_ts
        and c.args.get("channel") == channel
    ]


async def finished(fake: FakeSlack, thread_ts: str) -> tuple[Call, str]:
    """The turn's status message and its final text."""
    (status, *_) = await fake.wait_for(
        "chat.postMessage",
        where=lambda c: c.result.get("ok") is True and c.args.get("thread_ts") == thread_ts,
    )
    (final,) = await fake.wait_for(
        "chat.update",
        where=lambda c: (
            c.args.get("ts") == status.result["ts"] and str(c.args.get("text"))[:1] in "✅❌"
        ),
    )
    return status, str(final.args["text"])


async def test_a_status_edit_after_the_turn_ended_keeps_the_line_until_the_answer_is_out(
    agent_env: AgentEnv, slack_fake: FakeSlack
) -> None:
    """The status is paced: an edit offered while tasks ran may be pushed
    after the turn's end reached the board, just before the answer is
    posted.  The status line reads the board: it must not be cleared then
    (and come back as "is sending…"), only once the answer is out."""
    client = AsyncWebClient(token=BOT_TOKEN, base_url=slack_fake.base_url)
    surface = AssistantSurface(
        agent_env.agent,
        client,
        SlackConfig(bot_token=BOT_TOKEN, signing_secret=SIGNING_SECRET),
        team=TEAM_ID,
        channel="D0DM",
        thread_ts=THREAD,
        user="U0USER",
        features=Features(),
        request_id="r-late-edit",
    )
    board = Board()
    surface.follow(board)
    board.apply(StageStarted(Stage.RUNNING))
    await surface.post_status("running")
    board.stage = Stage.DONE  # Finished applied; the answer not posted yet

    await surface.edit_status("⏳ a paced edit from while the tasks ran")
    assert "" not in statuses(slack_fake)

    await surface.post_answer("A fox.", [])
    await surface.edit_status("✅ Done")  # the turn's last status: the line goes
    said = statuses(slack_fake)
    assert said[0].startswith("is running tasks") and said[1:] == [""]
