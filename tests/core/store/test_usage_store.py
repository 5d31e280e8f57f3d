"""The usage tables on SQLite and PostgreSQL: what is recorded is what the
sums say, per user, channel, server and model; a turn counts once; periods
and filters; costs known, partly known and unknown."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
import sqlalchemy as sa

from core.store import Database
from core.store.models import UsageModelCall
from core.store.usage import UsageStore
from core.usage import GroupBy, ModelCall, TurnUsage, UsageFilter, UsageTotals, grand_total

T0 = datetime(2026, 8, 1, 12, 0, tzinfo=UTC)


def usage(
    rid: str,
    *,
    user: str = "u1",
    server: str = "g1",
    channel: str = "c1",
    platform: str = "discord",
    at: datetime = T0,
    llm: tuple[int, int, int] = (2, 100, 20),
    calls: tuple[ModelCall, ...] = (),
    llm_model: str = "openai/gpt-oss-120b",
    llm_cost: float | None = None,
    error: bool = False,
) -> TurnUsage:
    return TurnUsage(
        request_id=rid,
        at=at,
        platform=platform,
        server=server,
        conversation=f"{platform}:{server}/{channel}",
        user_id=user,
        llm_model=llm_model,
        llm_host="router.huggingface.co",
        llm_calls=llm[0],
        prompt_tokens=llm[1],
        completion_tokens=llm[2],
        llm_cost_usd=llm_cost,
        model_calls=calls,
        error=error,
    )


DETR = ModelCall("object-detection", "facebook/detr-resnet-50", "done", 1.5, "hf-inference")
SDXL = ModelCall("text-to-image", "stabilityai/sdxl", "done", 4.0, "fal-ai", cost_usd=0.003)
SDXL_FAILED = ModelCall("text-to-image", "stabilityai/sdxl", "failed", 0.5, "fal-ai")


@pytest.fixture
async def store(database: Database) -> UsageStore:
    s = UsageStore(database)
    assert await s.record(usage("r1", user="u1", channel="c1", calls=(DETR, SDXL)))
    assert await s.record(usage("r2", user="u2", channel="c1", llm=(3, 300, 30), calls=(SDXL,)))
    assert await s.record(
        usage("r3", user="u1", channel="c2", llm=(1, 50, 5), calls=(SDXL_FAILED,), error=True)
    )
    assert await s.record(
        usage("r4", user="u1", server="g2", channel="c9", llm=(2, 10, 1), llm_cost=0.0005)
    )
    return s


def by_key(rows: list[UsageTotals]) -> dict[tuple[str, ...], UsageTotals]:
    return {r.key: r for r in rows}


async def test_totals_by_user(store: UsageStore) -> None:
    rows = by_key(await store.totals(GroupBy.USER))
    u1 = rows[("discord", "u1")]
    assert (u1.requests, u1.llm_calls, u1.prompt_tokens, u1.completion_tokens) == (3, 5, 160, 26)
    assert (u1.model_calls, u1.model_failures, u1.model_seconds) == (3, 1, 6.0)
    # priced: the SDXL call of r1 and r4's LLM; unpriced: r1's 2 LLM calls + DETR, r3's 1 + failed
    assert u1.cost_usd == pytest.approx(0.0035)
    assert u1.unpriced_calls == 2 + 1 + 1 + 1
    assert u1.errors == 1
    u2 = rows[("discord", "u2")]
    assert (u2.requests, u2.llm_calls, u2.tokens, u2.model_calls, u2.model_seconds) == (
        1,
        3,
        330,
        1,
        4.0,
    )
    assert u2.cost_usd == pytest.approx(0.003)
    assert u2.unpriced_calls == 3


async def test_totals_by_channel_and_server(store: UsageStore) -> None:
    channels = by_key(await store.totals(GroupBy.CHANNEL))
    assert set(channels) == {("discord:g1/c1",), ("discord:g1/c2",), ("discord:g2/c9",)}
    c1 = channels[("discord:g1/c1",)]
    assert (c1.requests, c1.llm_calls, c1.tokens, c1.model_calls) == (2, 5, 450, 3)
    servers = await store.totals(GroupBy.SERVER)
    assert [r.key for r in servers] == [("discord", "g1"), ("discord", "g2")]  # busiest first
    g1 = servers[0]
    assert (g1.requests, g1.llm_calls, g1.prompt_tokens, g1.completion_tokens) == (3, 6, 450, 55)
    assert (g1.model_calls, g1.model_failures, g1.model_seconds) == (4, 1, 10.0)
    assert g1.cost_usd == pytest.approx(0.006)
    total = grand_total(servers)
    assert (total.requests, total.llm_calls, total.tokens, total.model_calls) == (4, 8, 516, 4)
    assert total.cost_usd == pytest.approx(0.0065)


async def test_totals_by_model(store: UsageStore) -> None:
    rows = by_key(await store.totals(GroupBy.MODEL))
    llm = rows[("llm", "openai/gpt-oss-120b", "router.huggingface.co")]
    assert (llm.requests, llm.llm_calls, llm.prompt_tokens, llm.completion_tokens) == (
        4,
        8,
        460,
        56,
    )
    assert llm.cost_usd == pytest.approx(0.0005)
    assert llm.unpriced_calls == 6
    sdxl = rows[("task", "stabilityai/sdxl", "fal-ai")]
    assert (sdxl.model_calls, sdxl.model_failures, sdxl.model_seconds) == (3, 1, 8.5)
    assert sdxl.cost_usd == pytest.approx(0.006)
    assert sdxl.unpriced_calls == 1
    detr = rows[("task", "facebook/detr-resnet-50", "hf-inference")]
    assert (detr.model_calls, detr.cost_usd, detr.unpriced_calls) == (1, None, 1)


async def test_filters_narrow_the_sums(store: UsageStore) -> None:
    one = await store.totals(GroupBy.USER, UsageFilter(platform="discord", server="g2"))
    assert [(r.key, r.requests, r.tokens) for r in one] == [(("discord", "u1"), 1, 11)]
    mine = await store.totals(GroupBy.SERVER, UsageFilter(user_id="u2"))
    assert [(r.key, r.requests) for r in mine] == [(("discord", "g1"), 1)]
    models = by_key(await store.totals(GroupBy.MODEL, UsageFilter(user_id="u2")))
    assert models[("task", "stabilityai/sdxl", "fal-ai")].model_calls == 1
    assert await store.totals(GroupBy.USER, UsageFilter(platform="slack")) == []


async def test_period_is_since_inclusive_until_exclusive(database: Database) -> None:
    s = UsageStore(database)
    for n in range(4):
        await s.record(usage(f"day{n}", at=T0 + timedelta(days=n), llm=(1, 10, 1)))
    rows = await s.totals(
        GroupBy.SERVER, UsageFilter(since=T0 + timedelta(days=1), until=T0 + timedelta(days=3))
    )
    assert [(r.requests, r.llm_calls, r.tokens) for r in rows] == [(2, 2, 22)]


async def test_a_turn_is_recorded_once(database: Database) -> None:
    s = UsageStore(database)
    assert await s.record(usage("same", calls=(DETR,)))
    assert not await s.record(usage("same", llm=(9, 900, 90), calls=(DETR, SDXL)))
    [row] = await s.totals(GroupBy.USER)
    assert (row.requests, row.llm_calls, row.tokens, row.model_calls) == (1, 2, 120, 1)
    async with database.engine.connect() as conn:
        calls = await conn.scalar(sa.select(sa.func.count()).select_from(UsageModelCall))
    assert calls == 1


async def test_nothing_priced_means_cost_unknown(database: Database) -> None:
    s = UsageStore(database)
    await s.record(usage("r", calls=(DETR,)))
    [row] = await s.totals(GroupBy.SERVER)
    assert row.cost_usd is None
    assert row.unpriced_calls == 3


async def test_long_and_odd_ids_find_their_rows(database: Database) -> None:
    s = UsageStore(database)
    user = "ü" * 300 + "\x00"
    server = "s" * 400
    await s.record(usage("r-long", user=user, server=server, calls=(DETR,)))
    rows = await s.totals(GroupBy.USER, UsageFilter(user_id=user, server=server))
    assert len(rows) == 1
    assert rows[0].requests == 1
    assert len(rows[0].key[1]) == 255


async def test_delete_before_removes_turns_and_their_calls(database: Database) -> None:
    s = UsageStore(database)
    await s.record(usage("old", at=T0 - timedelta(days=400), calls=(DETR, SDXL)))
    await s.record(usage("new", at=T0, calls=(DETR,)))
    assert await s.delete_before(T0 - timedelta(days=365)) == 1
    [row] = await s.totals(GroupBy.SERVER)
    assert (row.requests, row.model_calls) == (1, 1)
    async with database.engine.connect() as conn:
        calls = await conn.scalar(sa.select(sa.func.count()).select_from(UsageModelCall))
    assert calls == 1
