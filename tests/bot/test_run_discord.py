"""``python -m bot run discord`` as an operator starts it: a real process,
configured by environment only, that logs in over REST, syncs its commands to
the dev guild in ``setup_hook``, connects to the (fake) gateway and answers a
slash command that arrives there, with the LLM and HF fakes behind it.

``run all`` is the same with Slack (HTTP mode) answered by the same process;
``discord sync`` registers globally through the same ``DISCORD_API_BASE``.  The
in-process tests check that the API base is set only while the client runs.
"""

from __future__ import annotations

import asyncio
import json
import signal
import sys
from collections.abc import Awaitable
from pathlib import Path
from typing import Any, TypeVar

import aiohttp
import discord
import discord.http
from pydantic import SecretStr

from adapters.discord import run_discord
from adapters.discord.client import api_base
from bot.app import discord_config
from tests.fakes.agent_fixture import AgentEnv, model_a, serve_all
from tests.fakes.discord_fake import APP_ID, GUILD_ID, FakeDiscord
from tests.fakes.hf_fake import FakeHF
from tests.fakes.loopback import free_port, wait_listening
from tests.fakes.openai_fake import FakeLLM
from tests.fakes.process_env import fake_env
from tests.fakes.samples import sample_png
from tests.fakes.slack_fake import (
    BOT_TOKEN,
    SIGNING_SECRET,
    FakeSlack,
    event_body,
    mention_event,
    signed_request,
)

DISCORD_TOKEN = "discord-test-token"
T = TypeVar("T")


def fox_plan(llm: FakeLLM) -> None:
    step = {"task": "text-to-image", "id": 0, "dep": [-1], "args": {"text": "a fox"}}
    llm.reply("plan", json.dumps([step]))
    llm.reply("answer", "Here is **your fox**.")


def bot_env(tmp_path: Path, llm: FakeLLM, hf: FakeHF, **extra: str) -> dict[str, str]:
    """The environment an operator would set, pointing at the fakes."""
    return fake_env(tmp_path, llm, hf, **extra)


def discord_env(fake: FakeDiscord) -> dict[str, str]:
    return {
        "DISCORD_BOT_TOKEN": DISCORD_TOKEN,
        "DISCORD_API_BASE": fake.base_url,
        "DISCORD_DEV_GUILD_IDS": str(GUILD_ID),
    }


