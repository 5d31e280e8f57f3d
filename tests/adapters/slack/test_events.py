"""Events end to end: signed requests → the real Bolt app (HTTP mode) → the
real Agent on the LLM/HF fakes → what the fake Slack Web API received."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from core.types import ConversationKey
from tests.adapters.slack.conftest import BotFactory, SlackBot
from tests.fakes.agent_fixture import AgentEnv, model_a, open_agent_env
from tests.fakes.hf_fake import HFCall
from tests.fakes.job_fixtures import FakeClock, task_checkpointed
from tests.fakes.prose import long_prose
from tests.fakes.samples import sample_png
from tests.fakes.slack_fake import (
    BOT_TOKEN,
    TEAM_ID,
    Call,
    FakeSlack,
    dm_event,
    event_body,
    mention_event,
)


def plan(*tasks: dict[str, Any]) -> str:
    return json.dumps(list(tasks))


def step(id: int, task: str, dep: list[int] | None = None, **args: str) -> dict[str, Any]:
    return {"task": task, "id": id, "dep": dep or [-1], "args": args}


async def hang(call: HFCall) -> Any:
    """A model that never answers (until the fake stops)."""
    await asyncio.Event().wait()


async def until(predicate: Callable[[], Any], within: float = 20.0) -> None:
    async with asyncio.timeout(within):
        while True:
            if predicate():
                return
            await asyncio.sleep(0.02)


def is_final(text: str) -> bool:
    return text.startswith(("✅", "❌"))


async def finished(fake: FakeSlack, channel: str, thread_ts: str | None) -> tuple[Call, str]:
    """Wait for the turn in ``thread_ts`` to end; return its status post and
    the status message's final text."""
    (status, *_) = await fake.wait_for(
        "chat.postMessage",
        where=lambda c: (
            c.result.get("ok") is True
            and c.args.get("channel") == channel
            and c.args.get("thread_ts") == thread_ts
        ),
    )
    ts = status.result["ts"]
    if is_final(status.args["text"]):  # never edited: the turn failed before starting
        return status, status.args["text"]
    (final,) = await fake.wait_for(
        "chat.update",
        where=lambda c: c.args.get("ts") == ts and is_final(str(c.args.get("text"))),
    )
    return status, str(final.args["text"])


def posts_in(fake: FakeSlack, thread_ts: str | None, channel: str = "C0CHAN") -> list[str]:
    return [
        str(c.args["text"])
        for c in fake.calls_to("chat.postMessage")
        if c.result.get("ok")
        and c.args.get("thread_ts") == thread_ts
        and c.args.get("channel") == channel
    ]


async def test_mention_answers_in_its_thread_with_status_updates_and_mrkdwn(
    slack_bot: SlackBot, agent_env: AgentEnv
) -> None:
    agent_env.llm.delay = 0.2  # each stage stays on screen long enough to be shown
    agent_env.llm.reply("plan", plan(step(0, "translation", text="hello")))
    agent_env.llm.reply("answer", "## Result\n**Bonjour** — see [the docs](https://example.com).")
    event = mention_event("translate hello into French", ts="1700000000.000100")

    delivery = await slack_bot.deliver(event_body(event))
    assert delivery.status == 200

    status, final = await finished(slack_bot.fake, "C0CHAN", "1700000000.000100")
    # one status message in the new thread, edited through the stages, ending ✅
    assert status.args["thread_ts"] == "1700000000.000100"
    edits = [str(c.args["text"]) for c in slack_bot.fake.calls_to("chat.update")]
    assert any("planning" in t for t in edits)
    assert any("translation" in t and model_a("translation") in t for t in edits)
    assert final.startswith("✅") and "✅ 0. translation" in final
    assert all(c.args["ts"] == status.result["ts"] for c in slack_bot.fake.calls_to("chat.update"))
    # the answer, converted to mrkdwn, in the same thread
    posts = posts_in(slack_bot.fake, "1700000000.000100")
    assert posts[1] == "*Result*\n*Bonjour* — see <https://example.com|the docs>."
    # the conversation key is the thread; the mention is gone from the text
    (request,) = slack_bot.agent.requests
    assert request.conversation == ConversationKey("slack", TEAM_ID, "C0CHAN", "1700000000.000100")
    assert request.text == "translate hello into French" and request.user_id == "U0USER"
    # every Web API call carried the bot token
    assert {c.token for c in slack_bot.fake.calls} == {BOT_TOKEN}


