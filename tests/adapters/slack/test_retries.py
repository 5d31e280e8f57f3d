"""Which Slack calls are tried again (adapters/slack/retries.py): the SDK's
own retry engine, decided by the real request and response objects it hands
a handler, and end to end through the Web API client on the fake Slack."""

from __future__ import annotations

import json

import pytest
from slack_sdk.http_retry.request import HttpRequest
from slack_sdk.http_retry.response import HttpResponse
from slack_sdk.http_retry.state import RetryState

from adapters.slack.retries import AsyncPassingErrorRetryHandler, method_of
from tests.adapters.slack.conftest import SlackBot
from tests.adapters.slack.test_events import finished, plan, step
from tests.fakes.agent_fixture import AgentEnv
from tests.fakes.slack_fake import event_body, mention_event

API = "https://slack.com/api/"


async def retried(method: str, status: int, body: dict[str, object] | None) -> bool:
    handler = AsyncPassingErrorRetryHandler(max_retry_count=2)
    request = HttpRequest(method="POST", url=API + method, headers={})
    response = HttpResponse(status_code=status, headers={}, body=body)
    return await handler.can_retry_async(state=RetryState(), request=request, response=response)


@pytest.mark.parametrize(
    ("method", "status", "body", "again"),
    [
        ("files.getUploadURLExternal", 200, {"ok": False, "error": "internal_error"}, True),
        ("conversations.replies", 503, None, True),
        ("files.info", 200, {"ok": False, "error": "service_unavailable"}, True),
        # a post or a share may have been carried out before Slack failed
        ("chat.postMessage", 200, {"ok": False, "error": "internal_error"}, False),
        ("files.completeUploadExternal", 500, None, False),
        ("chat.update", 503, None, False),
        # not a passing failure
        ("files.info", 200, {"ok": False, "error": "file_not_found"}, False),
        ("conversations.replies", 200, {"ok": True}, False),
    ],
)
async def test_only_repeatable_calls_failed_for_a_passing_reason_are_tried_again(
    method: str, status: int, body: dict[str, object] | None, again: bool
) -> None:
    assert await retried(method, status, body) is again


def test_the_method_is_read_from_the_url() -> None:
    assert method_of(API + "chat.postMessage") == "chat.postMessage"
    assert method_of("http://127.0.0.1:9/api/files.info?file=F1") == "files.info"


async def test_an_upload_url_slack_failed_to_give_is_asked_again(
    slack_bot: SlackBot, agent_env: AgentEnv
) -> None:
    """Slack answers the first upload-URL request with internal_error: the
    client asks again and the picture reaches the thread."""
    agent_env.llm.reply("plan", plan(step(0, "text-to-image", text="a red square")))
    agent_env.llm.reply("answer", "Here is your red square.")
    fake = slack_bot.fake
    fake.fail("files.getUploadURLExternal", "internal_error", times=1)
    event = mention_event("draw a red square")

    await slack_bot.deliver(event_body(event))
    _, final = await finished(fake, "C0CHAN", event["ts"])
    assert final.startswith("✅")
    asked = fake.calls_to("files.getUploadURLExternal")
    assert [c.result.get("ok") for c in asked] == [False, True]
    (upload,) = fake.uploaded()
    assert (upload.channel, upload.thread_ts) == ("C0CHAN", event["ts"])
    (shared,) = fake.calls_to("files.completeUploadExternal")
    assert [f["id"] for f in json.loads(shared.args["files"])] == [upload.file_id]
