"""Model selection off the critical path, end to end (the real Agent on the
OpenAI and HF fakes): tasks start on their most downloaded candidate while
the LLM chooses.  A guess that finished before the choice is kept, whatever
the choice; a guess still running on another model than the chosen one is
stopped and run again on it, and leaves no file and no record; when every
task finished first the selection call is cancelled and the answer goes on;
a failed selection call keeps the guesses.

Order is forced with events, never timed: the fake LLM holds its selection
answer until the fake model server has seen a call, and a model holds its
answer until the agent has the models in force (a spy on the executor's
``on_chosen``)."""

from __future__ import annotations

import asyncio
import hashlib
import json
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from core.jobs import LeasedJob
from core.selection import FINISHED_FIRST, MOST_DOWNLOADED
from core.store.models import ResourceRow
from core.types import ConversationKey, Request, TaskStatus
from tests.fakes.agent_fixture import AgentEnv, model_a, model_b, open_agent_env
from tests.fakes.clock import FakeClock
from tests.fakes.hf_fake import FakeHF
from tests.fakes.job_fixtures import KIND, RecordingRunner, submit
from tests.fakes.openai_fake import FakeLLM
from tests.fakes.samples import sample_png
from tests.fakes.speculation import Seen, choice_after, choice_known

KEY = ConversationKey("cli", "local", "speculation", None)
GUESSED = sample_png(48, 48)  # what model a draws
CHOSEN = sample_png(40, 40)  # what model b draws
DRAW, LABEL = "text-to-image", "image-classification"
FOX = json.dumps(
    [
        {"task": DRAW, "id": 0, "dep": [-1], "args": {"text": "a fox"}},
        {"task": LABEL, "id": 1, "dep": [0], "args": {"image": "<resource>-0"}},
    ]
)
ASK = "draw a fox and say what it is"


@pytest.fixture
def release() -> Iterator[list[asyncio.Event]]:
    """Events a test holds fake answers on; all set at the end, so a handler
    the bot walked away from ends and the fakes stop at once."""
    held: list[asyncio.Event] = []
    yield held
    for e in held:
        e.set()


def media_hashes(root: Path) -> set[str]:
    return {hashlib.sha256(p.read_bytes()).hexdigest() for p in root.rglob("*") if p.is_file()}


async def stored_handles(env: AgentEnv) -> list[str]:
    async with env.agent.repo.db.sessions() as s:
        return list((await s.scalars(sa.select(ResourceRow.handle).order_by(ResourceRow.id))).all())


async def test_the_guess_is_kept_when_the_choice_agrees(
    agent_env: AgentEnv, monkeypatch: pytest.MonkeyPatch
) -> None:
    env = agent_env
    draw = Seen(DRAW, hold=choice_known(env, monkeypatch))  # still running when the choice comes
    env.hf.serve(model_a(DRAW), DRAW, draw)
    env.llm.reply("plan", FOX)
    before: list[bool] = []
    picks = {"0": model_a(DRAW), "1": model_a(LABEL)}
    env.llm.reply("select", choice_after(draw.arrived, picks, before))
    reply = await env.agent.handle(Request(KEY, "u1", ASK))
    assert not reply.error, reply.text
    assert before == [True]  # the model was already running while the LLM chose
    assert [t.model for t in reply.tasks] == [model_a(DRAW), model_a(LABEL)]
    assert [t.reason for t in reply.tasks] == [f"{m} fits best" for m in picks.values()]
    assert len(draw.calls) == 1 and env.hf.calls_for(model_b(DRAW)) == []
    assert len(env.hf.calls_for(model_a(LABEL))) == 1
    assert [f.handle for f in reply.files] == ["image.png"]


