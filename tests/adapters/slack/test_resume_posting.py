"""A Slack job whose process died while it was posting the answer is resumed
by the next process, which posts only what had not reached Slack yet: the
answer is never posted twice (found by ``benchmarks/chaos.py``: a process
SIGKILLed between posting the answer and marking its job done left a saved
reply that the next process posted again).

Two real agents on one SQLite store, each with the Slack job runner and a
Web API client on the Slack fake; the first one "dies" (its queue is
abandoned, as a killed process's would be) while the fake holds one of its
calls; the second one's clock is past the lease."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from slack_sdk.web.async_client import AsyncWebClient

from adapters.slack.config import SlackConfig
from adapters.slack.jobs import KIND, Incoming, SlackRunner, dedup_key, payload
from adapters.slack.posted import PAGE, PAGES, PostLookup
from core.store.jobs import DONE
from tests.fakes.agent_fixture import AgentEnv, open_agent_env
from tests.fakes.hf_fake import FakeHF
from tests.fakes.job_fixtures import FakeClock
from tests.fakes.openai_fake import FakeLLM
from tests.fakes.samples import sample_png
from tests.fakes.slack_fake import BOT_TOKEN, BOT_USER_ID, TEAM_ID, Call, FakeSlack

LEASE = 60.0
THREAD = "1700000000.000900"
INCOMING = Incoming(
    team=TEAM_ID,
    channel="C0CHAN",
    user="U0USER",
    text="draw a fox",
    ts=THREAD,
    thread_ts=THREAD,
    event_id="Ev0RESUME",
)


def is_answer(call: Call) -> bool:
    return call.method == "chat.postMessage" and "mrkdwn" in call.args


@asynccontextmanager
async def slack_agent(
    tmp_path: Path, llm: FakeLLM, hf: FakeHF, slack: FakeSlack, clock: FakeClock | None = None
) -> AsyncIterator[AgentEnv]:
    url = f"sqlite+aiosqlite:///{tmp_path / 'shared.db'}"
    async with open_agent_env(tmp_path, llm, hf, database_url=url) as env:
        env.agent.jobs.poll = 0.05
        if clock is not None:
            env.agent.jobs.clock = clock
        client = AsyncWebClient(token=BOT_TOKEN, base_url=slack.base_url)
        config = SlackConfig(bot_token=BOT_TOKEN, api_url=slack.base_url, status_interval=0.0)
        env.agent.register_runner(KIND, SlackRunner(env.agent, client, config))
        yield env


async def finished(env: AgentEnv, job_id: int) -> None:
    async with asyncio.timeout(10):
        while True:
            if (await env.agent.jobs.store.get([job_id]))[job_id].state == DONE:
                return
            await asyncio.sleep(0.02)  # another task's store writes: poll


async def posted(env: AgentEnv, job_id: int, steps: int) -> None:
    """Until the job records ``steps`` answer posts as made."""
    async with asyncio.timeout(10):
        while True:
            ref = (await env.agent.jobs.store.get([job_id]))[job_id].status_ref or {}
            if ref.get("posted") == steps:
                return
            await asyncio.sleep(0.02)  # another task's store writes: poll


def final_status(args: dict[str, Any]) -> bool:
    return str(args.get("text", "")).startswith("✅")


@pytest.mark.parametrize(
    ("held", "where"),
    [
        # the answer and its file are in the thread; the status never got its ✅
        ("chat.update", final_status),
        # the text is in the thread, the file upload had not started
        ("files.getUploadURLExternal", None),
    ],
    ids=["after-the-answer", "between-text-and-file"],
)
async def test_a_job_killed_while_posting_is_not_answered_twice(
    tmp_path: Path,
    llm_fake: FakeLLM,
    hf_fake: FakeHF,
    slack_fake: FakeSlack,
    held: str,
    where: Any,
) -> None:
    llm_fake.reply(
        "plan",
        json.dumps([{"task": "text-to-image", "id": 0, "dep": [-1], "args": {"text": "a fox"}}]),
    )
    llm_fake.reply("answer", "Your fox: image.png")
    released = slack_fake.hold(held, where)
    async with slack_agent(tmp_path, llm_fake, hf_fake, slack_fake) as first:
        accepted = await first.agent.accept(
            KIND,
            INCOMING.key,
            payload(INCOMING),
            request_id="r-resume",
            dedup=dedup_key("Ev0RESUME"),
        )
        job = accepted.job.id
        waiting = asyncio.create_task(first.agent.process(job))
        await slack_fake.wait_for("chat.postMessage", where=is_answer)
        await posted(first, job, 2 if held == "chat.update" else 1)  # then it is stuck
        await first.agent.jobs.abandon()  # killed while a call is in the air
        assert await waiting == "deferred"
    released.set()

    clock = FakeClock()
    clock.advance(LEASE + 1)  # the dead process's lease has run out
    async with slack_agent(tmp_path, llm_fake, hf_fake, slack_fake, clock) as second:
        await slack_fake.wait_for("chat.update", where=lambda c: final_status(c.args))
        await finished(second, job)

    answers = [c for c in slack_fake.calls if is_answer(c)]
    assert [c.args["text"] for c in answers] == ["Your fox: image.png"]  # once
    assert answers[0].args["thread_ts"] == THREAD
    (upload,) = slack_fake.uploaded()  # the file once too
    assert (upload.filename, upload.thread_ts, upload.data) == ("image.png", THREAD, sample_png())
    status_posts = [
        c
        for c in slack_fake.calls_to("chat.postMessage")
        if c.args.get("thread_ts") and not is_answer(c)
    ]
    assert len(status_posts) == 1  # one status message, taken over by the second process


# -- Slack took the post, the process died before recording it --------------
#
# The fake does the call (the message is in the conversation) and only holds
# its answer: the first process is killed without learning the post was made.
# The second one finds it (the answer's message metadata, read back with
# include_all_metadata; an upload's file ids, recorded before it was
# completed, checked with files.info) and does not make it again.

MENTION = Incoming(  # a mention in a channel: the answer starts a thread under it
    team=TEAM_ID,
    channel="C0CHAN",
    user="U0USER",
    text="draw a fox",
    ts="1700000000.000700",
    thread_ts="1700000000.000700",
    event_id="Ev0MENTION",
)
IN_THREAD = Incoming(  # a mention in a thread people are already writing in
    team=TEAM_ID,
    channel="C0CHAN",
    user="U0USER",
    text="draw a fox",
    ts="1700000000.000960",
    thread_ts=THREAD,
    event_id="Ev0THREAD",
)
DIRECT = Incoming(  # a DM: the answer goes in the conversation itself
    team=TEAM_ID,
    channel="D0DM",
    user="U0USER",
    text="draw a fox",
    ts="1700000000.000980",
    thread_ts=None,
    event_id="Ev0DIRECT",
)


def answer_args(args: dict[str, Any]) -> bool:
    return "mrkdwn" in args


async def kill_after_slack_took(
    tmp_path: Path,
    llm: FakeLLM,
    hf: FakeHF,
    slack: FakeSlack,
    incoming: Incoming,
    method: str,
) -> int:
    """Run ``incoming`` in a first process until Slack has done its call to
    ``method`` (an answer post, or the completion of the upload), then kill
    the process before the answer to that call arrives; the job's id."""
    llm.reply(
        "plan",
        json.dumps([{"task": "text-to-image", "id": 0, "dep": [-1], "args": {"text": "a fox"}}]),
    )
    llm.reply("answer", "Your fox: image.png")
    where = answer_args if method == "chat.postMessage" else None
    released = slack.hold(method, where, after=True)
    async with slack_agent(tmp_path, llm, hf, slack) as first:
        accepted = await first.agent.accept(
            KIND,
            incoming.key,
            payload(incoming),
            request_id="r-took",
            dedup=dedup_key(incoming.event_id),
        )
        job = accepted.job.id
        waiting = asyncio.create_task(first.agent.process(job))
        await slack.wait_for(method, where=lambda c: where is None or where(c.args))
        await first.agent.jobs.abandon()  # killed with Slack's answer in the air
        assert await waiting == "deferred"
    released.set()
    return job


