"""What a turn writes, counted on the real engine (SQLAlchemy's events):
its usage rows commit with the turn, so a single-task job costs the store
three checkpoints and one turn save; every turn — answered, refused,
failed, or not saved at all — is counted exactly once; and checkpoints
asked for while one is being written share the next write (group commit),
each caller returning only once a write holding its state is stored."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from adapters.chat.messages import reply_text
from core.checkpoint import CheckpointWriter
from core.errors import RunFailed, StoreUnavailable
from core.execution import TaskOutcome
from core.store.models import Message, UsageTurn
from core.turn_state import TurnState
from core.types import ConversationKey, Job, Notice, Request
from tests.core.store.test_refused import refuse
from tests.fakes.agent_fixture import AgentEnv, open_agent_env
from tests.fakes.db_transactions import transactions, writes
from tests.fakes.hf_fake import FakeHF
from tests.fakes.job_fixtures import KIND, RecordingRunner, submit
from tests.fakes.openai_fake import FakeLLM

KEY = ConversationKey("cli", "local", "writes", None)
ONE_TASK = json.dumps(
    [{"task": "text-classification", "id": 0, "dep": [-1], "args": {"text": "I love foxes"}}]
)


async def usage_rows(env: AgentEnv, request_id: str) -> int:
    async with env.agent.repo.db.sessions() as s:
        n = await s.scalar(
            sa.select(sa.func.count())
            .select_from(UsageTurn)
            .where(UsageTurn.request_id == request_id)
        )
    return int(n or 0)


async def messages(env: AgentEnv) -> list[str]:
    async with env.agent.repo.db.sessions() as s:
        return list((await s.scalars(sa.select(Message.role).order_by(Message.id))).all())


def recording(env: AgentEnv) -> RecordingRunner:
    runner = RecordingRunner(env.agent)
    env.agent.register_runner(KIND, runner)  # type: ignore[arg-type]  # runs a LeasedJob
    return runner


def checkpoint_only(t: list[str]) -> bool:
    return all(s.startswith("UPDATE turn_jobs SET checkpoint") for s in t)


def touches(t: list[str], table: str) -> bool:
    return any(s.startswith(f"INSERT INTO {table} ") for s in t)


# --- usage in the turn's transaction -------------------------------------------


async def test_a_single_task_job_writes_three_checkpoints_and_one_turn_save(
    tmp_path: Path, llm_fake: FakeLLM, hf_fake: FakeHF, shared_db_url: str
) -> None:
    llm_fake.reply("plan", ONE_TASK)
    async with open_agent_env(tmp_path, llm_fake, hf_fake, database_url=shared_db_url) as env:
        runner = recording(env)
        job = await submit(env.agent, KEY, "rate my sentence")
        with transactions(env.agent.repo.db) as done:
            assert await env.agent.process(job) == "done"
        ((_, reply),) = runner.replies
        assert not reply.error and reply.tasks[0].status == "done"
        assert await usage_rows(env, reply.request_id) == 1
    turn_writes = [
        t
        for t in writes(done)
        if checkpoint_only(t) or touches(t, "messages") or touches(t, "usage_turns")
    ]
    # uploads; plan and models; the task's result; then the turn with its
    # usage and final checkpoint, in one transaction (was: a fifth, the usage)
    assert len(turn_writes) == 4
    *checkpoints, saved = turn_writes
    assert all(checkpoint_only(t) for t in checkpoints)
    assert touches(saved, "messages") and touches(saved, "usage_turns")
    assert any(s.startswith("UPDATE turn_jobs SET checkpoint") for s in saved)


async def test_a_direct_turn_saves_its_usage_with_it(agent_env: AgentEnv) -> None:
    agent_env.llm.reply("plan", ONE_TASK)
    with transactions(agent_env.agent.repo.db) as done:
        reply = await agent_env.agent.handle(Request(KEY, "u1", "rate my sentence"))
    assert not reply.error
    (saved,) = [t for t in writes(done) if touches(t, "messages") or touches(t, "usage_turns")]
    assert touches(saved, "messages") and touches(saved, "usage_turns")
    assert touches(saved, "usage_model_calls")  # the task's model call, same transaction


# --- every turn counted once ---------------------------------------------------


def answered(env: AgentEnv) -> str:
    env.llm.reply("plan", ONE_TASK)
    return "rate my sentence"


def refused(env: AgentEnv) -> str:
    return "   "  # empty: refused before any LLM call


def failed(env: AgentEnv) -> str:
    env.llm.reply("plan", "nope", '[{"task": "brew-coffee", "id": 0, "dep": [-1], "args": {}}]')
    return "make coffee"  # the plan is invalid twice


@pytest.mark.parametrize("case", [answered, refused, failed], ids=lambda f: f.__name__)
async def test_every_kind_of_stored_turn_is_counted_once(
    agent_env: AgentEnv, case: Callable[[AgentEnv], str]
) -> None:
    reply = await agent_env.agent.handle(Request(KEY, "u1", case(agent_env)))
    assert (case is answered) != reply.error
    assert await messages(agent_env) == ["user", "assistant"]
    assert await usage_rows(agent_env, reply.request_id) == 1
    assert (await agent_env.agent.usage(KEY, "u1")).turns == 1


async def test_a_turn_the_store_refuses_is_still_counted_once(agent_env: AgentEnv) -> None:
    await refuse(agent_env.agent.repo.db, "no_messages", "messages", "1 = 1")
    agent_env.llm.reply("plan", ONE_TASK)
    reply = await agent_env.agent.handle(Request(KEY, "u1", "rate my sentence"))
    assert "could not be saved" in reply_text(reply)
    assert await messages(agent_env) == []
    assert await usage_rows(agent_env, reply.request_id) == 1  # recorded on its own


async def test_a_refused_job_turn_is_counted_once(
    tmp_path: Path, llm_fake: FakeLLM, hf_fake: FakeHF, shared_db_url: str
) -> None:
    async with open_agent_env(tmp_path, llm_fake, hf_fake, database_url=shared_db_url) as env:
        runner = recording(env)
        job = await submit(env.agent, KEY, "   ")
        with transactions(env.agent.repo.db) as done:
            assert await env.agent.process(job) == "done"
        ((_, reply),) = runner.replies
        assert reply.error
        assert await usage_rows(env, reply.request_id) == 1
    assert len([t for t in writes(done) if touches(t, "usage_turns")]) == 1


# --- group commit of checkpoints -------------------------------------------------


class Holding:
    """A runner that holds its claimed job until the test lets it go."""

    def __init__(self) -> None:
        self.job: Job | None = None
        self.claimed = asyncio.Event()
        self.release = asyncio.Event()

    async def run(self, job: Job) -> None:
        self.job = job
        self.claimed.set()
        await self.release.wait()

    async def notify(self, job: Job, notice: Notice) -> None:
        return None

    async def give_up(self, job: Job, failure: RunFailed) -> None:
        return None


class Gated:
    """A claimed job whose every checkpoint write waits for the test to open
    its gate, then goes to the real store (or fails, when told to)."""

    def __init__(self, job: Job) -> None:
        self.job = job
        self.written: list[dict[str, Any]] = []  # each write's data, as it began
        self.gates: list[asyncio.Event] = []
        self.fail: set[int] = set()  # writes (by index) that fail
        self.began = asyncio.Condition()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.job, name)

    async def save_checkpoint(self, data: dict[str, Any]) -> None:
        n = len(self.written)
        gate = asyncio.Event()
        async with self.began:
            self.written.append(json.loads(json.dumps(data)))
            self.gates.append(gate)
            self.began.notify_all()
        await gate.wait()
        if n in self.fail:
            raise StoreUnavailable("the test broke this write")
        await self.job.save_checkpoint(data)

    async def writes_begun(self, n: int) -> None:
        async with self.began:
            await asyncio.wait_for(self.began.wait_for(lambda: len(self.written) >= n), 10)


@asynccontextmanager
async def held_job(env: AgentEnv) -> AsyncIterator[Job]:
    holding = Holding()
    env.agent.register_runner(KIND, holding)
    job_id = await submit(env.agent, KEY, "hi")
    processing = asyncio.create_task(env.agent.process(job_id))
    await asyncio.wait_for(holding.claimed.wait(), 10)
    assert holding.job is not None
    try:
        async with asyncio.timeout(20):  # a broken group commit fails, never hangs
            yield holding.job
    finally:
        holding.release.set()
        await processing


async def stored_outcomes(env: AgentEnv, job: Job) -> set[str]:
    row = (await env.agent.jobs.store.get([job.id]))[job.id]
    return set(((row.checkpoint or {}).get("outcomes") or {}).keys())


async def settle() -> None:
    """Let every task that can run reach its next wait."""
    for _ in range(5):
        await asyncio.sleep(0)


async def test_saves_asked_during_a_write_share_the_next_write(agent_env: AgentEnv) -> None:
    env = agent_env
    async with held_job(env) as job:
        gated = Gated(job)
        progress = CheckpointWriter(gated, TurnState(), env.agent.media)  # type: ignore[arg-type]
        durable: dict[int, set[str]] = {}

        async def finished(i: int) -> None:
            progress.state.finished(TaskOutcome(i, "t"))
            await progress.save()
            durable[i] = await stored_outcomes(env, job)  # what the store has on return

        first = asyncio.create_task(finished(0))
        await gated.writes_begun(1)
        others = [asyncio.create_task(finished(i)) for i in (1, 2, 3)]
        await settle()
        assert len(gated.written) == 1  # they wait for the write under way
        gated.gates[0].set()
        await first
        await gated.writes_begun(2)
        assert set(gated.written[0]["outcomes"]) == {"0"}
        assert set(gated.written[1]["outcomes"]) == {"0", "1", "2", "3"}  # all who asked
        await settle()
        assert not any(t.done() for t in others)  # not before their state is stored
        gated.gates[1].set()
        await others[0]
        await settle()
        assert len(gated.written) == 2  # one write for the three of them
        await asyncio.gather(*others)
        assert durable[0] >= {"0"}
        assert all(durable[i] >= {str(i)} for i in (1, 2, 3))


async def test_a_failed_write_leaves_the_waiting_callers_to_write(agent_env: AgentEnv) -> None:
    env = agent_env
    async with held_job(env) as job:
        gated = Gated(job)
        gated.fail = {0}
        progress = CheckpointWriter(gated, TurnState(), env.agent.media)  # type: ignore[arg-type]

        async def finished(i: int) -> None:
            progress.state.finished(TaskOutcome(i, "t"))
            await progress.save()

        first = asyncio.create_task(finished(0))
        await gated.writes_begun(1)
        others = [asyncio.create_task(finished(i)) for i in (1, 2)]
        await settle()
        gated.gates[0].set()
        with pytest.raises(StoreUnavailable):
            await first  # this test's fake fails where LeasedJob would log and go on
        await gated.writes_begun(2)
        gated.gates[1].set()
        await others[0]
        await settle()
        assert len(gated.written) == 2  # the next write carried both
        await asyncio.gather(*others)
        assert await stored_outcomes(env, job) == {"0", "1", "2"}


async def test_saves_one_after_another_each_write(agent_env: AgentEnv) -> None:
    env = agent_env
    async with held_job(env) as job:
        gated = Gated(job)
        progress = CheckpointWriter(gated, TurnState(), env.agent.media)  # type: ignore[arg-type]
        for i in range(3):
            progress.state.finished(TaskOutcome(i, "t"))
            saving = asyncio.create_task(progress.save())
            await gated.writes_begun(i + 1)
            gated.gates[i].set()
            await saving
            assert await stored_outcomes(env, job) == {str(k) for k in range(i + 1)}
        assert len(gated.written) == 3