async def test_ack_returns_before_any_llm_call(slack_bot: SlackBot, agent_env: AgentEnv) -> None:
    planning = asyncio.Event()

    async def held(body: dict[str, Any]) -> str:
        await planning.wait()  # the language model answers only when the test says so
        return "[]"

    agent_env.llm.reply("plan", held)
    event = mention_event("what is a fox?")

    delivery = await slack_bot.deliver(event_body(event))  # returns while planning is held

    assert delivery.status == 200
    await until(lambda: agent_env.llm.calls("plan"))  # the work goes on after the ack
    planning.set()
    _, final = await finished(slack_bot.fake, "C0CHAN", event["ts"])
    assert final.startswith("✅")


async def test_generated_image_is_uploaded_into_the_thread(
    slack_bot: SlackBot, agent_env: AgentEnv
) -> None:
    agent_env.llm.reply("plan", plan(step(0, "text-to-image", text="a red square")))
    agent_env.llm.reply("answer", "Here is your red square.")
    event = mention_event("draw a red square")

    await slack_bot.deliver(event_body(event))
    _, final = await finished(slack_bot.fake, "C0CHAN", event["ts"])
    assert final.startswith("✅")

    fake = slack_bot.fake
    (step1,) = await fake.wait_for("files.getUploadURLExternal")
    (step2,) = fake.calls_to("upload")
    (step3,) = fake.calls_to("files.completeUploadExternal")
    assert step1.at <= step2.at <= step3.at
    (upload,) = fake.uploaded()
    assert upload.filename == "image.png" and upload.length == len(sample_png())
    assert upload.data == sample_png()  # the bytes the HF fake generated
    assert (upload.channel, upload.thread_ts) == ("C0CHAN", event["ts"])
    assert "Here is your red square." in posts_in(fake, event["ts"])


async def test_an_answers_files_are_uploaded_at_once_in_one_share(
    slack_bot: SlackBot, agent_env: AgentEnv
) -> None:
    """Three pictures: their upload URLs are all asked for before Slack has
    answered the first (not one round trip after another), their bytes sent,
    and the three shared in one completion, in the answer's order."""
    sizes = {"one": 61, "two": 62, "three": 63}
    agent_env.hf.serve(
        model_a("text-to-image"),
        "text-to-image",
        lambda call: sample_png(w=sizes[str(call.json["inputs"])]),
    )
    agent_env.llm.reply(
        "plan",
        plan(
            step(0, "text-to-image", text="one"),
            step(1, "text-to-image", text="two"),
            step(2, "text-to-image", text="three"),
        ),
    )
    agent_env.llm.reply("answer", "Here are your three pictures.")
    fake = slack_bot.fake
    released = fake.hold("files.getUploadURLExternal", times=3, after=True)
    event = mention_event("draw one, two and three")

    await slack_bot.deliver(event_body(event))
    asked = await fake.wait_for("files.getUploadURLExternal", count=3, within=20)
    assert not fake.calls_to("upload")  # no answer to any of them yet
    released.set()
    _, final = await finished(fake, "C0CHAN", event["ts"])
    assert final.startswith("✅")
    (shared,) = await fake.wait_for("files.completeUploadExternal")
    assert len(asked) == 3 and len(fake.calls_to("upload")) == 3
    files = json.loads(shared.args["files"])
    assert sorted(f["id"] for f in files) == sorted(a.result["file_id"] for a in asked)
    # shared in the answer's order, each id with its own file's name and bytes
    assert [f["title"] for f in files] == ["image.png", "image-2.png", "image-3.png"]
    for f in files:
        upload = fake.uploads[f["id"]]
        assert upload.filename == f["title"] and upload.length == len(upload.data or b"")
    assert sorted(fake.uploads[f["id"]].data or b"" for f in files) == sorted(
        sample_png(w=w) for w in sizes.values()
    )
    assert all((u.channel, u.thread_ts) == ("C0CHAN", event["ts"]) for u in fake.uploaded())


