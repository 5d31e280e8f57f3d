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
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from slack_sdk.web.async_client import AsyncWebClient

from adapters.slack.config import SlackConfig
from adapters.slack.jobs import KIND, Incoming, SlackRunner, dedup_key, payload
from core.store.jobs import DONE
from tests.fakes.agent_fixture import AgentEnv, open_agent_env
from tests.fakes.hf_fake import FakeHF
from tests.fakes.job_fixtures import FakeClock
from tests.fakes.openai_fake import FakeLLM
from tests.fakes.samples import sample_png
from tests.fakes.slack_fake import BOT_TOKEN, TEAM_ID, Call, FakeSlack

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