async def test_a_guess_that_finished_first_is_kept_when_the_choice_differs(
    agent_env: AgentEnv, monkeypatch: pytest.MonkeyPatch
) -> None:
    env = agent_env
    env.hf.serve(model_a(DRAW), DRAW, GUESSED, content_type="image/png")
    env.hf.serve(model_b(DRAW), DRAW, CHOSEN, content_type="image/png")
    label = Seen(LABEL, hold=choice_known(env, monkeypatch))
    env.hf.serve(model_a(LABEL), LABEL, label)
    env.llm.reply("plan", FOX)
    before: list[bool] = []
    # the LLM prefers model b for the picture once it is drawn (and being classified)
    picks = {"0": model_b(DRAW), "1": model_a(LABEL)}
    env.llm.reply("select", choice_after(label.arrived, picks, before))
    reply = await env.agent.handle(Request(KEY, "u1", ASK))
    assert not reply.error, reply.text
    assert before == [True]
    assert [t.status for t in reply.tasks] == [TaskStatus.DONE] * 2
    # the picture made first stands, named by the model that made it
    assert [t.model for t in reply.tasks] == [model_a(DRAW), model_a(LABEL)]
    assert [t.reason for t in reply.tasks] == [FINISHED_FIRST, f"{model_a(LABEL)} fits best"]
    assert env.hf.calls_for(model_b(DRAW)) == []
    assert [c.body for c in label.calls] == [GUESSED]  # classified once
    ((picture,),) = [[f for f in reply.files if f.kind == "image"]]
    assert picture.path.read_bytes() == GUESSED
    # the answer is told why that model was used
    (answer_call,) = env.llm.calls("answer")
    assert FINISHED_FIRST in json.dumps(answer_call["messages"])


async def test_a_running_guess_is_stopped_and_leaves_no_file_or_record(
    agent_env: AgentEnv, release: list[asyncio.Event]
) -> None:
    env = agent_env
    never = asyncio.Event()
    release.append(never)
    draw = Seen(DRAW, GUESSED, hold=never)  # the guess is still drawing when the choice comes
    env.hf.serve(model_a(DRAW), DRAW, draw)
    env.hf.serve(model_b(DRAW), DRAW, CHOSEN, content_type="image/png")
    label = Seen(LABEL)
    env.hf.serve(model_a(LABEL), LABEL, label)
    env.llm.reply("plan", FOX)
    before: list[bool] = []
    picks = {"0": model_b(DRAW), "1": model_a(LABEL)}
    env.llm.reply("select", choice_after(draw.arrived, picks, before))
    reply = await env.agent.handle(Request(KEY, "u1", ASK))
    assert not reply.error, reply.text
    assert before == [True]
    assert [t.status for t in reply.tasks] == [TaskStatus.DONE] * 2
    # the Reply names the model that made the picture it carries
    assert reply.tasks[0].model == model_b(DRAW)
    assert reply.tasks[0].reason == f"{model_b(DRAW)} fits best"
    ((picture,),) = [[f for f in reply.files if f.kind == "image"]]
    assert picture.path.read_bytes() == CHOSEN
    # the classification waited for the chosen model's picture and ran once
    assert [c.body for c in label.calls] == [CHOSEN]
    # the stopped guess left nothing behind: no stored file, one record per task
    assert hashlib.sha256(GUESSED).hexdigest() not in media_hashes(env.settings.store.media_dir)
    assert await stored_handles(env) == ["image.png"]
    assert len(reply.tasks) == 2


async def test_when_every_task_finishes_first_the_selection_call_is_cancelled(
    agent_env: AgentEnv, release: list[asyncio.Event]
) -> None:
    env = agent_env
    env.llm.reply("plan", FOX)
    never, answered = asyncio.Event(), []
    release.append(never)

    async def slow_choice(body: dict[str, Any]) -> str:
        await never.wait()  # an LLM still thinking
        answered.append(True)
        picks = {"0": model_b(DRAW), "1": model_b(LABEL)}
        return json.dumps({k: {"id": v, "reason": "better"} for k, v in picks.items()})

    env.llm.reply("select", slow_choice)
    reply = await env.agent.handle(Request(KEY, "u1", ASK))
    assert not reply.error, reply.text
    # answered without the choice: the selection request was sent, never answered
    assert len(env.llm.calls("select")) == 1 and answered == []
    assert len(env.llm.calls("answer")) == 1
    assert [t.model for t in reply.tasks] == [model_a(DRAW), model_a(LABEL)]
    assert [t.reason for t in reply.tasks] == [FINISHED_FIRST] * 2
    assert env.hf.calls_for(model_b(DRAW)) == [] and env.hf.calls_for(model_b(LABEL)) == []
    # the cancelled call counts as a call; nothing reported its tokens
    assert reply.usage.llm_calls == 3