async def test_mention_inside_a_thread_continues_that_thread(
    slack_bot: SlackBot, agent_env: AgentEnv
) -> None:
    root = "1700000000.000001"
    first = mention_event("hello", ts=root)
    second = mention_event("and again", ts="1700000000.000200", thread_ts=root)

    await slack_bot.deliver(event_body(first))
    await finished(slack_bot.fake, "C0CHAN", root)
    await slack_bot.deliver(event_body(second))
    await slack_bot.fake.wait_for(
        "chat.update", where=lambda c: is_final(str(c.args.get("text"))), count=2
    )

    keys = {r.conversation for r in slack_bot.agent.requests}
    assert keys == {ConversationKey("slack", TEAM_ID, "C0CHAN", root)}
    assert all(c.args.get("thread_ts") == root for c in slack_bot.fake.calls_to("chat.postMessage"))
    # the second turn saw the first one's history
    answer_prompt = json.dumps(agent_env.llm.calls("plan")[1]["messages"])
    assert "hello" in answer_prompt


async def test_direct_message_works_without_a_mention(slack_bot: SlackBot) -> None:
    event = dm_event("tell me a joke")

    await slack_bot.deliver(event_body(event))
    _, final = await finished(slack_bot.fake, "D0DM", None)

    assert final.startswith("✅")
    (request,) = slack_bot.agent.requests
    assert request.conversation == ConversationKey("slack", TEAM_ID, "D0DM", None)
    assert request.text == "tell me a joke"
    assert "Here is the answer." in posts_in(slack_bot.fake, None, channel="D0DM")


@pytest.mark.parametrize(
    "extra",
    [
        {"subtype": "message_changed"},
        {"subtype": "bot_message", "bot_id": "B0OTHER"},
        {"bot_id": "B0OTHER"},
    ],
    ids=["edit", "bot-subtype", "bot-id"],
)
async def test_dm_events_that_are_not_a_person_talking_are_acked_and_ignored(
    slack_bot: SlackBot, extra: dict[str, Any]
) -> None:
    ignored = dm_event("ignore me", **extra)
    delivery = await slack_bot.deliver(event_body(ignored))
    assert delivery.status == 200
    # a real message afterwards is the only one answered
    await slack_bot.deliver(event_body(dm_event("answer me")))
    await finished(slack_bot.fake, "D0DM", None)
    assert [r.text for r in slack_bot.agent.requests] == ["answer me"]
    assert len(slack_bot.agent.claims) == 1  # the ignored event never got that far


async def test_redelivery_with_retry_header_is_acked_and_ignored(
    slack_bot: SlackBot, agent_env: AgentEnv
) -> None:
    body = event_body(mention_event("hello"))
    await slack_bot.deliver(body)
    await finished(slack_bot.fake, "C0CHAN", body["event"]["ts"])
    calls_before = len(slack_bot.fake.calls)
    llm_before = len(agent_env.llm.calls())

    retry = await slack_bot.deliver(body, retry_num=1)

    # The retry found its event's job, answered already: nothing was started.
    assert retry.status == 200
    claims = await slack_bot.agent.wait_claims(2)
    assert [fresh for _, fresh in claims] == [True, False]
    assert len(slack_bot.fake.calls) == calls_before
    assert len(agent_env.llm.calls()) == llm_before
    assert len(slack_bot.agent.requests) == 1


async def test_duplicate_event_id_produces_no_second_answer(
    slack_bot: SlackBot, agent_env: AgentEnv
) -> None:
    body = event_body(mention_event("hello"), event_id="Ev0DUPLICATE")
    await slack_bot.deliver(body)
    await finished(slack_bot.fake, "C0CHAN", body["event"]["ts"])
    posts_before = len(slack_bot.fake.calls_to("chat.postMessage"))
    llm_before = len(agent_env.llm.calls())

    again = await slack_bot.deliver(body)  # no retry header: e.g. another replica
    claims = await slack_bot.agent.wait_claims(2)

    assert again.status == 200
    assert claims == [("Ev0DUPLICATE", True), ("Ev0DUPLICATE", False)]
    assert len(slack_bot.fake.calls_to("chat.postMessage")) == posts_before
    assert len(agent_env.llm.calls()) == llm_before
    assert len(slack_bot.agent.requests) == 1


