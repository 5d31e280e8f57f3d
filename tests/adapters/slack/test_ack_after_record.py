"""Slack hears "got it" only once the event is recorded as a job.

Found by ``benchmarks/chaos.py``: Bolt acknowledges an event listener as
soon as it matches, before its ack function runs, unless the app processes
before responding.  A process killed between that early 200 and the job's
insert lost the event: Slack had its ack, so it never redelivered, and no
job existed to resume (7 of 1,000 accepted requests in a full chaos run).

Here the record is held back (as if the process were still inserting it, or
had died doing so): the HTTP request must not be answered meanwhile.  The
test gives up waiting after 0.5 s, standing in for Slack, which redelivers an
event not acknowledged within 3 s.  Once the record goes through, the
redelivery is acknowledged and the request answered once."""

from __future__ import annotations

import asyncio
from typing import Any

import aiohttp

from core.types import Accepted, ConversationKey
from tests.adapters.slack.conftest import BotFactory, SpyAgent
from tests.fakes.agent_fixture import AgentEnv
from tests.fakes.slack_fake import event_body, mention_event, signed_request

SLACK_PATIENCE = 0.5  # stands in for Slack's 3 s


class SlowRecord(SpyAgent):
    """Records events only once the test opens :attr:`gate`."""

    def __init__(self, inner: Any) -> None:
        super().__init__(inner)
        self.gate = asyncio.Event()
        self.entered = asyncio.Event()

    async def accept(
        self,
        kind: str,
        conversation: ConversationKey,
        payload: dict[str, Any],
        *,
        request_id: str,
        dedup: str | None = None,
        upload_bytes: int = 0,
    ) -> Accepted:
        self.entered.set()
        await self.gate.wait()
        return await super().accept(
            kind,
            conversation,
            payload,
            request_id=request_id,
            dedup=dedup,
            upload_bytes=upload_bytes,
        )


async def test_the_ack_waits_for_the_record(
    make_slack_bot: BotFactory, agent_env: AgentEnv
) -> None:
    agent = SlowRecord(agent_env.agent)
    bot = await make_slack_bot(agent)
    agent_env.llm.reply("answer", "Hello from the bot.")
    body = event_body(mention_event("hello", ts="1700000000.000500"))
    raw, headers = signed_request(body)
    timeout = aiohttp.ClientTimeout(total=SLACK_PATIENCE)
    statuses: list[int | str] = []
    try:
        async with bot.session.post(bot.url, data=raw, headers=headers, timeout=timeout) as resp:
            statuses.append(resp.status)
    except TimeoutError:
        statuses.append("no answer")
    assert agent.entered.is_set()  # the record was under way…
    assert statuses == ["no answer"]  # …so Slack had no ack and will redeliver

    agent.gate.set()
    redelivery = await bot.deliver(body, retry_num=1)
    assert redelivery.status == 200
    answers = await bot.fake.wait_for(
        "chat.postMessage", where=lambda c: "Hello from the bot" in str(c.args.get("text"))
    )
    assert len(answers) == 1
    assert answers[0].args["thread_ts"] == "1700000000.000500"