async def test_a_failed_selection_call_keeps_the_guesses(
    agent_env: AgentEnv, monkeypatch: pytest.MonkeyPatch
) -> None:
    env = agent_env
    env.hf.serve(model_a(DRAW), DRAW, Seen(DRAW, hold=choice_known(env, monkeypatch)))
    env.llm.reply("plan", FOX)
    env.llm.fail(500, times=5, stage="select")
    reply = await env.agent.handle(Request(KEY, "u1", ASK))
    assert not reply.error, reply.text
    assert [t.model for t in reply.tasks] == [model_a(DRAW), model_a(LABEL)]
    assert all(t.reason == f"{MOST_DOWNLOADED} (model selection failed)" for t in reply.tasks)
    assert len(env.hf.calls_for(model_a(DRAW))) == 1  # not run a second time
    assert len(env.hf.calls_for(model_a(LABEL))) == 1
    assert env.hf.calls_for(model_b(DRAW)) == []


async def run_job(agent_env: AgentEnv, runner: RecordingRunner) -> list[dict[str, Any]]:
    """Process one job; the checkpoint as stored once answered, before it was marked done."""
    saved: list[dict[str, Any]] = []

    async def read_checkpoint(job: LeasedJob) -> None:
        saved.append((await agent_env.agent.jobs.store.get([job.id]))[job.id].checkpoint or {})

    runner.before_post = read_checkpoint
    job = await submit(agent_env.agent, KEY, ASK)
    assert await agent_env.agent.process(job) == "done"
    await runner.wait(lambda: bool(runner.replies))
    return saved


async def test_a_job_checkpoints_the_choice_and_only_the_kept_runs(
    tmp_path: Path,
    llm_fake: FakeLLM,
    hf_fake: FakeHF,
    shared_db_url: str,
    release: list[asyncio.Event],
) -> None:
    async with open_agent_env(tmp_path, llm_fake, hf_fake, database_url=shared_db_url) as env:
        runner = RecordingRunner(env.agent)
        env.agent.register_runner(KIND, runner)
        never = asyncio.Event()
        release.append(never)
        draw = Seen(DRAW, GUESSED, hold=never)
        hf_fake.serve(model_a(DRAW), DRAW, draw)
        hf_fake.serve(model_b(DRAW), DRAW, CHOSEN, content_type="image/png")
        llm_fake.reply("plan", FOX)
        before: list[bool] = []
        picks = {"0": model_b(DRAW), "1": model_a(LABEL)}
        llm_fake.reply("select", choice_after(draw.arrived, picks, before))
        (cp,) = await run_job(env, runner)
    assert before == [True]
    assert cp["selections"]["0"] == {
        "model": model_b(DRAW),
        "reason": f"{model_b(DRAW)} fits best",
        "by_llm": True,
    }
    assert {k: v["model"] for k, v in cp["outcomes"].items()} == picks
    assert [r["handle"] for r in cp["generated"]] == ["image.png"]
    ((_, reply),) = runner.replies
    assert reply.files[0].path.read_bytes() == CHOSEN


async def test_a_job_without_the_choice_checkpoints_the_guesses(
    tmp_path: Path,
    llm_fake: FakeLLM,
    hf_fake: FakeHF,
    shared_db_url: str,
    release: list[asyncio.Event],
) -> None:
    async with open_agent_env(tmp_path, llm_fake, hf_fake, database_url=shared_db_url) as env:
        runner = RecordingRunner(env.agent)
        env.agent.register_runner(KIND, runner)
        never = asyncio.Event()
        release.append(never)

        async def slow_choice(body: dict[str, Any]) -> str:
            await never.wait()
            return "{}"

        llm_fake.reply("plan", FOX)
        llm_fake.reply("select", slow_choice)
        (cp,) = await run_job(env, runner)
    guesses = {"0": model_a(DRAW), "1": model_a(LABEL)}
    assert cp["selections"] == {
        k: {"model": m, "reason": FINISHED_FIRST, "by_llm": False} for k, m in guesses.items()
    }
    assert {k: v["model"] for k, v in cp["outcomes"].items()} == guesses


# --- SELECTION_DELAY: independent tasks done within it need no choice --------

