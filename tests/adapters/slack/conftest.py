"""The Slack app under test: the real Bolt app, served over HTTP on 127.0.0.1,
its Web API client pointed at the fake Slack, and a real Agent behind it.

``slack_bot`` posts signed Events API requests the way Slack does and times
the ack; ``SpyAgent`` wraps the agent to let tests await what it was asked
(each event recorded as a job, and whether it was new; requests) instead of
sleeping.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field, replace
from types import TracebackType
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from slack_bolt.async_app import AsyncApp
from slack_sdk.web.async_client import AsyncWebClient

from adapters.slack import SlackConfig, build_app, serve_http
from adapters.slack.assistant_events import FeedbackRecorder
from core.types import (
    Accepted,
    AgentAPI,
    ConversationKey,
    EventSink,
    Job,
    JobOutcome,
    JobRunner,
    ModelChoice,
    PlanPreview,
    Reply,
    Request,
    Resource,
    Run,
    UsageReport,
)
from tests.fakes.agent_fixture import AgentEnv
from tests.fakes.slack_fake import (
    BOT_TOKEN,
    SIGNING_SECRET,
    FakeSlack,
    signed_form,
    signed_request,
)


class _Failing:
    """A run that breaks the agent's promise: entering it raises."""

    def __init__(self, error: Exception) -> None:
        self.error = error

    async def __aenter__(self) -> Run:
        raise self.error

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        return None


class SpyAgent:
    """Delegates to a real agent and records what the adapter asked of it."""

    def __init__(self, inner: AgentAPI) -> None:
        self.inner = inner
        self.requests: list[Request] = []
        # (event id, new?) for every event the ack path recorded as a job
        self.claims: list[tuple[str, bool]] = []
        self.fail_with: Exception | None = None  # raise from run() (a crash)
        self._changed = asyncio.Condition()

    def run(self, request: Request, *, job: Job | None = None) -> AbstractAsyncContextManager[Run]:
        self.requests.append(request)
        if self.fail_with is not None:
            return _Failing(self.fail_with)
        return self.inner.run(request, job=job)

    async def handle(
        self, request: Request, events: EventSink | None = None, job: Job | None = None
    ) -> Reply:
        self.requests.append(request)
        if self.fail_with is not None:
            raise self.fail_with
        return await self.inner.handle(request, events, job=job)

    def register_runner(self, kind: str, runner: JobRunner) -> None:
        self.inner.register_runner(kind, runner)

    async def accept(
        self,
        kind: str,
        conversation: ConversationKey,
        payload: dict[str, Any],
        *,
        request_id: str,
        dedup: str | None = None,
        upload_bytes: int = 0,
    ) -> Accepted:
        accepted = await self.inner.accept(
            kind,
            conversation,
            payload,
            request_id=request_id,
            dedup=dedup,
            upload_bytes=upload_bytes,
        )
        async with self._changed:
            self.claims.append(((dedup or "").removeprefix("slack:"), accepted.fresh))
            self._changed.notify_all()
        return accepted

    async def process(self, job_id: int) -> JobOutcome:
        return await self.inner.process(job_id)

    async def plan_only(self, request: Request) -> PlanPreview:
        return await self.inner.plan_only(request)

    async def forget(self, conversation: ConversationKey, user_id: str | None = None) -> int:
        return await self.inner.forget(conversation, user_id)

    async def usage(
        self,
        conversation: ConversationKey,
        user_id: str,
        *,
        server_wide: bool = False,
        is_admin: bool = False,
        since: str | None = None,
    ) -> UsageReport:
        return await self.inner.usage(
            conversation, user_id, server_wide=server_wide, is_admin=is_admin, since=since
        )

    async def settings(self, conversation: ConversationKey) -> dict[str, str]:
        return await self.inner.settings(conversation)

    async def configure(
        self,
        conversation: ConversationKey,
        key: str,
        value: str | None,
        *,
        user_id: str,
        is_admin: bool,
    ) -> dict[str, str]:
        return await self.inner.configure(
            conversation, key, value, user_id=user_id, is_admin=is_admin
        )

    def models(self, task: str | None = None) -> dict[str, list[ModelChoice]]:
        return self.inner.models(task)

    async def claim_event(self, source: str, event_id: str) -> bool:
        fresh = await self.inner.claim_event(source, event_id)
        async with self._changed:
            self.claims.append((event_id, fresh))
            self._changed.notify_all()
        return fresh

    async def read_file(self, resource: Resource) -> bytes:
        return await self.inner.read_file(resource)

    async def wait_claims(self, count: int, within: float = 10.0) -> list[tuple[str, bool]]:
        async with self._changed:
            await asyncio.wait_for(
                self._changed.wait_for(lambda: len(self.claims) >= count), within
            )
        return list(self.claims)


@dataclass
class Delivery:
    status: int
    seconds: float  # from sending the request to receiving the ack
    body: str
    acked_at: float  # time.monotonic() when the ack arrived


@dataclass
class SlackBot:
    """The running app and the means to talk to it like Slack does."""

    fake: FakeSlack
    app: AsyncApp
    config: SlackConfig
    url: str
    session: aiohttp.ClientSession
    agent: SpyAgent
    _runners: list[web.AppRunner] = field(default_factory=list)

    async def deliver(self, body: dict[str, Any], **sign: Any) -> Delivery:
        """Sign ``body`` and POST it to /slack/events (``retry_num``, ``secret``…)."""
        raw, headers = signed_request(body, sign.pop("secret", SIGNING_SECRET), **sign)
        return await self.post_raw(raw, headers)

    async def interact(self, payload: dict[str, Any]) -> Delivery:
        """POST an interaction (a button click) as Slack does: a signed form."""
        raw, headers = signed_form(payload)
        return await self.post_raw(raw, headers)

    async def post_raw(self, raw: str, headers: dict[str, str]) -> Delivery:
        start = time.monotonic()
        async with self.session.post(self.url, data=raw.encode(), headers=headers) as response:
            text = await response.text()
        now = time.monotonic()
        return Delivery(response.status, now - start, text, now)


BotFactory = Callable[..., Awaitable[SlackBot]]


@pytest.fixture
async def make_slack_bot(slack_fake: FakeSlack) -> AsyncIterator[BotFactory]:
    """``await make_slack_bot(agent, **config_overrides)`` → a served :class:`SlackBot`."""
    runners: list[web.AppRunner] = []
    session = aiohttp.ClientSession()

    async def make(
        agent: AgentAPI, *, feedback: FeedbackRecorder | None = None, **overrides: Any
    ) -> SlackBot:
        config = SlackConfig(
            bot_token=BOT_TOKEN,
            signing_secret=SIGNING_SECRET,
            http_port=0,
            api_url=slack_fake.base_url,
            status_interval=0.05,
        )
        config = replace(config, **overrides)
        client = AsyncWebClient(token=config.bot_token, base_url=config.base_url)
        spy = agent if isinstance(agent, SpyAgent) else SpyAgent(agent)
        app = build_app(spy, config, client, feedback=feedback)
        runner = await serve_http(app, config, host="127.0.0.1")
        runners.append(runner)
        port = runner.addresses[0][1]
        url = f"http://127.0.0.1:{port}{config.http_path}"
        return SlackBot(slack_fake, app, config, url, session, spy)

    try:
        yield make
    finally:
        await session.close()
        for runner in runners:
            await runner.cleanup()


@pytest.fixture
async def slack_bot(make_slack_bot: BotFactory, agent_env: AgentEnv) -> SlackBot:
    """The Slack app in front of the real agent (``agent_env``'s fakes)."""
    return await make_slack_bot(agent_env.agent)
