"""A request answered while the database is down is marked done once the
database is back, by the process that answered it; until then its lease is
kept, so no process answers it a second time.  (Before: "never marked done;
it may be answered again": the job stayed running, unclaimable by its own
process, and the next process to take it over answered it again.)

The outage is real: the agent's PostgreSQL connection goes through a TCP
proxy (``tests/fakes/db_outage.py``) that the test cuts and restores."""

from __future__ import annotations

import asyncio
from contextlib import aclosing
from pathlib import Path

import pytest
from sqlalchemy.engine import make_url

from core.jobs import LeasedJob
from core.store.jobs import DONE
from core.types import ConversationKey
from tests.core.test_jobs import agent_on, job_row
from tests.fakes.db_fixtures import PG_URL
from tests.fakes.db_outage import db_proxy
from tests.fakes.hf_fake import FakeHF
from tests.fakes.job_fixtures import fresh_pg_database, submit
from tests.fakes.openai_fake import FakeLLM

pytestmark = [
    pytest.mark.postgres,
    pytest.mark.skipif(not PG_URL, reason="TEST_DATABASE_URL is not set"),
]

KEY = ConversationKey("cli", "local", "outage", None)


async def test_an_answer_given_during_an_outage_is_marked_done_when_the_database_is_back(
    tmp_path: Path, llm_fake: FakeLLM, hf_fake: FakeHF
) -> None:
    llm_fake.reply("plan", "[]")
    llm_fake.reply("answer", "Hello there.")
    # aclosing: the database is dropped even when the test fails
    async with aclosing(fresh_pg_database(PG_URL)) as databases:
        async for url in databases:
            real = make_url(url)
            async with db_proxy(real.host or "127.0.0.1", real.port or 5432) as proxy:
                via = real.set(port=proxy.port).render_as_string(hide_password=False)
                async with agent_on(tmp_path, llm_fake, hf_fake, via) as (env, runner):

                    async def outage(job: LeasedJob) -> None:
                        await proxy.cut()  # the turn is saved; the database goes away

                    runner.before_post = outage
                    job = await submit(env.agent, KEY, "hi")
                    outcome = await env.agent.process(job)
                    assert outcome == "done"
                    assert len(runner.replies) == 1  # answered, database down
                    async with asyncio.timeout(30):  # its three tries to mark it failed
                        while True:
                            if job in env.agent.jobs._unmarked:
                                break
                            await asyncio.sleep(0.05)
                    await proxy.restore()
                    async with asyncio.timeout(30):
                        while True:
                            row = await job_row(env, job)
                            if row.state == DONE:
                                break
                            await asyncio.sleep(0.05)
                    assert not env.agent.jobs._unmarked
                assert len(runner.replies) == 1  # answered once
