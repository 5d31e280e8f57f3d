"""One ``run_turn`` suite that every platform's Surface passes.

Each platform is driven the way it is in production, through its library's
own dispatch (discord.py parsing an INTERACTION_CREATE, the Bolt app
answering a signed Events API request, the terminal's ``ask``) against the
loopback fakes, with the real agent behind it.  What each fake received is
read back into one shape (:class:`Seen`): the status message's texts in
order, the answer messages, the files, and anything said privately; the
assertions are the same for all.  Status pacing runs on a fake clock
(:class:`~tests.fakes.clock.PacingClock`): no wall-clock assertion.
"""

from __future__ import annotations

import io
import json
import logging
import re
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from PIL import Image
from slack_sdk.web.async_client import AsyncWebClient

from adapters.cli import ask
from adapters.slack import SlackConfig, build_app, serve_http
from tests.adapters.discord.conftest import TEST_CONFIG, running_bot, settle
from tests.adapters.discord.helpers import noisy_png
from tests.adapters.discord.test_commands import noisy_wav
from tests.adapters.slack.conftest import SlackBot, SpyAgent
from tests.fakes.agent_fixture import AgentEnv, model_a
from tests.fakes.clock import PacingClock
from tests.fakes.discord_fake import FakeDiscord, make_discord_fake
from tests.fakes.samples import sample_png
from tests.fakes.slack_fake import (
    BOT_TOKEN,
    SIGNING_SECRET,
    FakeSlack,
    event_body,
    make_slack_fake,
    mention_event,
)

ANSWER = (
    "A red fox is a small wild canid with a bushy tail.\n"
    "It lives in dens, hunts at night, and eats mice, berries and insects."
)
INTERVAL = 1.0  # the status pacing on Discord and Slack (seconds on the fake clock)


@dataclass
class Seen:
    """What one turn showed, as the platform's fake received it."""

    status: list[str] = field(default_factory=list)  # the status message, post then edits
    answers: list[str] = field(default_factory=list)  # answer messages, in order
    files: list[tuple[str, bytes]] = field(default_factory=list)
    private: list[str] = field(default_factory=list)
    streamed: list[str] = field(default_factory=list)  # pieces shown as they came (terminal)

    @property
    def final(self) -> str:
        return self.status[-1]

    @property
    def answer(self) -> str:
        return "\n".join(self.answers).strip()


class Platform:
    name: str
    paced: bool  # the status message is edited at most once per INTERVAL
    answer_in_status: bool  # the answer is written into the status message as it comes
    clock: PacingClock

    async def turn(self, text: str) -> Seen:
        raise NotImplementedError


class Discord(Platform):
    name, paced, answer_in_status = "discord", True, True

    def __init__(self, env: AgentEnv, fake: FakeDiscord, upload_limit: int) -> None:
        self.env, self.fake, self.limit = env, fake, upload_limit
        self.clock = PacingClock()
        self.config = replace(TEST_CONFIG, status_interval=INTERVAL, clock=self.clock)

    async def turn(self, text: str) -> Seen:
        fake = self.fake
        async with running_bot(self.env.agent, self.config) as bot:
            p = fake.interaction("ask", {"prompt": text}, size_limit=self.limit)
            bot._connection.parse_interaction_create(p)  # type: ignore[arg-type]
            await settle()
        seen = Seen(status=[c.content or "" for c in fake.edits(p["token"])])
        for call in fake.followups(p["token"]):
            if call.flags & 64:
                seen.private.append(call.content or "")
                continue
            if call.content:
                seen.answers.append(call.content)
            seen.files += [(f.filename, f.data) for f in call.files]
        return seen


class Slack(Platform):
    name, paced, answer_in_status = "slack", True, True

    def __init__(self, env: AgentEnv, fake: FakeSlack, bot: SlackBot) -> None:
        self.env, self.fake, self.bot = env, fake, bot
        self.clock = bot.config.clock  # type: ignore[assignment]

    async def turn(self, text: str) -> Seen:
        fake = self.fake
        event = mention_event(text)
        assert (await self.bot.deliver(event_body(event))).status == 200
        thread = event["ts"]
        (status, *_) = await fake.wait_for(
            "chat.postMessage", where=lambda c: c.args.get("thread_ts") == thread
        )
        ts = status.result["ts"]
        await fake.wait_for(
            "chat.update",
            where=lambda c: c.args.get("ts") == ts and str(c.args["text"])[:1] in "✅❌",
            within=20,
        )
        seen = Seen(status=[str(status.args["text"])])
        seen.status += [str(c.args["text"]) for c in fake.calls_to("chat.update")]
        posts = [c for c in fake.calls_to("chat.postMessage") if c.args.get("thread_ts") == thread]
        seen.answers = [str(c.args["text"]) for c in posts[1:]]
        seen.files = [(u.filename, u.data or b"") for u in fake.uploaded()]
        seen.private = [str(c.args["text"]) for c in fake.calls_to("chat.postEphemeral")]
        return seen


