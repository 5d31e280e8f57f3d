"""A turn's usage from its request, LLM usage and task records; periods;
and, through the real openai client against the loopback server, recorded
LLM calls and tokens equal what the server answered."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from core.catalog import Catalog, ModelInfo
from core.errors import InputRejected, RunFailed
from core.store import Database
from core.store.usage import UsageStore
from core.types import ConversationKey, Request, TaskRecord, TaskStatus, Usage
from core.usage import (
    Caller,
    GroupBy,
    ModelCall,
    UsageFilter,
    UsageTotals,
    from_micro,
    grand_total,
    parse_since,
    provider_resolver,
    to_micro,
    turn_usage,
)
from tests.fakes.openai_fake import FakeLLM, stage_of
from tests.said import raises_saying

NOW = datetime(2026, 8, 20, 9, 30, tzinfo=UTC)
KEY = ConversationKey("slack", "T1", "C1", "1700000000.0001")


def record(
    i: int,
    task: str,
    model: str | None,
    status: TaskStatus,
    seconds: float | None,
    backend: str | None = "remote",
) -> TaskRecord:
    started = NOW if seconds is not None else None
    ended = NOW + timedelta(seconds=seconds) if seconds is not None else None
    return TaskRecord(i, task, model, status, started, ended, backend=backend)


def test_turn_usage_counts_the_tasks_that_reached_a_model() -> None:
    request = Request(KEY, "U7", "draw a cat and read it aloud", request_id="req-1")
    tasks = [
        record(0, "text-to-image", "sd/xl", TaskStatus.DONE, 4.25),
        record(1, "text-to-speech", "kan/tts", TaskStatus.DONE, 1.0, backend="local"),
        record(2, "image-classification", "g/vit", TaskStatus.FAILED, 0.5, backend=None),
        record(3, "image-to-text", "b/blip", TaskStatus.SKIPPED, None),  # never ran
        record(4, "text-to-video", None, TaskStatus.FAILED, None),  # no model available
    ]
    u = turn_usage(
        request,
        Usage(llm_calls=3, prompt_tokens=1200, completion_tokens=300),
        tasks,
        llm_model="openai/gpt-oss-120b",
        llm_host="router.huggingface.co",
        at=NOW,
    )
    assert (u.request_id, u.platform, u.server, u.user_id) == ("req-1", "slack", "T1", "U7")
    assert u.conversation == "slack:T1/C1/1700000000.0001"
    assert (u.llm_calls, u.prompt_tokens, u.completion_tokens) == (3, 1200, 300)
    assert u.llm_cost_usd is None
    assert u.model_calls == (
        ModelCall("text-to-image", "sd/xl", "done", 4.25, None, "remote"),
        ModelCall("text-to-speech", "kan/tts", "done", 1.0, "local", "local"),
        ModelCall("image-classification", "g/vit", "failed", 0.5, None, None),
    )


def test_turn_usage_takes_a_provider_resolver() -> None:
    request = Request(KEY, "U7", "x")
    tasks = [record(0, "object-detection", "facebook/detr-resnet-50", TaskStatus.DONE, 2.0)]
    u = turn_usage(request, Usage(), tasks, llm_model=None, provider_of=lambda t: "hf-inference")
    assert [c.provider for c in u.model_calls] == ["hf-inference"]


def test_provider_resolver_says_what_is_known() -> None:
    catalog = Catalog(
        [
            ModelInfo("own/endpoint", "summarization", endpoint="https://models.example/sum"),
            ModelInfo("pinned/model", "text-to-image", provider="fal-ai"),
            ModelInfo("plain/model", "text-to-image"),
        ]
    )
    rec = [
        record(0, "summarization", "own/endpoint", TaskStatus.DONE, 1.0),
        record(1, "text-to-image", "pinned/model", TaskStatus.DONE, 1.0),
        record(2, "text-to-image", "plain/model", TaskStatus.DONE, 1.0),
        record(3, "text-to-image", "plain/model", TaskStatus.DONE, 1.0, backend="local"),
    ]
    assert [provider_resolver(catalog)(r) for r in rec] == ["endpoint", "fal-ai", None, "local"]
    assert provider_resolver(catalog, "together")(rec[2]) == "together"


@pytest.mark.parametrize(
    ("text", "back"),
    [
        ("30m", timedelta(minutes=30)),
        ("12h", timedelta(hours=12)),
        ("7d", timedelta(days=7)),
        (" 2W ", timedelta(weeks=2)),
        ("90min", timedelta(minutes=90)),
    ],
)
def test_parse_since_periods(text: str, back: timedelta) -> None:
    assert parse_since(text, NOW) == NOW - back


def test_parse_since_dates() -> None:
    assert parse_since("2026-08-01", NOW) == datetime(2026, 8, 1, tzinfo=UTC)
    assert parse_since("2026-08-01T10:00:00+02:00", NOW) == datetime(2026, 8, 1, 8, tzinfo=UTC)


@pytest.mark.parametrize("bad", ["", "7", "seven days", "7y", "-3d", "2026-13-01"])
def test_parse_since_refuses_what_it_cannot_read(bad: str) -> None:
    with raises_saying(InputRejected, r"not a period: use e\.g\. 30m, 12h, 7d, 2w"):
        parse_since(bad, NOW)


def test_costs_are_exact_in_micro_usd() -> None:
    assert to_micro(None) is None
    assert to_micro(0.1) + to_micro(0.2) == to_micro(0.3)  # type: ignore[operator]
    assert from_micro(300_000) == 0.3


def test_grand_total_keeps_unknown_cost_unknown() -> None:
    rows = [UsageTotals(("a",), requests=1, unpriced_calls=2), UsageTotals(("b",), requests=2)]
    total = grand_total(rows)
    assert (total.requests, total.cost_usd, total.unpriced_calls) == (3, None, 2)
    rows.append(UsageTotals(("c",), cost_usd=0.25))
    assert grand_total(rows).cost_usd == 0.25


def test_a_caller_sees_their_own_and_an_admin_the_server() -> None:
    since = NOW - timedelta(days=7)
    user = Caller("discord", "g1", "u1")
    assert user.filters(since) == (UsageFilter("discord", "g1", "u1", since=since),)
    admin = Caller("discord", "g1", "u1", is_admin=True)
    assert admin.filters() == (
        UsageFilter("discord", "g1", "u1"),
        UsageFilter("discord", "g1"),
    )


async def test_recorded_llm_usage_equals_what_the_server_answered(
    llm_fake: FakeLLM, database: Database
) -> None:
    """The real openai client against the loopback server: a failed call and
    two answered ones; the stored sums equal the server's own counts."""
    llm = llm_fake.client()
    usage = Usage()
    llm_fake.fail(500, times=1)
    with pytest.raises(RunFailed):
        await llm.complete([{"role": "user", "content": "first, refused"}], usage=usage)
    llm_fake.reply("other", "a short answer", "another answer, a little longer")
    messages = [
        [{"role": "user", "content": "what is in the picture of the harbour?"}],
        [{"role": "system", "content": "be brief"}, {"role": "user", "content": "and now?"}],
    ]
    for m in messages:
        await llm.complete(m, usage=usage)
    request = Request(ConversationKey("discord", "g1", "c1"), "u1", "hi")
    store = UsageStore(database)
    u = turn_usage(request, usage, [], llm_model=llm.model, llm_host=llm.host, at=NOW)
    assert await store.record(u)

    [row] = await store.totals(GroupBy.MODEL)
    answered = [b for b in llm_fake.calls() if stage_of(b) == "other"]
    assert row.key == ("llm", "fake-model", llm.host)
    assert llm.host.startswith("127.0.0.1:")
    assert row.llm_calls == len(llm_fake.calls()) == 3  # the refused one counts too
    # The fake's documented token rule: characters of the messages / 4, of the answer / 4.
    assert row.prompt_tokens == sum(
        sum(len(x["content"]) for x in b["messages"]) // 4 for b in answered[1:]
    )
    assert (
        row.completion_tokens
        == len("a short answer") // 4 + len("another answer, a little longer") // 4
    )
    assert row.prompt_tokens > 0 and row.completion_tokens > 0
