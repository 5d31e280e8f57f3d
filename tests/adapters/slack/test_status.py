"""The status message: one post, edits at most once per interval, final state always shown."""

from __future__ import annotations

import itertools
import time

from slack_sdk.web.async_client import AsyncWebClient

from adapters.slack.status import StatusMessage
from tests.fakes.slack_fake import BOT_TOKEN, FakeSlack


def client_for(fake: FakeSlack) -> AsyncWebClient:
    return AsyncWebClient(token=BOT_TOKEN, base_url=fake.base_url)


async def test_bursts_of_progress_are_throttled_and_the_final_state_wins(
    slack_fake: FakeSlack,
) -> None:
    status = StatusMessage(client_for(slack_fake), "C1", "111.222", interval=0.2)
    await status.start("starting")

    started = time.monotonic()
    for i in range(50):
        await status.show(f"step {i}")
    assert time.monotonic() - started < 0.1  # show() never waits on Slack
    await status.finish("final")

    (post,) = slack_fake.calls_to("chat.postMessage")
    assert post.args == {
        "channel": "C1",
        "thread_ts": "111.222",
        "text": "starting",
        "unfurl_links": False,
    }
    edits = slack_fake.calls_to("chat.update")
    assert [c.args["text"] for c in edits][-1] == "final"
    assert len(edits) <= 3  # 50 states, ~0.2 s: the first wait, then the last
    assert all(c.args["ts"] == post.result["ts"] for c in edits)
    times = [post.at] + [c.at for c in edits]
    assert all(b - a >= 0.19 for a, b in itertools.pairwise(times))


async def test_unchanged_text_is_not_edited(slack_fake: FakeSlack) -> None:
    status = StatusMessage(client_for(slack_fake), "C1", None, interval=0.01)
    await status.start("same")
    await status.show("same")
    await status.finish("same")
    assert slack_fake.calls_to("chat.update") == []


async def test_a_failed_edit_does_not_fail_the_turn(slack_fake: FakeSlack) -> None:
    slack_fake.fail("chat.update", "message_not_found")
    status = StatusMessage(client_for(slack_fake), "C1", None, interval=0.01)
    await status.start("one")
    await status.finish("two")  # fails at Slack, logged
    await status.finish("three")
    assert [c.result["ok"] for c in slack_fake.calls_to("chat.update")] == [False, True]


async def test_without_a_status_message_the_final_text_is_posted(slack_fake: FakeSlack) -> None:
    slack_fake.fail("chat.postMessage", "channel_not_found")
    status = StatusMessage(client_for(slack_fake), "C1", "1.2", interval=0.01)
    try:
        await status.start("hello")
    except Exception as exc:  # the one call that may raise
        assert "channel_not_found" in str(exc)
    await status.finish("❌ failed")
    texts = [c.args["text"] for c in slack_fake.calls_to("chat.postMessage")]
    assert texts == ["hello", "❌ failed"]
