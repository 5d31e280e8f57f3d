"""Durable turns end to end: real agents (bot.app) on one store, the LLM and
HF fakes, a recording runner.  A killed agent's request is resumed by the
next one (finished tasks not run again, the turn stored once); a stop past
the grace period tells the person and hands the request on; one
conversation's turns run in acceptance order across agents, with the handles
their answers named; at most ``max_inflight`` run at once, the rest are told
their place in the queue.  Leases expire on a fake clock, never by waiting."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import sqlalchemy as sa

from adapters.chat.messages import error_text
from core.jobs import LeasedJob
from core.store.jobs import DONE, QUEUED
from core.store.models import Message, ResourceRow
from core.types import ConversationKey, QueuePosition, Restarting
from tests.fakes.agent_fixture import AgentEnv, model_a, open_agent_env
from tests.fakes.hf_fake import FakeHF, HFCall
from tests.fakes.job_fixtures import KIND, FakeClock, RecordingRunner, submit
from tests.fakes.openai_fake import FakeLLM
from tests.fakes.samples import sample_png

KEY = ConversationKey("cli", "local", "jobs", None)
LEASE = 60.0  # AgentConfig.job_lease_seconds


def plan(*tasks: dict[str, Any]) -> str:
    return json.dumps(list(tasks))


def step(id: int, task: str, dep: list[int] | None = None, **args: str) -> dict[str, Any]:
    return {"task": task, "id": id, "dep": dep or [-1], "args": args}


async def hang(call: HFCall) -> Any:
    """A model that never answers (until the fake stops)."""
    await asyncio.Event().wait()


class Gate:
    """A model that answers once the test opens the gate."""

    def __init__(self, answer: Any) -> None:
        self.opened = asyncio.Event()
        self.answer = answer

    async def __call__(self, call: HFCall) -> Any:
        await self.opened.wait()
        return self.answer


@asynccontextmanager
async def agent_on(
    tmp_path: Path,
    llm: FakeLLM,
    hf: FakeHF,
    url: str,
    *,
    clock: FakeClock | None = None,
    cap: int | None = None,
) -> AsyncIterator[tuple[AgentEnv, RecordingRunner]]:
    """An agent on the shared store and media dir, with a recording runner."""
    async with open_agent_env(tmp_path, llm, hf, database_url=url) as env:
        queue = env.agent.jobs
        queue.poll = 0.05  # other agents' progress is seen within a blink
        if clock is not None:
            queue.clock = clock
        if cap is not None:
            queue.max_inflight = cap
        runner = RecordingRunner(env.agent)
        env.agent.register_runner(KIND, runner)
        yield env, runner


async def until(predicate: Callable[[], Any], within: float = 20.0) -> None:
    async with asyncio.timeout(within):
        while True:
            if predicate():
                return
            await asyncio.sleep(0.02)


async def job_row(env: AgentEnv, job_id: int) -> Any:
    return (await env.agent.jobs.store.get([job_id]))[job_id]


async def finished(env: AgentEnv, *job_ids: int) -> None:
    async with asyncio.timeout(20):
        while True:
            rows = await env.agent.jobs.store.get(job_ids)
            if all(rows[j].state == DONE for j in job_ids):
                return
            await asyncio.sleep(0.02)


async def checkpointed(env: AgentEnv, job_id: int, what: Callable[[dict[str, Any]], bool]) -> None:
    async with asyncio.timeout(20):
        while True:
            if what((await job_row(env, job_id)).checkpoint or {}):
                return
            await asyncio.sleep(0.02)


async def turns(env: AgentEnv) -> list[tuple[str, str]]:
    async with env.agent.repo.db.sessions() as s:
        rows = await s.execute(sa.select(Message.role, Message.text).order_by(Message.id))
        return [(r.role, r.text) for r in rows]


async def handles(env: AgentEnv) -> list[str]:
    async with env.agent.repo.db.sessions() as s:
        return list((await s.scalars(sa.select(ResourceRow.handle).order_by(ResourceRow.id))).all())


FOX = plan(
    step(0, "text-to-image", text="a fox"),
    step(1, "image-classification", [0], image="<resource>-0"),
)


async def test_a_killed_agents_request_is_resumed_by_the_next_one(
    tmp_path: Path, llm_fake: FakeLLM, hf_fake: FakeHF, shared_db_url: str
) -> None:
    llm_fake.reply("plan", FOX)
    llm_fake.reply("answer", "A fox: image.png")
    async with agent_on(tmp_path, llm_fake, hf_fake, shared_db_url) as (a, runner_a):
        hf_fake.serve(model_a("image-classification"), "image-classification", hang)
        job = await submit(a.agent, KEY, "draw a fox and say what it is")
        waiting = asyncio.create_task(a.agent.process(job))
        await until(lambda: hf_fake.calls_for(model_a("image-classification")))
        await checkpointed(a, job, lambda cp: "0" in cp.get("outcomes", {}))  # task 0 is done
        await a.agent.jobs.abandon()  # killed mid-request: nothing released, nothing posted
        assert await waiting == "deferred"
    assert runner_a.replies == []

    clock = FakeClock()
    clock.advance(LEASE + 1)  # the dead process's lease has run out
    async with agent_on(tmp_path, llm_fake, hf_fake, shared_db_url, clock=clock) as (b, runner_b):
        await runner_b.wait(lambda: bool(runner_b.replies))
        ((done_id, reply),) = runner_b.replies
        await finished(b, job)
        assert await turns(b) == [
            ("user", "draw a fox and say what it is"),
            ("assistant", "A fox: image.png"),
        ]
        assert await handles(b) == ["image.png"]
    assert done_id == job and not reply.error
    assert [f.handle for f in reply.files] == ["image.png"]
    assert [t.status for t in reply.tasks] == ["done", "done"]
    assert len(hf_fake.calls_for(model_a("text-to-image"))) == 1  # not run again
    assert len(hf_fake.calls_for(model_a("image-classification"))) == 2  # killed, then resumed
    assert len(llm_fake.calls("plan")) == 1  # the plan came from the checkpoint
    # the resumed classification got the image task 0 made before the kill
    assert hf_fake.calls_for(model_a("image-classification"))[1].body


async def test_an_answer_saved_before_the_kill_is_posted_not_made_again(
    tmp_path: Path, llm_fake: FakeLLM, hf_fake: FakeHF, shared_db_url: str
) -> None:
    llm_fake.reply("plan", plan(step(0, "text-to-image", text="a fox")))
    llm_fake.reply("answer", "Your fox: image.png")

    async def stuck(job: LeasedJob) -> None:
        await asyncio.Event().wait()  # dies while posting

    async with agent_on(tmp_path, llm_fake, hf_fake, shared_db_url) as (a, runner_a):
        runner_a.before_post = stuck
        job = await submit(a.agent, KEY, "draw a fox")
        waiting = asyncio.create_task(a.agent.process(job))
        await checkpointed(a, job, lambda cp: cp.get("reply") is not None)
        await a.agent.jobs.abandon()
        assert await waiting == "deferred"
    calls = len(llm_fake.calls())

    clock = FakeClock()
    clock.advance(LEASE + 1)
    async with agent_on(tmp_path, llm_fake, hf_fake, shared_db_url, clock=clock) as (b, runner_b):
        await runner_b.wait(lambda: bool(runner_b.replies))
        assert await turns(b) == [("user", "draw a fox"), ("assistant", "Your fox: image.png")]
        assert await handles(b) == ["image.png"]
    ((_, reply),) = runner_b.replies
    assert reply.text == "Your fox: image.png" and [f.handle for f in reply.files] == ["image.png"]
    assert reply.files[0].path.read_bytes()  # the stored file, readable
    assert len(llm_fake.calls()) == calls  # nothing asked again
    assert len(hf_fake.calls_for(model_a("text-to-image"))) == 1


async def test_a_stop_past_the_grace_tells_the_person_and_the_next_process_finishes(
    tmp_path: Path, llm_fake: FakeLLM, hf_fake: FakeHF, shared_db_url: str
) -> None:
    llm_fake.reply("plan", FOX)
    llm_fake.reply(
        "answer", *[lambda body: "A fox: image.png" if "say what it is" in str(body) else "Hi."] * 2
    )
    async with agent_on(tmp_path, llm_fake, hf_fake, shared_db_url) as (a, runner_a):
        hf_fake.serve(model_a("image-classification"), "image-classification", hang)
        job = await submit(a.agent, KEY, "draw a fox and say what it is")
        waiting = asyncio.create_task(a.agent.process(job))
        await until(lambda: hf_fake.calls_for(model_a("image-classification")))
        await checkpointed(a, job, lambda cp: "0" in cp.get("outcomes", {}))

        assert a.agent.begin_shutdown() == 1
        assert not await a.agent.drain(0.05)  # still running after the grace
        assert await a.agent.interrupt() == 1
        assert await waiting == "deferred"
        assert len(runner_a.notices) == 1, runner_a.notices
        ((told, notice),) = runner_a.notices
        assert told == job and notice == Restarting()
        row = await job_row(a, job)
        assert (row.state, row.lease_owner) == (QUEUED, None)  # released: no lease to wait for
        assert "0" in row.checkpoint["outcomes"]
        # a request accepted while stopping is handed on the same way, not run
        late = await submit(a.agent, ConversationKey("cli", "local", "other"), "hello")
        assert await a.agent.process(late) == "deferred"
        assert (await job_row(a, late)).lease_owner is None
    assert runner_a.replies == []

    async with agent_on(tmp_path, llm_fake, hf_fake, shared_db_url) as (b, runner_b):
        await runner_b.wait(lambda: len(runner_b.replies) == 2)
        await finished(b, job, late)
    replies = dict(runner_b.replies)
    assert replies[job].text == "A fox: image.png"
    assert len(hf_fake.calls_for(model_a("text-to-image"))) == 1  # task 0 not run again


async def test_one_conversation_runs_in_order_across_two_agents_with_the_handles_named(
    tmp_path: Path, llm_fake: FakeLLM, hf_fake: FakeHF, shared_db_url: str
) -> None:
    first_image = Gate(sample_png())
    calls = 0

    async def image(call: HFCall) -> Any:
        nonlocal calls
        calls += 1
        if calls == 1:
            return await first_image(call)
        return sample_png()

    llm_fake.reply("plan", plan(step(0, "text-to-image", text="one")))
    llm_fake.reply("plan", plan(step(0, "text-to-image", text="two")))

    def answer(body: dict[str, Any]) -> str:  # the answer names the file it was given
        prompt = json.dumps(body["messages"])
        return "see image-2.png" if "image-2.png" in prompt else "see image.png"

    llm_fake.reply("answer", answer, answer)
    async with (
        agent_on(tmp_path, llm_fake, hf_fake, shared_db_url) as (a, runner_a),
        agent_on(tmp_path, llm_fake, hf_fake, shared_db_url) as (b, runner_b),
    ):
        hf_fake.serve(model_a("text-to-image"), "text-to-image", image)
        first = await submit(a.agent, KEY, "draw one")
        one = asyncio.create_task(a.agent.process(first))
        await until(lambda: calls == 1)  # the first turn is running in agent a
        second = await submit(b.agent, KEY, "draw two")
        two = asyncio.create_task(b.agent.process(second))
        await runner_b.wait(lambda: bool(runner_b.notices))
        ((_, notice),) = runner_b.notices
        assert notice == QueuePosition(0, conversation_busy=True)
        assert runner_b.started == []  # b waits for a's turn of the same conversation
        first_image.opened.set()
        assert await one == "done" and await two == "done"
        assert await turns(a) == [
            ("user", "draw one"),
            ("assistant", "see image.png"),
            ("user", "draw two"),
            ("assistant", "see image-2.png"),
        ]
        assert await handles(a) == ["image.png", "image-2.png"]
    ((_, r1),) = runner_a.replies
    ((_, r2),) = runner_b.replies
    assert [f.handle for f in r1.files] == ["image.png"]
    assert [f.handle for f in r2.files] == ["image-2.png"]  # exactly the handle it named


async def test_admission_runs_the_cap_and_tells_the_rest_their_place(
    tmp_path: Path, llm_fake: FakeLLM, hf_fake: FakeHF, shared_db_url: str
) -> None:
    gate = Gate([{"translation_text": "bonjour"}])
    for i in range(5):
        llm_fake.reply("plan", plan(step(0, "translation", text=f"hello {i}")))
    async with agent_on(tmp_path, llm_fake, hf_fake, shared_db_url, cap=2) as (env, runner):
        hf_fake.serve(model_a("translation"), "translation", gate)
        keys = [ConversationKey("cli", "local", f"c{i}", None) for i in range(5)]
        ids = [await submit(env.agent, k, f"translate hello {i}") for i, k in enumerate(keys)]
        tasks = [asyncio.create_task(env.agent.process(i)) for i in ids]
        await runner.wait(lambda: len(runner.started) == 2 and len(runner.notices) == 3)
        assert runner.started == ids[:2]
        shown = dict(runner.notices)
        assert shown == {
            ids[2]: QueuePosition(0),  # next, behind other conversations
            ids[3]: QueuePosition(1),
            ids[4]: QueuePosition(2),
        }
        gate.opened.set()
        assert await asyncio.gather(*tasks) == ["done"] * 5
    assert runner.max_running == 2
    assert runner.started == ids  # in acceptance order
    assert all(not r.error for _, r in runner.replies)


async def test_a_process_that_lost_its_lease_posts_nothing(
    tmp_path: Path, llm_fake: FakeLLM, hf_fake: FakeHF, shared_db_url: str
) -> None:
    """A stalled process whose lease ran out: another takes the job over, and
    the first one stops at its next heartbeat instead of answering twice."""
    llm_fake.reply("plan", FOX)
    llm_fake.reply("answer", "A fox: image.png")
    clock = FakeClock()
    clock.advance(LEASE + 1)
    async with agent_on(tmp_path, llm_fake, hf_fake, shared_db_url) as (a, runner_a):
        hf_fake.serve(model_a("image-classification"), "image-classification", hang)
        job = await submit(a.agent, KEY, "draw a fox and say what it is")
        waiting = asyncio.create_task(a.agent.process(job))
        await until(lambda: hf_fake.calls_for(model_a("image-classification")))
        await checkpointed(a, job, lambda cp: "0" in cp.get("outcomes", {}))
        async with agent_on(tmp_path, llm_fake, hf_fake, shared_db_url, clock=clock) as (
            _b,
            runner_b,
        ):
            await runner_b.wait(lambda: bool(runner_b.replies))
            a.agent.jobs.heartbeat = 0  # a's next round renews its leases: it has none
            a.agent.jobs.wake()
            assert await waiting == "elsewhere"
    assert runner_a.replies == []
    assert [r.text for _, r in runner_b.replies] == ["A fox: image.png"]
    assert len(hf_fake.calls_for(model_a("text-to-image"))) == 1


async def test_a_job_that_keeps_killing_its_process_is_given_up_with_a_word(
    tmp_path: Path, llm_fake: FakeLLM, hf_fake: FakeHF, shared_db_url: str
) -> None:
    """A request whose every attempt died (say, it crashes the process) is not
    claimed forever: past ``max_attempts`` the person is told and it is closed."""
    clock = FakeClock()
    async with agent_on(tmp_path, llm_fake, hf_fake, shared_db_url, clock=clock) as (env, runner):
        # No room here while the dead processes take their turns: each jump of
        # the clock lets this queue's next round (real time) take the expired
        # job itself, before the next dead process's claim.
        env.agent.jobs.max_inflight = 0
        store = env.agent.jobs.store
        job = await submit(env.agent, KEY, "the poison")
        for n in range(env.agent.jobs.max_attempts):  # five processes died on it
            clock.advance(LEASE + 1)
            claimed = await store.claim(
                owner=f"dead-{n}", kinds=[KIND], now=clock.utc(), lease=LEASE, limit=1
            )
            assert [r.id for r in claimed] == [job]
        clock.advance(LEASE + 1)
        env.agent.jobs.max_inflight = 1
        assert await env.agent.process(job) == "done"
        await finished(env, job)
    assert [(j, error_text(failure)) for j, failure in runner.gave_up] == [
        (job, "I could not finish this after 5 attempts; please send it again.")
    ]
    assert runner.started == [] and llm_fake.calls() == []


async def test_an_accepted_request_starts_only_once_its_adapter_asks(
    tmp_path: Path, llm_fake: FakeLLM, hf_fake: FakeHF, shared_db_url: str
) -> None:
    """Accept, acknowledge, then process: the job must not run (and post)
    before the adapter has acknowledged it to the platform (a Discord reply
    may not beat its defer)."""
    async with agent_on(tmp_path, llm_fake, hf_fake, shared_db_url) as (env, runner):
        job = await submit(env.agent, KEY, "hello")
        await env.agent.jobs._tick()  # a scheduler round in between
        assert runner.started == []
        assert await env.agent.process(job) == "done"
        assert runner.started == [job]