async def test_event_ids_survive_a_restart(make_slack_bot: BotFactory, agent_env: AgentEnv) -> None:
    """The claim is in the store: a second app (restart, replica) on the
    same database also refuses the event."""
    body = event_body(mention_event("hello"), event_id="Ev0RESTART")
    first = await make_slack_bot(agent_env.agent)
    await first.deliver(body)
    await finished(first.fake, "C0CHAN", body["event"]["ts"])

    second = await make_slack_bot(agent_env.agent)
    await second.deliver(body, retry_num=1)
    assert await second.agent.wait_claims(1) == [("Ev0RESTART", False)]
    assert len(second.agent.requests) == 0


async def test_a_redelivered_event_whose_process_died_is_answered_after_the_restart(
    make_slack_bot: BotFactory, agent_env: AgentEnv, tmp_path: Path
) -> None:
    """The process dies mid-request (after the ack); Slack redelivers the
    event to the restarted process, which resumes the job: answered once, in
    the original thread, on the same status message, finished tasks not run
    again, the turn stored once."""
    env = agent_env
    env.llm.reply(
        "plan",
        plan(
            step(0, "text-to-image", text="a fox"),
            step(1, "image-classification", [0], image="<resource>-0"),
        ),
    )
    env.llm.reply("answer", "A fox, and what it is.")
    env.hf.serve(model_a("image-classification"), "image-classification", hang)
    thread = "1700000000.000500"
    body = event_body(
        mention_event("draw a fox and say what it is", ts=thread), event_id="Ev0CRASH"
    )
    first = await make_slack_bot(env.agent)
    assert (await first.deliver(body)).status == 200
    await until(lambda: env.hf.calls_for(model_a("image-classification")))
    await task_checkpointed(env.agent, 0)  # the drawing is saved with the job
    (status,) = first.fake.calls_to("chat.postMessage")
    await env.agent.jobs.abandon()  # killed: no lease released, nothing posted

    clock = FakeClock()
    clock.advance(env.agent.config.job_lease_seconds + 1)
    async with open_agent_env(tmp_path, env.llm, env.hf) as restarted:  # same store and media
        restarted.agent.jobs.clock = clock
        second = await make_slack_bot(restarted.agent)
        retry = await second.deliver(body, retry_num=1)
        assert retry.status == 200
        answers = await second.fake.wait_for(
            "chat.postMessage", where=lambda c: "what it is" in str(c.args.get("text")), within=20
        )
        await second.fake.wait_for(
            "chat.update",
            where=lambda c: (
                c.args.get("ts") == status.result["ts"] and str(c.args.get("text")).startswith("✅")
            ),
            within=20,
        )
        history = await restarted.agent.repo.load_history(
            ConversationKey("slack", TEAM_ID, "C0CHAN", thread)
        )
    assert len(answers) == 1 and answers[0].args["thread_ts"] == thread
    edits = [str(c.args["text"]) for c in second.fake.calls_to("chat.update")]
    assert any("Resuming" in t for t in edits)
    assert all(c.args["ts"] == status.result["ts"] for c in second.fake.calls_to("chat.update"))
    assert [t.text for t in history.turns] == [
        "draw a fox and say what it is",
        "A fox, and what it is.",
    ]
    assert len(env.hf.calls_for(model_a("text-to-image"))) == 1  # not run again
    assert len(env.hf.calls_for(model_a("image-classification"))) == 2
    (upload,) = second.fake.uploaded()
    assert (upload.filename, upload.thread_ts) == ("image.png", thread)


async def test_bad_signature_and_stale_timestamp_are_rejected(slack_bot: SlackBot) -> None:
    body = event_body(mention_event("hello"))
    forged = await slack_bot.deliver(body, secret="not-the-secret")
    stale = await slack_bot.deliver(body, timestamp=1_000_000_000)

    assert forged.status == 401 and stale.status == 401
    assert slack_bot.fake.calls == []
    assert slack_bot.agent.claims == []