async def resume(
    tmp_path: Path, llm: FakeLLM, hf: FakeHF, slack: FakeSlack, job: int, channel: str
) -> None:
    """A second process, after the first one's lease ran out, finishes ``job``."""
    clock = FakeClock()
    clock.advance(LEASE + 1)
    async with slack_agent(tmp_path, llm, hf, slack, clock) as second:
        await slack.wait_for(
            "chat.update",
            where=lambda c: c.args.get("channel") == channel and final_status(c.args),
        )
        await finished(second, job)


def answered_once(slack: FakeSlack, incoming: Incoming) -> None:
    answers = [c for c in slack.calls if is_answer(c)]
    assert [c.args["text"] for c in answers] == ["Your fox: image.png"]
    assert answers[0].args.get("thread_ts") == incoming.thread_ts
    (upload,) = slack.uploaded()
    assert (upload.filename, upload.channel, upload.thread_ts) == (
        "image.png",
        incoming.channel,
        incoming.thread_ts,
    )
    # and the conversation has the answer once, with the picture once
    kept = slack.messages_in(incoming.channel, incoming.thread_ts)
    assert [m["text"] for m in kept if m.get("user") == BOT_USER_ID and "metadata" in m] == [
        "Your fox: image.png"
    ]
    assert len([m for m in kept if m.get("files")]) == 1


