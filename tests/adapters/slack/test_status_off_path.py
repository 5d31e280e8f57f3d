"""The status message is posted beside the turn, not in front of it: the
planning call does not wait for ``chat.postMessage``, and nothing is shown
or posted before the status message is out (the real Bolt app on the fake
Slack and the fake language model; the order is the fakes' recorded order)."""

from __future__ import annotations

import asyncio
import logging

import pytest

from tests.adapters.slack.conftest import SlackBot
from tests.fakes.agent_fixture import AgentEnv
from tests.fakes.openai_fake import answering, translation_plan
from tests.fakes.slack_fake import Call, FakeSlack, event_body, mention_event


def in_thread(fake: FakeSlack, thread: str) -> list[Call]:
    """The chat.* calls about ``thread``'s messages, in the order Slack got them."""
    ts: set[str] = set()
    calls = []
    for c in fake.calls:
        if c.method == "chat.postMessage" and c.args.get("thread_ts") == thread:
            calls.append(c)
            if c.result.get("ok"):
                ts.add(str(c.result["ts"]))
        elif c.method == "chat.update" and c.args.get("ts") in ts:
            calls.append(c)
    return calls


async def test_planning_starts_while_the_status_message_is_being_posted(
    slack_bot: SlackBot, agent_env: AgentEnv
) -> None:
    fake, llm = slack_bot.fake, agent_env.llm
    event = mention_event("translate hi")
    thread = event["ts"]
    status_posted = fake.hold("chat.postMessage", where=lambda a: a.get("thread_ts") == thread)
    llm.gate = asyncio.Event()
    llm.reply("plan", translation_plan())
    asked, answer = answering("Bonjour")
    llm.reply("answer", answer)

    assert (await slack_bot.deliver(event_body(event))).status == 200

    await llm.wait_in_flight(1)  # the planning call is at the model...
    assert len(llm.calls("plan")) == 1
    assert in_thread(fake, thread) == []  # ...and the status message is not out yet
    llm.gate.set()
    await asyncio.wait_for(asked.wait(), 20)  # the whole turn ran meanwhile
    assert in_thread(fake, thread) == []  # but nothing was shown or posted before the status
    status_posted.set()

    await fake.wait_for(
        "chat.update", where=lambda c: str(c.args.get("text", "")).startswith(("✅", "❌"))
    )
    status, *rest = in_thread(fake, thread)
    assert status.method == "chat.postMessage" and "translate" not in str(status.args["text"])
    posts = [c for c in rest if c.method == "chat.postMessage"]
    assert [str(c.args["text"]) for c in posts] == ["Bonjour"]  # one answer, after the status
    assert all(c.args["ts"] == status.result["ts"] for c in rest if c.method == "chat.update")
    assert str(rest[-1].args["text"]).startswith("✅")


async def test_a_status_message_that_cannot_be_posted_stops_the_turn(
    slack_bot: SlackBot, agent_env: AgentEnv, caplog: pytest.LogCaptureFixture
) -> None:
    fake, llm = slack_bot.fake, agent_env.llm
    llm.gate = asyncio.Event()  # the planning call, if it starts, waits
    llm.reply("plan", translation_plan(), translation_plan())
    llm.reply("answer", "first", "second")
    fake.fail("chat.postMessage")  # the status message of the first request
    event = mention_event("translate hi")
    thread = event["ts"]

    with caplog.at_level(logging.INFO, logger="adapters.chat.turn"):
        await slack_bot.deliver(event_body(event))
        await fake.wait_for(
            "chat.postMessage",
            where=lambda c: c.result.get("ok") is True and c.args.get("thread_ts") == thread,
        )
        # The next request in the thread runs once the first one's job has ended.
        llm.gate.set()
        later = mention_event("translate hi again", thread_ts=thread)
        await slack_bot.deliver(event_body(later))
        await fake.wait_for(
            "chat.update", where=lambda c: str(c.args.get("text", "")).startswith("✅")
        )

    first, second = slack_bot.agent.requests
    failed, sorry, *after = in_thread(fake, thread)
    assert failed.method == "chat.postMessage" and failed.result.get("ok") is False
    # the sorry, in place of the status message, and nothing else of the first request
    assert sorry.method == "chat.postMessage"
    assert f"request `{first.request_id}`" in str(sorry.args["text"])
    assert all(c.args.get("ts") != sorry.result["ts"] for c in after)
    # the second request's status and answer (the first answer written: the
    # first request's turn stopped before it asked for one)
    assert [str(c.args["text"]) for c in after if c.method == "chat.postMessage"][1:] == ["first"]
    assert len(llm.calls("answer")) == 1
    [logged] = [r for r in caplog.records if "could not be posted" in r.getMessage()]
    assert first.request_id in logged.getMessage() and second.request_id not in logged.getMessage()