async def test_shared_image_reaches_the_agent(slack_bot: SlackBot, agent_env: AgentEnv) -> None:
    fake = slack_bot.fake
    agent_env.llm.reply("plan", plan(step(0, "image-classification", image="photo.png")))
    shared = fake.add_file("photo.png", sample_png())
    event = mention_event("what is in this photo?", files=[shared])

    await slack_bot.deliver(event_body(event))
    _, final = await finished(fake, "C0CHAN", event["ts"])

    assert final.startswith("✅"), final
    assert fake.downloads == [{"file_id": shared["id"], "authorization": f"Bearer {BOT_TOKEN}"}]
    (request,) = slack_bot.agent.requests
    (attachment,) = request.attachments
    assert (attachment.name, attachment.mime, attachment.data) == (
        "photo.png",
        "image/png",
        sample_png(),
    )
    (hf_call,) = agent_env.hf.calls_for(model_a("image-classification"))
    assert hf_call.body == sample_png()


async def test_html_instead_of_the_file_is_an_error_in_the_thread(
    slack_bot: SlackBot, agent_env: AgentEnv
) -> None:
    fake = slack_bot.fake
    shared = fake.add_file("photo.png", sample_png(), login_page=True)
    event = mention_event("what is in this photo?", files=[shared])

    await slack_bot.deliver(event_body(event))
    _, final = await finished(fake, "C0CHAN", event["ts"])

    assert final.startswith("❌")
    assert "web page instead of photo.png" in final and "files:read" in final
    assert slack_bot.agent.requests == []
    assert agent_env.llm.calls() == []


async def test_llm_failure_is_a_short_message_in_the_thread(
    slack_bot: SlackBot, agent_env: AgentEnv
) -> None:
    agent_env.llm.fail(500, times=10)
    event = mention_event("draw a cat")

    await slack_bot.deliver(event_body(event))
    _, final = await finished(slack_bot.fake, "C0CHAN", event["ts"])

    # the status message says why; nothing else is posted
    assert final.startswith("❌ The language model at 127.0.0.1")
    assert "HTTP 500" in final and len(final) < 500
    assert len(posts_in(slack_bot.fake, event["ts"])) == 1


async def test_agent_crash_is_reported_in_thread_with_trace_in_log(
    slack_bot: SlackBot, caplog: pytest.LogCaptureFixture
) -> None:
    slack_bot.agent.fail_with = RuntimeError("boom in the agent")
    event = mention_event("hello")

    with caplog.at_level(logging.ERROR, logger="adapters.slack"):
        await slack_bot.deliver(event_body(event))
        _, final = await finished(slack_bot.fake, "C0CHAN", event["ts"])

    (request,) = slack_bot.agent.requests
    assert final == (
        f"❌ Sorry, something went wrong on my side (request `{request.request_id}`). "
        "The details are in the log."
    )
    (record,) = [r for r in caplog.records if request.request_id in r.getMessage()]
    assert record.exc_info and "boom in the agent" in str(record.exc_info[1])


async def test_rate_limited_web_api_calls_are_retried(
    slack_bot: SlackBot, agent_env: AgentEnv
) -> None:
    slack_bot.fake.rate_limit("chat.postMessage", times=1)
    event = mention_event("hello")

    await slack_bot.deliver(event_body(event))
    _, final = await finished(slack_bot.fake, "C0CHAN", event["ts"])

    assert final.startswith("✅")
    statuses = [c.result.get("error") for c in slack_bot.fake.calls_to("chat.postMessage")]
    assert statuses[0] == "ratelimited" and statuses[1] is None


async def test_long_answer_is_split_at_slack_limits(
    slack_bot: SlackBot, agent_env: AgentEnv
) -> None:
    long = "\n\n".join(f"Paragraph {i}: " + long_prose(750, seed=i) for i in range(12))
    agent_env.llm.reply("answer", long)
    event = mention_event("write a lot")

    await slack_bot.deliver(event_body(event))
    await finished(slack_bot.fake, "C0CHAN", event["ts"])

    parts = posts_in(slack_bot.fake, event["ts"])[1:]
    assert len(parts) >= 2 and all(len(p) <= 3_900 for p in parts)
    assert "\n".join(parts).split() == long.split()