WIDE = json.dumps(
    [
        {"task": DRAW, "id": 0, "dep": [-1], "args": {"text": "a fox"}},
        {"task": DRAW, "id": 1, "dep": [-1], "args": {"text": "a hen"}},
    ]
)


async def test_independent_tasks_done_within_the_delay_ask_no_llm_to_choose(
    tmp_path: Path, llm_fake: FakeLLM, hf_fake: FakeHF
) -> None:
    # a delay no test run reaches: the tasks end long before it
    async with open_agent_env(tmp_path, llm_fake, hf_fake, selection_delay=600) as env:
        env.llm.reply("plan", WIDE)
        reply = await env.agent.handle(Request(KEY, "u1", "draw a fox and a hen"))
        assert not reply.error, reply.text
        assert env.llm.calls("select") == []  # never asked
        assert [t.model for t in reply.tasks] == [model_a(DRAW)] * 2
        assert [t.reason for t in reply.tasks] == [FINISHED_FIRST] * 2
        assert reply.usage.llm_calls == 2  # plan and answer


async def test_a_task_still_running_after_the_delay_gets_the_choice(
    tmp_path: Path, llm_fake: FakeLLM, hf_fake: FakeHF, release: list[asyncio.Event]
) -> None:
    async with open_agent_env(tmp_path, llm_fake, hf_fake, selection_delay=0.01) as env:
        held = asyncio.Event()
        release.append(held)
        draw = Seen(DRAW, hold=held)  # runs until the LLM has been asked
        env.hf.serve(model_a(DRAW), DRAW, draw)
        env.llm.reply("plan", json.dumps([json.loads(WIDE)[0]]))

        async def choice(body: dict[str, Any]) -> str:
            held.set()  # asked while the guess still runs
            return json.dumps({"0": {"id": model_b(DRAW), "reason": "sharper foxes"}})

        env.llm.reply("select", choice)
        reply = await env.agent.handle(Request(KEY, "u1", "draw a fox"))
        assert not reply.error, reply.text
        assert len(env.llm.calls("select")) == 1
        assert reply.tasks[0].model == model_b(DRAW)  # the guess was stopped for the choice
        assert reply.tasks[0].reason == "sharper foxes"


async def test_the_delay_is_waited_on_the_agents_clock(
    tmp_path: Path, llm_fake: FakeLLM, hf_fake: FakeHF, release: list[asyncio.Event]
) -> None:
    async with open_agent_env(tmp_path, llm_fake, hf_fake, selection_delay=600) as env:
        clock = FakeClock()  # 600 s pass at once on it
        env.agent.clock = clock
        env.agent.config = replace(env.agent.config, llm_wait_notice=0)
        held = asyncio.Event()
        release.append(held)
        env.hf.serve(model_a(DRAW), DRAW, Seen(DRAW, hold=held))  # runs until the LLM is asked
        env.llm.reply("plan", json.dumps([json.loads(WIDE)[0]]))

        async def choice(body: dict[str, Any]) -> str:
            held.set()
            return json.dumps({"0": {"id": model_a(DRAW), "reason": "the fox"}})

        env.llm.reply("select", choice)
        reply = await env.agent.handle(Request(KEY, "u1", "draw a fox"))
        assert not reply.error, reply.text
        assert len(env.llm.calls("select")) == 1
        assert clock.sleeps == [600]
        assert (reply.timings.total or 0) >= 600  # timed on the same clock


async def test_a_plan_with_dependents_asks_at_once(
    tmp_path: Path, llm_fake: FakeLLM, hf_fake: FakeHF, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with open_agent_env(tmp_path, llm_fake, hf_fake, selection_delay=600) as env:
        # the drawing is held until the models are in force: only a call made
        # at once (not after 600 s) lets the request finish
        draw = Seen(DRAW, hold=choice_known(env, monkeypatch))
        env.hf.serve(model_a(DRAW), DRAW, draw)
        env.llm.reply("plan", FOX)  # the label waits for the drawing
        picks = {"0": model_a(DRAW), "1": model_a(LABEL)}
        seen: list[bool] = []
        env.llm.reply("select", choice_after(draw.arrived, picks, seen))
        reply = await env.agent.handle(Request(KEY, "u1", ASK))
        assert not reply.error, reply.text
        assert len(env.llm.calls("select")) == 1 and seen == [True]
