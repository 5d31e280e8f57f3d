"""A message refused for its size is stored bounded (SQLite and PostgreSQL):
its head and a note of its length, not the 100,000 characters that were
refused; the refusal is stored with it, so the chat log still shows what
happened.  A message within the limit is stored as it was sent."""

from __future__ import annotations

from pathlib import Path

import sqlalchemy as sa

from adapters.chat.messages import reply_text
from core.store.models import Message
from core.types import ConversationKey, ReplyStatus, Request
from tests.fakes.agent_fixture import AgentEnv, open_agent_env
from tests.fakes.hf_fake import FakeHF
from tests.fakes.job_fixtures import KIND, RecordingRunner, submit
from tests.fakes.openai_fake import FakeLLM

KEY = ConversationKey("cli", "local", "big", None)
KEPT = 1_000  # characters of a refused message kept (core.turn_save.REFUSED_KEPT_CHARS)
BIG = "".join(f"log line {i:06d} ok.\n" for i in range(5_000))  # 100,000 characters


async def stored(env: AgentEnv) -> list[tuple[str, str]]:
    async with env.agent.repo.db.sessions() as s:
        rows = await s.execute(sa.select(Message.role, Message.text).order_by(Message.id))
        return [(r.role, r.text) for r in rows]


def bounded(text: str) -> None:
    assert len(text) < KEPT + 200, len(text)
    assert text.startswith(BIG[:KEPT])
    assert "100,000 characters" in text


async def test_a_message_refused_for_its_size_is_stored_bounded(
    tmp_path: Path, llm_fake: FakeLLM, hf_fake: FakeHF, shared_db_url: str
) -> None:
    assert len(BIG) == 100_000
    async with open_agent_env(tmp_path, llm_fake, hf_fake, database_url=shared_db_url) as env:
        reply = await env.agent.handle(Request(KEY, "u1", BIG))
        assert reply.status == ReplyStatus.REFUSED and "100,000" in reply_text(reply)
        ((user_role, user_text), (bot_role, bot_text)) = await stored(env)
        history = await env.agent.repo.load_history(KEY)
    assert (user_role, bot_role) == ("user", "assistant")
    bounded(user_text)
    assert bot_text == reply.text  # the refusal, as the person saw it
    assert [t.text for t in history.turns] == [user_text, reply.text]
    assert llm_fake.calls() == []


async def test_a_job_refused_for_its_size_is_stored_bounded_and_its_payload_dropped(
    tmp_path: Path, llm_fake: FakeLLM, hf_fake: FakeHF, shared_db_url: str
) -> None:
    async with open_agent_env(tmp_path, llm_fake, hf_fake, database_url=shared_db_url) as env:
        runner = RecordingRunner(env.agent)
        env.agent.register_runner(KIND, runner)  # type: ignore[arg-type]  # runs a LeasedJob
        job = await submit(env.agent, KEY, BIG)
        assert await env.agent.process(job) == "done"
        ((_, user_text), _) = await stored(env)
        row = (await env.agent.jobs.store.get([job]))[job]
    bounded(user_text)
    assert row.payload == {}  # the request's own copy goes when it is answered


async def test_a_message_within_the_limit_is_stored_whole(
    tmp_path: Path, llm_fake: FakeLLM, hf_fake: FakeHF, shared_db_url: str
) -> None:
    text = BIG[:20_000]  # MAX_REQUEST_CHARS
    llm_fake.reply("plan", "[]")
    llm_fake.reply("answer", "Noted.")
    async with open_agent_env(tmp_path, llm_fake, hf_fake, database_url=shared_db_url) as env:
        reply = await env.agent.handle(Request(KEY, "u1", text))
        assert reply.status != ReplyStatus.REFUSED, reply_text(reply)
        assert await stored(env) == [("user", text), ("assistant", reply.text)]
