"""``python -m bot run slack`` as an operator starts it: a real process,
configured by environment only (HTTP mode), answering a signed event with
the LLM, HF and Slack fakes behind it."""

from __future__ import annotations

import asyncio
import json
import signal
import sys
from pathlib import Path

import aiohttp

from tests.fakes.agent_fixture import model_a, serve_all
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


def bot_env(
    tmp_path: Path, llm: FakeLLM, hf: FakeHF, slack: FakeSlack, port: int
) -> dict[str, str]:
    return fake_env(
        tmp_path,
        llm,
        hf,
        SLACK_BOT_TOKEN=BOT_TOKEN,
        SLACK_SIGNING_SECRET=SIGNING_SECRET,
        SLACK_HTTP_PORT=str(port),
        SLACK_API_URL=slack.base_url,
    )


async def post_event(port: int, event: dict[str, object]) -> None:
    raw, headers = signed_request(event_body(event))
    headers["Content-Type"] = "application/json"
    async with (
        aiohttp.ClientSession() as http,
        http.post(f"http://127.0.0.1:{port}/slack/events", data=raw, headers=headers) as resp,
    ):
        assert resp.status == 200


async def test_run_slack_answers_a_mention_in_its_thread(
    tmp_path: Path, llm_fake: FakeLLM, hf_fake: FakeHF, slack_fake: FakeSlack
) -> None:
    serve_all(hf_fake)
    llm_fake.reply(
        "plan",
        json.dumps([{"task": "text-to-image", "id": 0, "dep": [-1], "args": {"text": "a fox"}}]),
    )
    llm_fake.reply("answer", "Here is **your fox**.")
    port = free_port()
    env = bot_env(tmp_path, llm_fake, hf_fake, slack_fake, port)
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "bot", "run", "slack",
        env=env, cwd=tmp_path, stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    try:
        await wait_listening(port, proc)
        await post_event(port, mention_event("draw a fox", ts="1700000000.000100"))
        uploads = await slack_fake.wait_for("files.completeUploadExternal", within=30)
        answers = await slack_fake.wait_for(
            "chat.postMessage", where=lambda c: "your fox" in str(c.args.get("text")), within=30
        )
    finally:
        proc.send_signal(signal.SIGTERM)  # how systemd/Docker stop it
        try:
            _, err = await asyncio.wait_for(proc.communicate(), 15)
        except TimeoutError:
            proc.kill()
            raise
    assert answers[0].args["thread_ts"] == "1700000000.000100"
    assert answers[0].args["text"].count("*your fox*") == 1  # markdown → mrkdwn
    (upload,) = slack_fake.uploaded()
    assert upload.data == sample_png()  # the generated image, byte for byte
    assert (upload.channel, upload.thread_ts) == ("C0CHAN", "1700000000.000100")
    assert len(uploads) == 1
    assert len(hf_fake.calls_for(model_a("text-to-image"))) == 1
    assert "Traceback" not in err.decode()
    assert proc.returncode == 143  # a clean stop on SIGTERM, not a kill


async def test_sigterm_finishes_running_requests_and_refuses_new_ones(
    tmp_path: Path, llm_fake: FakeLLM, hf_fake: FakeHF, slack_fake: FakeSlack
) -> None:
    serve_all(hf_fake)
    hf_fake.serve(model_a("text-to-image"), "text-to-image", delay=1.5)  # a slow model
    llm_fake.reply(
        "plan",
        json.dumps([{"task": "text-to-image", "id": 0, "dep": [-1], "args": {"text": "a fox"}}]),
    )
    llm_fake.reply("answer", "Here is your fox.")
    port = free_port()
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "bot", "run", "slack",
        env=bot_env(tmp_path, llm_fake, hf_fake, slack_fake, port), cwd=tmp_path,
        stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    assert proc.stderr is not None
    try:
        await wait_listening(port, proc)
        await post_event(port, mention_event("draw a fox", ts="1700000000.000200"))
        await hf_fake_started(hf_fake)  # the request is mid-flight
        proc.send_signal(signal.SIGTERM)
        log = b""
        while b"shutting down" not in log:  # the bot has seen the signal
            log += await asyncio.wait_for(proc.stderr.readline(), 15)
        await post_event(port, mention_event("and a cat", ts="1700000000.000300"))
        refused = await slack_fake.wait_for(
            "chat.postMessage", where=lambda c: "restarting" in str(c.args.get("text")), within=15
        )
        answered = await slack_fake.wait_for(
            "chat.postMessage", where=lambda c: "your fox" in str(c.args.get("text")), within=15
        )
        rest = await asyncio.wait_for(proc.stderr.read(), 30)
        await asyncio.wait_for(proc.wait(), 15)
    finally:
        if proc.returncode is None:
            proc.kill()
    assert refused[0].args["thread_ts"] == "1700000000.000300"
    assert answered[0].args["thread_ts"] == "1700000000.000200"
    assert len(slack_fake.uploaded()) == 1  # the running request finished, file and all
    assert proc.returncode == 143
    assert b"Traceback" not in log + rest


async def hf_fake_started(hf: FakeHF) -> None:
    """Until the slow model has received its call (another process: poll)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 15
    while not hf.calls_for(model_a("text-to-image")):
        assert loop.time() < deadline, "the model was never called"
        await asyncio.sleep(0.05)