class Terminal(Platform):
    name, paced, answer_in_status = "cli", False, False

    def __init__(self, env: AgentEnv) -> None:
        self.env = env
        self.clock = PacingClock()

    async def turn(self, text: str) -> Seen:
        out, err = _Recording(), io.StringIO()
        await ask(
            self.env.agent,
            text,
            files=[],
            conversation="suite",
            as_json=False,
            max_bytes=1000,
            out=out,
            err=err,
        )
        seen = Seen(status=err.getvalue().splitlines(), streamed=out.pieces)
        lines = out.getvalue().splitlines()
        seen.answers = ["\n".join(x for x in lines if not x.startswith("  file: "))]
        for line in lines:
            if line.startswith("  file: "):
                name, _, path = line.removeprefix("  file: ").partition(" → ")
                seen.files.append((name, Path(path).read_bytes()))
        return seen


class _Recording(io.StringIO):
    def __init__(self) -> None:
        super().__init__()
        self.pieces: list[str] = []

    def write(self, s: str) -> int:
        self.pieces.append(s)
        return super().write(s)


@asynccontextmanager
async def slack_platform(env: AgentEnv, upload_limit: int) -> AsyncIterator[Platform]:
    async with make_slack_fake() as fake:
        config = SlackConfig(
            bot_token=BOT_TOKEN,
            signing_secret=SIGNING_SECRET,
            http_port=0,
            api_url=fake.base_url,
            status_interval=INTERVAL,
            clock=PacingClock(),
            max_upload_bytes=upload_limit,
        )
        spy = SpyAgent(env.agent)
        app = build_app(spy, config, AsyncWebClient(token=BOT_TOKEN, base_url=config.base_url))
        runner = await serve_http(app, config, host="127.0.0.1")
        port = runner.addresses[0][1]
        session = aiohttp.ClientSession()
        try:
            url = f"http://127.0.0.1:{port}{config.http_path}"
            yield Slack(env, fake, SlackBot(fake, app, config, url, session, spy))
        finally:
            await session.close()
            await runner.cleanup()


@asynccontextmanager
async def discord_platform(env: AgentEnv, upload_limit: int) -> AsyncIterator[Platform]:
    async with make_discord_fake() as fake:
        yield Discord(env, fake, upload_limit)


@asynccontextmanager
async def terminal_platform(env: AgentEnv) -> AsyncIterator[Platform]:
    yield Terminal(env)


@pytest.fixture(params=["discord", "slack", "cli"])
def open_platform(request: pytest.FixtureRequest) -> Callable[..., Any]:
    def opener(env: AgentEnv, upload_limit: int = 10 * 1024 * 1024) -> Any:
        if request.param == "discord":
            return discord_platform(env, upload_limit)
        if request.param == "slack":
            return slack_platform(env, upload_limit)
        return terminal_platform(env)

    return opener


def plan(*tasks: dict[str, Any]) -> str:
    return json.dumps(list(tasks))


def draw(text: str = "a fox") -> str:
    return plan({"task": "text-to-image", "id": 0, "dep": [-1], "args": {"text": text}})


def streaming_fox(env: AgentEnv) -> AgentEnv:
    """A drawing, then ANSWER streamed 8 characters at a time."""
    env.llm.reply("plan", draw())
    env.llm.reply("answer", ANSWER)
    env.llm.stream_chunk_chars, env.llm.stream_gap = 8, 0.02
    return env


# --------------------------------------------------------------------- the suite