async def start_bot(target: str, env: dict[str, str], cwd: Path) -> asyncio.subprocess.Process:
    return await asyncio.create_subprocess_exec(
        sys.executable, "-m", "bot", "run", target,
        env=env, cwd=cwd, stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip


async def while_running(proc: asyncio.subprocess.Process, waiting: Awaitable[T]) -> T:
    """Await ``waiting``, but fail at once (with its stderr) if the bot exits first."""
    job = asyncio.ensure_future(waiting)
    exited = asyncio.ensure_future(proc.wait())
    await asyncio.wait({job, exited}, return_when=asyncio.FIRST_COMPLETED)
    if job.done():
        exited.cancel()
        return job.result()
    job.cancel()
    assert proc.stderr is not None
    err = (await proc.stderr.read()).decode()
    raise AssertionError(f"the bot exited with {proc.returncode}:\n{err}")


async def interrupt(proc: asyncio.subprocess.Process) -> tuple[str, str]:
    """Ctrl-C, as an operator stops it; its stdout and stderr."""
    proc.send_signal(signal.SIGINT)
    try:
        out, err = await asyncio.wait_for(proc.communicate(), 20)
    except TimeoutError:
        proc.kill()
        raise
    return out.decode(), err.decode()


async def ask_over_gateway(fake: FakeDiscord, prompt: str) -> dict[str, Any]:
    """Send /ask as Discord would and wait for its final follow-up."""
    payload = fake.interaction("ask", {"prompt": prompt})
    await fake.dispatch("INTERACTION_CREATE", payload)
    await fake.wait_for("POST", rf"^/webhooks/{APP_ID}/{payload['token']}$", within=30)
    # the answer is posted first; the status message's last edit follows (paced)
    await fake.wait_until(
        lambda: (fake.edits(payload["token"])[-1].content or "")[:1] in ("✅", "❌"), within=30
    )
    return payload


def assert_fox_answered(
    fake: FakeDiscord, payload: dict[str, Any], llm: FakeLLM | None = None
) -> None:
    """The /ask flow, as the fake saw it; with ``llm``, the defer preceded every LLM call."""
    [callback] = fake.callbacks(payload["id"])
    assert callback.json == {"type": 5}  # deferred ("thinking…")
    if llm is not None:
        assert callback.at < llm.events[0][0]
    edits = [c.content or "" for c in fake.edits(payload["token"])]
    assert edits[0].startswith("⏳ ")  # the status message, at once (then at most 1 edit/s)
    assert edits[-1].startswith("✅ **Done in")
    assert f"✅ 0. text-to-image · `{model_a('text-to-image')}`" in edits[-1]
    [answer] = fake.followups(payload["token"])
    assert answer.content == "Here is **your fox**."
    [part] = answer.files
    assert (part.field, part.filename) == ("files[0]", "image.png")
    assert part.data == sample_png()  # what the HF fake generated, byte for byte


def assert_synced_to_dev_guild_only(fake: FakeDiscord) -> None:
    [put] = fake.find("PUT", r"/commands$")
    assert isinstance(put.json, list)
    assert put.path == f"/applications/{APP_ID}/guilds/{GUILD_ID}/commands"
    assert {c["name"] for c in put.json} == {
        "ask",
        "plan",
        "models",
        "forget",
        "help",
        "usage",
        "config",
    }


def assert_identified(fake: FakeDiscord) -> None:
    [identify] = fake.gateway.identifies
    assert identify["token"] == DISCORD_TOKEN
    assert identify["shard"] == [0, 1]
    assert identify["intents"] == discord.Intents.default().value
    [session] = fake.gateway.sessions
    assert session.query["v"] == "10"
    assert session.heartbeats >= 1  # sent right after HELLO, acknowledged


async def test_run_discord_syncs_connects_and_answers_ask_over_the_gateway(
    tmp_path: Path, llm_fake: FakeLLM, hf_fake: FakeHF, discord_fake: FakeDiscord
) -> None:
    serve_all(hf_fake)
    fox_plan(llm_fake)
    env = bot_env(tmp_path, llm_fake, hf_fake, **discord_env(discord_fake))
    proc = await start_bot("discord", env, tmp_path)
    try:
        await while_running(proc, discord_fake.gateway.wait_ready(within=60))
        assert_identified(discord_fake)
        assert_synced_to_dev_guild_only(discord_fake)
        payload = await while_running(proc, ask_over_gateway(discord_fake, "draw a fox"))
    finally:
        out, err = await interrupt(proc)
    assert proc.returncode == 130, err  # bot/__main__.py: Ctrl-C exits 130
    assert "Traceback" not in err, err
    assert f"Invite the bot: https://discord.com/oauth2/authorize?client_id={APP_ID}" in out
    assert_fox_answered(discord_fake, payload, llm_fake)
    assert len(hf_fake.calls_for(model_a("text-to-image"))) == 1
    await discord_fake.gateway.wait_closed()
    [session] = discord_fake.gateway.sessions
    assert session.ws.close_code == 1000  # the bot said goodbye, not a dropped connection


async def test_discord_sync_registers_globally_through_the_api_base(
    tmp_path: Path, llm_fake: FakeLLM, hf_fake: FakeHF, discord_fake: FakeDiscord
) -> None:
    env = bot_env(tmp_path, llm_fake, hf_fake, **discord_env(discord_fake))
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "bot", "discord", "sync",
        env=env, cwd=tmp_path, stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    try:
        out, err = await asyncio.wait_for(proc.communicate(), 60)
    except TimeoutError:
        proc.kill()
        raise
    assert proc.returncode == 0, err.decode()
    assert "Synced 7 global commands" in out.decode()
    [put] = discord_fake.find("PUT", r"/commands$")
    assert put.path == f"/applications/{APP_ID}/commands"  # global, dev guilds or not
    assert discord_fake.gateway.sessions == []  # sync never connects to the gateway


async def test_run_all_answers_discord_and_slack_from_one_process(
    tmp_path: Path,
    llm_fake: FakeLLM,
    hf_fake: FakeHF,
    discord_fake: FakeDiscord,
    slack_fake: FakeSlack,
) -> None:
    serve_all(hf_fake)
    fox_plan(llm_fake)
    fox_plan(llm_fake)
    port = free_port()
    env = bot_env(
        tmp_path,
        llm_fake,
        hf_fake,
        **discord_env(discord_fake),
        SLACK_BOT_TOKEN=BOT_TOKEN,
        SLACK_SIGNING_SECRET=SIGNING_SECRET,
        SLACK_HTTP_PORT=str(port),
        SLACK_API_URL=slack_fake.base_url,
    )
    proc = await start_bot("all", env, tmp_path)
    try:
        await while_running(proc, discord_fake.gateway.wait_ready(within=60))
        await wait_listening(port, proc)
        # Both platforms at once: the interaction is in flight while Slack posts.
        asking = asyncio.ensure_future(ask_over_gateway(discord_fake, "draw a fox"))
        raw, headers = signed_request(
            event_body(mention_event("draw a fox", ts="1700000000.000100"))
        )
        headers["Content-Type"] = "application/json"
        async with (
            aiohttp.ClientSession() as http,
            http.post(f"http://127.0.0.1:{port}/slack/events", data=raw, headers=headers) as resp,
        ):
            assert resp.status == 200
        payload = await while_running(proc, asking)
        await while_running(proc, slack_fake.wait_for("files.completeUploadExternal", within=30))
        answers = await while_running(
            proc,
            slack_fake.wait_for(
                "chat.postMessage", where=lambda c: "your fox" in str(c.args.get("text")), within=30
            ),
        )
    finally:
        out, err = await interrupt(proc)
    assert proc.returncode == 130, err
    assert "Traceback" not in err, err
    assert f"client_id={APP_ID}" in out
    assert_synced_to_dev_guild_only(discord_fake)
    assert_fox_answered(discord_fake, payload)  # Slack's LLM calls overlap
    assert answers[0].args["thread_ts"] == "1700000000.000100"
    (upload,) = slack_fake.uploaded()
    assert upload.data == sample_png()
    assert len(hf_fake.calls_for(model_a("text-to-image"))) == 2


async def test_run_discord_in_process_uses_the_api_base_only_while_running(
    agent_env: AgentEnv, discord_fake: FakeDiscord
) -> None:
    """DISCORD_API_BASE moves REST, follow-ups and the gateway lookup; it is
    undone when the client stops (no import-time or leftover global state)."""
    fake = discord_fake
    discord.http.Route.BASE = "http://127.0.0.1:9/api/v10"  # nothing listens: must be replaced
    discord_settings = agent_env.settings.discord.model_copy(
        update={"bot_token": SecretStr(DISCORD_TOKEN), "api_base": fake.base_url + "/"}
    )
    settings = agent_env.settings.model_copy(update={"discord": discord_settings})
    fox_plan(agent_env.llm)
    task = asyncio.create_task(run_discord(agent_env.agent, discord_config(settings)))
    try:
        ready = asyncio.ensure_future(fake.gateway.wait_ready())
        await asyncio.wait({ready, task}, return_when=asyncio.FIRST_COMPLETED)
        if task.done():
            ready.cancel()
            task.result()  # raises why run_discord ended
            raise AssertionError("run_discord returned before the gateway was ready")
        await ready
        assert fake.find("PUT", r"/commands$") == []  # no dev guilds: no sync at all
        payload = await ask_over_gateway(fake, "draw a fox")
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
    assert current_base() == "http://127.0.0.1:9/api/v10"
    assert_fox_answered(fake, payload, agent_env.llm)
    await fake.gateway.wait_closed()


def current_base() -> str:
    return discord.http.Route.BASE


def test_api_base_appends_the_version_once_and_defaults_to_discord() -> None:
    default = current_base()
    with api_base(None):
        assert current_base() == default
    with api_base("http://proxy:8080/"):
        url = discord.http.Route("GET", "/gateway/bot").url
        assert url == "http://proxy:8080/api/v10/gateway/bot"
    with api_base("http://proxy:8080/api/v9"):
        assert current_base() == "http://proxy:8080/api/v9"
    assert current_base() == default