async def test_empty_mention_gets_a_hint_without_calling_the_agent(
    slack_bot: SlackBot, agent_env: AgentEnv
) -> None:
    event = mention_event("")
    await slack_bot.deliver(event_body(event))
    (hint,) = await slack_bot.fake.wait_for("chat.postMessage")
    assert hint.args["thread_ts"] == event["ts"] and "Ask me" in hint.args["text"]
    assert slack_bot.agent.requests == [] and agent_env.llm.calls() == []


async def test_url_verification_challenge_is_answered(slack_bot: SlackBot) -> None:
    """What Slack sends when an admin enters the HTTP mode request URL."""
    delivery = await slack_bot.deliver(
        {"token": "legacy", "challenge": "3eZbrw1aBm2rZgRNFdxV2595E9", "type": "url_verification"}
    )
    assert delivery.status == 200 and "3eZbrw1aBm2rZgRNFdxV2595E9" in delivery.body


async def test_a_mention_inside_a_dm_is_answered_once(slack_bot: SlackBot) -> None:
    """Should Slack send both app_mention and message.im for one DM, only the
    DM listener answers."""
    dm = dm_event("<@U0BOT> hi there", ts="1700000000.000300")
    mention = mention_event("hi there", channel="D0DM", ts="1700000000.000300")
    await slack_bot.deliver(event_body(mention))
    await slack_bot.deliver(event_body(dm))
    await finished(slack_bot.fake, "D0DM", None)
    assert [r.text for r in slack_bot.agent.requests] == ["hi there"]
    assert [fresh for _, fresh in slack_bot.agent.claims] == [True]


async def test_requests_over_the_cap_wait_in_order_saying_how_many_are_ahead(
    slack_bot: SlackBot, agent_env: AgentEnv
) -> None:
    """One request at a time (cap 1): the others get a status message with
    their place in the queue, and their files are not downloaded until their
    turn (queued requests hold no bytes)."""
    env, fake = agent_env, slack_bot.fake
    env.agent.jobs.max_inflight = 1
    opened = asyncio.Event()

    async def slow(call: HFCall) -> Any:
        await opened.wait()
        return [{"translation_text": "bonjour"}]

    env.hf.serve(model_a("translation"), "translation", slow)
    env.llm.reply("plan", *[plan(step(0, "translation", text="hello"))] * 3)
    shared = fake.add_file("notes.txt", b"some notes", "text/plain")
    events = [
        mention_event("translate hello", ts="1700000000.000901"),
        mention_event("and this", ts="1700000000.000902"),
        mention_event("and my notes", ts="1700000000.000903", files=[shared]),
    ]
    await slack_bot.deliver(event_body(events[0]))
    await until(lambda: env.hf.calls_for(model_a("translation")))
    for event in events[1:]:
        await slack_bot.deliver(event_body(event))
    queued = await fake.wait_for(
        "chat.postMessage", where=lambda c: "Queued" in str(c.args.get("text")), count=2
    )
    shown = {c.args["thread_ts"]: str(c.args["text"]) for c in queued}
    assert shown == {
        "1700000000.000902": "🕒 *Queued: you're next (I'm busy with other requests)*",
        "1700000000.000903": "🕒 *Queued: 1 request ahead of you*",
    }
    assert fake.downloads == []  # the queued request's file stays on Slack for now
    opened.set()
    for event in events:
        _, final = await finished(fake, "C0CHAN", event["ts"])
        assert final.startswith("✅"), final
    assert [r.text for r in slack_bot.agent.requests] == [
        "translate hello",
        "and this",
        "and my notes",
    ]
    assert [d["file_id"] for d in fake.downloads] == [shared["id"]]
    # each queued request's notice became its status message (edited, not a second one)
    for call in queued:
        assert any(c.args.get("ts") == call.result["ts"] for c in fake.calls_to("chat.update"))