@pytest.mark.parametrize(
    "incoming",
    [MENTION, IN_THREAD, DIRECT],
    ids=["channel-mention", "thread", "direct-message"],
)
@pytest.mark.parametrize(
    "method", ["chat.postMessage", "files.completeUploadExternal"], ids=["text", "file"]
)
async def test_a_post_slack_took_before_the_kill_is_not_made_again(
    tmp_path: Path,
    llm_fake: FakeLLM,
    hf_fake: FakeHF,
    slack_fake: FakeSlack,
    incoming: Incoming,
    method: str,
) -> None:
    if incoming.thread_ts == THREAD:  # people talk in the thread, before and meanwhile
        slack_fake.add_message("C0CHAN", "a fox, anyone?", user="U0OTHER", ts=THREAD)
        slack_fake.add_message("C0CHAN", "sure", user="U0OTHER", thread_ts=THREAD)
    job = await kill_after_slack_took(tmp_path, llm_fake, hf_fake, slack_fake, incoming, method)
    if incoming.thread_ts == THREAD:
        slack_fake.add_message("C0CHAN", "nice", user="U0OTHER", thread_ts=THREAD)

    await resume(tmp_path, llm_fake, hf_fake, slack_fake, job, incoming.channel)

    answered_once(slack_fake, incoming)
    if method == "chat.postMessage":  # looked up once, with the metadata asked for
        reader = "conversations.replies" if incoming.thread_ts else "conversations.history"
        (lookup,) = slack_fake.calls_to(reader)
        assert lookup.args["include_all_metadata"] in ("1", "true")
        assert lookup.result["ok"]
    else:  # the upload's file, checked by its id
        (check,) = slack_fake.calls_to("files.info")
        assert check.args["file"] == slack_fake.uploaded()[0].file_id


async def test_without_the_history_scope_a_resumed_job_posts_as_before(
    tmp_path: Path,
    llm_fake: FakeLLM,
    hf_fake: FakeHF,
    slack_fake: FakeSlack,
    caplog: pytest.LogCaptureFixture,
) -> None:
    slack_fake.lack_feature(
        "conversations.replies", error="missing_scope", needed="channels:history"
    )
    job = await kill_after_slack_took(
        tmp_path, llm_fake, hf_fake, slack_fake, MENTION, "chat.postMessage"
    )
    with caplog.at_level(logging.WARNING, logger="adapters.slack.posted"):
        await resume(tmp_path, llm_fake, hf_fake, slack_fake, job, MENTION.channel)

    # the post could not be looked up: made again, as before; the rest once
    answers = [c for c in slack_fake.calls if is_answer(c)]
    assert [c.args["text"] for c in answers] == ["Your fox: image.png"] * 2
    assert len(slack_fake.uploaded()) == 1
    [warning] = [r for r in caplog.records if r.name == "adapters.slack.posted"]
    assert "channels:history" in warning.getMessage()


async def test_a_missing_scope_is_logged_once(
    slack_fake: FakeSlack, caplog: pytest.LogCaptureFixture
) -> None:
    slack_fake.lack_feature("conversations.history", error="missing_scope", needed="im:history")
    client = AsyncWebClient(token=BOT_TOKEN, base_url=slack_fake.base_url)
    lookup = PostLookup()
    with caplog.at_level(logging.WARNING, logger="adapters.slack.posted"):
        for job in (1, 2, 3):
            found = await lookup.find_part(
                client, channel="D0DM", thread_ts=None, oldest=None, job=job, part=1
            )
            assert found is None
    assert len(slack_fake.calls_to("conversations.history")) == 3  # asked each time
    assert len([r for r in caplog.records if r.name == "adapters.slack.posted"]) == 1


async def test_a_lookup_reads_at_most_two_pages(slack_fake: FakeSlack) -> None:
    """A busy thread: the look-up stops after two pages (the part is not found
    there, so it would be posted again) instead of reading the whole thread."""
    for i in range(PAGE * 3):
        slack_fake.add_message("C0CHAN", f"chatter {i}", ts=f"1700000001.{i:06d}", thread_ts=THREAD)
    client = AsyncWebClient(token=BOT_TOKEN, base_url=slack_fake.base_url)
    found = await PostLookup().find_part(
        client, channel="C0CHAN", thread_ts=THREAD, oldest=THREAD, job=1, part=1
    )
    assert found is None
    assert len(slack_fake.calls_to("conversations.replies")) == PAGES