async def test_the_answer_is_streamed_then_posted_once_with_its_file(
    agent_env: AgentEnv, open_platform: Callable[..., Any]
) -> None:
    env = streaming_fox(agent_env)
    async with open_platform(env) as platform:
        seen = await platform.turn("draw a fox and tell me about foxes")
    assert seen.answer == ANSWER  # the whole answer, once
    assert [name for name, _ in seen.files] == ["image.png"]
    assert seen.files[0][1] == sample_png()  # what the model made
    assert "Done in" in seen.final
    assert any("✅ 0. text-to-image" in s for s in seen.status)  # the task, with its outcome
    assert ANSWER[:20] not in seen.final  # the status ends as a status, not as the answer
    partial = [s for s in seen.status if ANSWER[:10] in s]
    if platform.answer_in_status:
        # the answer appeared in the status message as it was written, bit by bit
        assert partial and any(ANSWER.splitlines()[-1] not in s for s in partial)
    else:
        assert partial == [] and len([p for p in seen.streamed if p.strip()]) >= 5
    if platform.paced:
        # time moves only when the pacing waits: every edit after the post
        # waited out the interval on the clock
        assert len(seen.status) - 1 <= platform.clock.t / INTERVAL + 1, (
            len(seen.status),
            platform.clock.t,
        )
        assert platform.clock.sleeps and max(platform.clock.sleeps) <= INTERVAL


async def test_a_stream_that_dies_midway_leaves_one_answer_the_fallback(
    agent_env: AgentEnv, open_platform: Callable[..., Any]
) -> None:
    env = streaming_fox(agent_env)
    env.llm.break_stream(70, stage="answer")
    async with open_platform(env) as platform:
        seen = await platform.turn("draw a fox and tell me about foxes")
    answer = seen.answer
    if platform.name == "cli":  # the terminal keeps what it printed; the fallback follows
        answer = answer.split("\n", 2)[-1]
    assert answer.startswith("I could not write a full answer")
    assert "stopped in the middle of its answer" in answer
    assert answer.count("I could not write") == 1 and ANSWER[:30] not in answer
    assert [name for name, _ in seen.files] == ["image.png"]  # the results are still sent
    assert "Done in" in seen.final


async def test_a_failed_request_ends_the_status_with_the_reason_and_nothing_else(
    agent_env: AgentEnv, open_platform: Callable[..., Any]
) -> None:
    agent_env.llm.fail(500, times=5)
    async with open_platform(agent_env) as platform:
        seen = await platform.turn("draw a cat")
    assert re.match(r"❌ .*language model.*HTTP 500", seen.final)
    assert seen.answer == "" and seen.files == [] and seen.private == []


class _Exploding:
    async def __aenter__(self) -> None:
        raise RuntimeError("database exploded")

    async def __aexit__(self, *exc: object) -> None:
        return None


async def test_a_crash_is_told_with_the_request_id_and_traced_in_the_log(
    agent_env: AgentEnv, open_platform: Callable[..., Any], caplog: pytest.LogCaptureFixture
) -> None:
    agent_env.agent.run = lambda request, job=None: _Exploding()  # type: ignore[method-assign,assignment,misc]
    with caplog.at_level(logging.ERROR):
        async with open_platform(agent_env) as platform:
            seen = await platform.turn("draw a fox")
    rid = re.search(r"request `?(\w+)`?\)", seen.final)
    assert seen.final.startswith("❌ Sorry, something went wrong on my side") and rid
    assert seen.answer == "" and seen.files == []
    [record] = [r for r in caplog.records if r.exc_info and rid[1] in r.getMessage()]
    assert "database exploded" in str(record.exc_info[1])  # type: ignore[index]


async def test_images_over_the_upload_limit_are_downscaled_other_files_named(
    agent_env: AgentEnv, open_platform: Callable[..., Any]
) -> None:
    env = agent_env
    big = noisy_png(200)  # ~120 KB of incompressible pixels
    env.hf.serve(model_a("text-to-image"), "text-to-image", big)
    env.hf.serve(model_a("text-to-speech"), "text-to-speech", noisy_wav(8.0))
    env.llm.reply(
        "plan",
        plan(
            {"task": "text-to-image", "id": 0, "dep": [-1], "args": {"text": "noise"}},
            {"task": "text-to-speech", "id": 1, "dep": [-1], "args": {"text": "hello"}},
        ),
    )
    env.llm.reply("answer", "Made image.png and speech.ogg.")
    async with open_platform(env, upload_limit=12_000) as platform:
        seen = await platform.turn("noise, and say hello")
    if platform.name == "cli":  # no upload: the stored files, whole, by path
        assert [(n, len(d)) for n, d in seen.files] == [("image.png", len(big))] + [
            (n, len(d)) for n, d in seen.files if n == "speech.ogg"
        ]
        return
    [(name, data)] = seen.files  # the speech is too large even re-encoded: named instead
    assert name == "image.jpg" and len(data) <= 12_000 < len(big)
    assert Image.open(io.BytesIO(data)).format == "JPEG"
    assert seen.answer.startswith("Made image.png and speech.ogg.")
    assert "speech.ogg" in seen.answer and "too large to upload here" in seen.answer
