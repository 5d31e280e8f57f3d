"""The health check compose runs for the bot: ``run`` keeps a heartbeat file
fresh while it serves; ``python -m bot.health`` says whether it is."""

from __future__ import annotations

import asyncio
import itertools
import os
import signal
import sys
from collections.abc import Callable
from pathlib import Path

from bot import health
from tests.bot.test_run_slack import bot_env
from tests.fakes.hf_fake import FakeHF
from tests.fakes.loopback import free_port, wait_listening
from tests.fakes.openai_fake import FakeLLM
from tests.fakes.process_env import clean_env
from tests.fakes.slack_fake import FakeSlack

NOW = 1_800_000_000.0


async def until(done: Callable[[], bool], within: float) -> None:
    """Wait until ``done()`` holds (a file another task or process writes);
    ``within`` is a hang guard, not a duration under test."""
    async with asyncio.timeout(within):
        for _ in itertools.count():
            if done():
                return
            await asyncio.sleep(0.01)


def test_a_fresh_heartbeat_is_serving_a_stale_or_missing_one_is_not(tmp_path: Path) -> None:
    path = health.heartbeat_path(tmp_path)
    serving, line = health.check(path, NOW)
    assert not serving and "no heartbeat" in line and "hugginggpt-bot run" in line

    path.touch()
    os.utime(path, (NOW - 5, NOW - 5))
    assert health.check(path, NOW) == (True, "serving: heartbeat 5 s ago")

    os.utime(path, (NOW - 61, NOW - 61))
    serving, line = health.check(path, NOW)
    assert not serving and "61 s old" in line and "restart" in line


async def test_the_heartbeat_is_touched_while_the_block_runs_and_removed_after(
    tmp_path: Path,
) -> None:
    async with health.heartbeat(tmp_path / "data", every=0.01) as path:
        assert path.parent == tmp_path / "data" and path.is_file()
        os.utime(path, (NOW, NOW))
        await until(lambda: path.stat().st_mtime != NOW, within=30)  # touched again
    assert not path.exists()


async def health_check(env: dict[str, str], cwd: Path) -> tuple[int, str]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "bot.health",
        env=env, cwd=cwd, stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
    )  # fmt: skip
    out, _ = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode is not None
    return proc.returncode, out.decode()


async def test_python_m_bot_health_says_whether_run_serves(
    tmp_path: Path, llm_fake: FakeLLM, hf_fake: FakeHF, slack_fake: FakeSlack
) -> None:
    data = tmp_path / "data"
    port = free_port()
    env = bot_env(tmp_path, llm_fake, hf_fake, slack_fake, port) | {"DATA_DIR": str(data)}
    assert (await health_check(env, tmp_path))[0] == 1  # nothing runs yet

    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "bot", "run", "slack",
        env=env, cwd=tmp_path, stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    try:
        await wait_listening(port, proc)
        await until(health.heartbeat_path(data).exists, within=60)  # with the servers
        code, out = await health_check(env, tmp_path)
        assert code == 0 and out.startswith("serving"), out
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            await asyncio.wait_for(proc.communicate(), 30)
        except TimeoutError:
            proc.kill()
            raise
    assert proc.returncode == 143
    code, out = await health_check(env, tmp_path)  # a stopped bot is not serving
    assert code == 1 and "no heartbeat" in out, out


async def test_the_check_reads_the_data_dir_the_bot_uses(tmp_path: Path) -> None:
    env = clean_env(tmp_path) | {"DATA_DIR": str(tmp_path / "elsewhere")}
    health.heartbeat_path(tmp_path / "elsewhere").parent.mkdir()
    health.heartbeat_path(tmp_path / "elsewhere").touch()
    code, out = await health_check(env, tmp_path)
    assert code == 0, out
