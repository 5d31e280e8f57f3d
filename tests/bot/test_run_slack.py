"""``python -m bot run slack`` as an operator starts it: a real process,
configured by environment only (HTTP mode), answering a signed event with
the LLM, HF and Slack fakes behind it."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
from pathlib import Path

import aiohttp

from tests.fakes.agent_fixture import model_a, serve_all, write_test_catalog
from tests.fakes.hf_fake import FakeHF
from tests.fakes.loopback import free_port, wait_listening
from tests.fakes.openai_fake import FakeLLM
from tests.fakes.samples import sample_png
from tests.fakes.slack_fake import (
    BOT_TOKEN,
    SIGNING_SECRET,
    FakeSlack,
    event_body,
    mention_event,
    signed_request,
)

ROOT = Path(__file__).resolve().parents[2]


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
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("OPENAI_", "HF_", "DISCORD", "SLACK"))
    }
    env.update(
        PYTHONPATH=str(ROOT),
        OPENAI_API_KEY="sk-test",
        OPENAI_BASE_URL=llm_fake.base_url,
        HF_INFERENCE_URL=hf_fake.base_url,
        MODEL_CATALOG=str(write_test_catalog(tmp_path / "catalog.jsonl")),
        DATABASE_URL=f"sqlite+aiosqlite:///{tmp_path / 'bot.db'}",
        MEDIA_DIR=str(tmp_path / "media"),
        SLACK_BOT_TOKEN=BOT_TOKEN,
        SLACK_SIGNING_SECRET=SIGNING_SECRET,
        SLACK_HTTP_PORT=str(port),
        SLACK_API_URL=slack_fake.base_url,
    )
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "bot", "run", "slack",
        env=env, cwd=tmp_path, stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    try:
        await wait_listening(port, proc)
        raw, headers = signed_request(
            event_body(mention_event("draw a fox", ts="1700000000.000100"))
        )
        headers["Content-Type"] = "application/json"
        async with (
            aiohttp.ClientSession() as http,
            http.post(f"http://127.0.0.1:{port}/slack/events", data=raw, headers=headers) as resp,
        ):
            assert resp.status == 200
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
