"""A scheduler round claims only when it can start something it was asked
for, or once a ``poll`` to look for work nobody here asked for (another
process's orphans); its claim statement is built once per shape (SQLite and
PostgreSQL).  Jobs end when the test opens their gate."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from core.jobs import JobQueue
from core.store import Repo
from core.store.jobs import JobStore
from tests.core.test_jobs_upload_budget import KIND, GatedRunner, Harness


class CountingStore(JobStore):
    """The real store, counting its claims."""

    def __init__(self, repo: Repo) -> None:
        super().__init__(repo)
        self.claims = 0

    async def claim(self, **kwargs: Any) -> Any:
        self.claims += 1
        return await super().claim(**kwargs)


@pytest.fixture
async def harness(repo: Repo) -> AsyncIterator[tuple[Harness, CountingStore]]:
    store = CountingStore(repo)
    # a poll long enough that no survey happens during the test but the first
    queue = JobQueue(store, max_inflight=8, poll=3600)
    runner = GatedRunner()
    queue.register(KIND, runner)
    h = Harness(queue, runner)
    try:
        yield h, store
    finally:
        for job_id in list(h.outcomes):
            runner.gate(job_id).set()
        await queue.aclose()


async def test_rounds_with_nobody_waiting_claim_nothing(
    harness: tuple[Harness, CountingStore],
) -> None:
    h, store = harness
    first = await h.submit("a")
    await h.runner.wait(lambda: first in h.runner.started)
    await h.finish(first)
    before = store.claims
    for _ in range(3):  # woken by the job ending, then idle rounds
        await h.round()
    assert store.claims == before

    second = await h.submit("b")  # somebody waits again: claimed at once
    await h.runner.wait(lambda: second in h.runner.started)
    assert store.claims > before
    await h.finish(second)


async def test_the_claim_statement_is_built_once_per_shape(
    harness: tuple[Harness, CountingStore],
) -> None:
    h, store = harness
    ids = []
    for name in ("a", "b", "c"):
        job_id = await h.submit(name)
        await h.runner.wait(lambda job_id=job_id: job_id in h.runner.started)  # type: ignore[misc]
        ids.append(job_id)
    built = dict(store._claims)
    assert built  # the shapes claimed so far, each built once
    await h.finish(*ids)
    fourth = await h.submit("d")
    await h.runner.wait(lambda: fourth in h.runner.started)
    assert store._claims == built  # same shape: the same statement objects
    await h.finish(fourth)
