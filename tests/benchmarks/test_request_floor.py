"""The request floor's recorder and replayer (``benchmarks.request_floor``)
against the fakes in their own process and the bot on SQLite, at tiny counts:
the recording holds one request's calls, and the replay sends the same
requests to the fakes and writes what a bot request writes, each time."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest

from benchmarks.concurrency_cpu import fakes_process
from benchmarks.concurrency_worker import BenchAdapter, timed_job
from benchmarks.harness import (
    SHAPE_BY_NAME,
    Fakes,
    FakeURLs,
    bench_settings,
    conversation,
    open_bot,
    request,
)
from benchmarks.request_floor import (
    GROUPED,
    LLMCall,
    ModelCall,
    Replayer,
    fresh_schema,
    record,
    replay,
    replay_in_child,
    rows_per_table,
)
from bot.settings import Settings


@asynccontextmanager
async def bot_on_fakes(tmp_path: Path) -> AsyncIterator[tuple[FakeURLs, Fakes, Settings, Any]]:
    """The fakes in their own process, scripted for one picture at zero
    latency, and a bot on SQLite under ``tmp_path`` open on them."""
    with fakes_process() as urls:
        async with Fakes(urls) as fakes:
            await fakes.reset()
            await fakes.script(SHAPE_BY_NAME["single"])
            settings = bench_settings(tmp_path, urls, None)
            async with open_bot(settings) as agent:
                yield urls, fakes, settings, agent


async def test_the_replay_makes_one_recorded_requests_calls_and_writes_its_rows(
    tmp_path: Path,
) -> None:
    shape = SHAPE_BY_NAME["single"]
    bot_db = f"sqlite+aiosqlite:///{tmp_path / 'bot.db'}"
    floor_db = f"sqlite+aiosqlite:///{tmp_path / 'floor.db'}"
    async with bot_on_fakes(tmp_path) as (urls, fakes, settings, agent):
        adapter = BenchAdapter(agent)
        rec = await record(urls, agent, adapter, fakes, settings)
        # what one more request of the same kind writes, table by table
        before = await rows_per_table(bot_db)
        run = await timed_job(adapter, request(conversation("Rq7tag", "x"), "u2", shape))
        assert run.ok, run.why()
        after = await rows_per_table(bot_db)
        one_request = {t: after[t] - before[t] for t in after}

        # the recording: the plan and the streamed answer, the picture, the store's work
        llm = [s for s in rec.steps if isinstance(s, LLMCall)]
        models = [s for s in rec.steps if isinstance(s, ModelCall)]
        statements = [st for tx in rec.transactions for st in tx.statements]
        commits = [tx for tx in rec.transactions if tx.write and tx.end == "commit"]
        assert len(llm) >= 2 and any(c.stream for c in llm)
        assert [(m.task, m.model) for m in models] == [
            ("text-to-image", "CompVis/stable-diffusion-v1-4")
        ]
        assert len(statements) >= 10 and len(commits) >= 2
        # the ids the database hands out are followed: the turn's rows name
        # the conversation and the message written before them
        assert any(st.refs for st in statements if st.table == "messages")
        assert one_request["turn_jobs"] == 1 and one_request["messages"] == 2

        await fresh_schema(floor_db)
        llm0, hf0 = await fakes.llm_count(), await fakes.hf_count()
        # one request alone writes what one bot request writes
        async with Replayer(rec, floor_db) as r:
            await r.request("all", r.batch(1, None, "one-")[0])
            assert r.errors == {}
        assert await rows_per_table(floor_db) == one_request
        assert await fakes.llm_count() - llm0 == len(llm)
        assert await fakes.hf_count() - hf0 == 1
        sent = await fakes.llm_requests(llm0)
        assert [q["body"] for q in sent] == [c.body for c in llm]  # byte for byte, as parsed
        assert [c["sha256"] for c in await fakes.hf_calls(hf0)] == [models[0].sha256]

        # the measured loops: 3 one after another, 5 at once, every part
        llm1, hf1 = await fakes.llm_count(), await fakes.hf_count()
        out = await replay(rec, floor_db, 3, 5)
        assert out["errors"] == {}
        done = out["replayed"]
        assert done["all"] == 1 + 3 + 5 + 5  # warm-up, sequential, burst, grouped burst
        assert set(out["burst"]) == {"LLM calls", "model call", "SQL", "all", *GROUPED}
        with_llm = done["LLM calls"] + done["all"]
        with_model = done["model call"] + done["all"]
        with_sql = done["SQL"] + done["all"] + 1  # and the one above
        assert await fakes.llm_count() - llm1 == len(llm) * with_llm
        assert await fakes.hf_count() - hf1 == with_model
        rows = await rows_per_table(floor_db)
        assert rows == {t: n * with_sql for t, n in one_request.items()}


async def test_the_replay_runs_only_the_parts_asked_for(tmp_path: Path) -> None:
    """Section 7 of ``python -m benchmarks`` replays only the burst of "all,
    writes grouped": no warm-up beyond one, no sequential loop, no other part."""
    floor_db = f"sqlite+aiosqlite:///{tmp_path / 'floor.db'}"
    async with bot_on_fakes(tmp_path) as (urls, fakes, settings, agent):
        rec = await record(urls, agent, BenchAdapter(agent), fakes, settings)
        await fresh_schema(floor_db)
        # in a process of its own, as section 7 runs it (the parts by --parts)
        out = replay_in_child(rec, floor_db, tmp_path, 0, 5, False, parts=(GROUPED[1],))
    assert out["errors"] == {}
    assert out["sequential"] == {}
    assert set(out["burst"]) == set(out["burst_wall"]) == {GROUPED[1]}
    assert out["burst"][GROUPED[1]] > 0
    assert out["replayed"] == {"all": 1 + 5}  # the warm-up, the grouped burst
    with pytest.raises(ValueError, match="unknown part"):
        await replay(rec, floor_db, 0, 5, parts=("everything",))
