"""``python -m bot serve``: the CLI worker ``ask`` and ``chat`` hand their
commands to, as a person runs it (real processes against the loopback
fakes).  Whether a command ran in the worker is read from the worker's own
log ("ask ended"), never from how long it took."""

from __future__ import annotations

import asyncio
import json
import os
import re
import shutil
import signal
import socket
import stat
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from bot import worker_client
from bot import worker_protocol as wire
from bot.settings import APP_NAME, Settings
from bot.worker import setting_names, socket_path
from tests.fakes import process_env
from tests.fakes.agent_fixture import model_a, serve_all
from tests.fakes.hf_fake import FakeHF
from tests.fakes.openai_fake import FakeLLM
from tests.fakes.samples import sample_png

WITHIN = 60.0  # a hang guard, not a duration under test
DRAW = '[{"task": "text-to-image", "id": 0, "dep": [-1], "args": {"text": "a fox"}}]'
DETECT = '[{"task": "object-detection", "id": 0, "dep": [-1], "args": {"image": "photo.png"}}]'
# A log line as the text format writes it: "2026-11-27 03:12:30,901 WARNING core.llm: …".
LOG_LINE = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} [A-Z]+ ", re.MULTILINE)
# A measured duration ("latency=0.03s", "in 1.5 s", "120 ms"): it differs from run to run.
_DURATION = re.compile(r"\b\d+(?:\.\d+)?\s?m?s\b")


def without_durations(text: str) -> str:
    """``text`` with every measured duration replaced by ``<t>``, so two runs compare."""
    return _DURATION.sub("<t>", text)


class Worker:
    """A running ``python -m bot serve``; its log is read as it is written."""

    def __init__(self, proc: asyncio.subprocess.Process) -> None:
        self.proc = proc
        self.lines: list[str] = []
        self._new = asyncio.Event()
        self._reader = asyncio.ensure_future(self._read())

    async def _read(self) -> None:
        assert self.proc.stderr is not None
        async for line in self.proc.stderr:
            self.lines.append(line.decode())
            self._new.set()
        self._new.set()

    @property
    def log(self) -> str:
        return "".join(self.lines)

    async def logged(self, text: str) -> str:
        """Wait until a log line contains ``text``; that line."""

        async def seen() -> str:
            while True:
                found = [line for line in self.lines if text in line]
                if found:
                    return found[0]
                if self.proc.returncode is not None or self._reader.done():
                    raise AssertionError(f"the worker ended without logging {text!r}:\n{self.log}")
                self._new.clear()
                await self._new.wait()

        return await asyncio.wait_for(seen(), WITHIN)

    def commands(self) -> int:
        """How many commands the worker ran to their end."""
        return self.log.count("CLI worker: ask ended") + self.log.count("CLI worker: chat ended")

    async def exited(self) -> int:
        code = await asyncio.wait_for(self.proc.wait(), WITHIN)
        await asyncio.wait_for(self._reader, WITHIN)
        return code

    async def stop(self) -> None:
        if self.proc.returncode is None:
            self.proc.terminate()
        await self.exited()


async def start_worker(env: dict[str, str], cwd: Path) -> Worker:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "bot", "serve",
        env=env, cwd=cwd, stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    return Worker(proc)


@pytest.fixture
async def workers() -> AsyncIterator[list[Worker]]:
    """Workers a test starts, stopped at its end whatever happened."""
    started: list[Worker] = []
    yield started
    for w in started:
        await w.stop()


async def serving(env: dict[str, str], cwd: Path, workers: list[Worker]) -> Worker:
    w = await start_worker(env, cwd)
    workers.append(w)
    await w.logged("CLI worker listening on")
    return w


def env_for(tmp_path: Path, llm: FakeLLM, hf: FakeHF, **extra: str) -> dict[str, str]:
    return process_env.fake_env(tmp_path, llm, hf, DATA_DIR=str(tmp_path), **extra)


async def run_chat(env: dict[str, str], cwd: Path, stdin: str, *args: str) -> tuple[int, str, str]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "bot", "chat", *args,
        env=env, cwd=cwd, stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    out, err = await asyncio.wait_for(proc.communicate(stdin.encode()), WITHIN)
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()


def comparable(answer: dict[str, Any]) -> dict[str, Any]:
    """An ``ask --json`` object without what differs between two runs."""
    answer = dict(answer, request_id=None, timings=None)
    answer["tasks"] = [dict(t, started=None, ended=None) for t in answer["tasks"]]
    return answer


# -- through the worker: the same output ---------------------------------------------


async def test_ask_through_the_worker_prints_what_ask_prints(
    tmp_path: Path, llm_fake: FakeLLM, hf_fake: FakeHF, workers: list[Worker]
) -> None:
    serve_all(hf_fake)
    env = env_for(tmp_path, llm_fake, hf_fake)
    run = process_env.run_bot

    llm_fake.reply("plan", DRAW, DRAW)
    llm_fake.reply("answer", "Here is a fox.\nIt is orange.", "Here is a fox.\nIt is orange.")
    here = [
        await run("ask", "draw a fox", "--conversation", "a", env=env, cwd=tmp_path),
        await run("ask", "draw a fox", "--conversation", "b", "--json", env=env, cwd=tmp_path),
    ]
    assert [code for code, _, _ in here] == [0, 0], here

    worker = await serving(env, tmp_path, workers)
    llm_fake.reply("plan", DRAW, DRAW)
    llm_fake.reply("answer", "Here is a fox.\nIt is orange.", "Here is a fox.\nIt is orange.")
    there = [
        await run("ask", "draw a fox", "--conversation", "c", env=env, cwd=tmp_path),
        await run("ask", "draw a fox", "--conversation", "d", "--json", env=env, cwd=tmp_path),
    ]
    assert [code for code, _, _ in there] == [0, 0], there
    assert worker.commands() == 2, worker.log  # both ran in the worker

    # plain: the answer as it was streamed, then the file, byte for byte
    assert there[0][1] == here[0][1]
    assert "Here is a fox.\nIt is orange.\n  file: image.png → " in there[0][1]
    # --json: one object, the same but for the request's id and times
    assert comparable(json.loads(there[1][1])) == comparable(json.loads(here[1][1]))
    # the status lines went to stderr, as they do here
    assert "[planning]" in there[0][2] and "✅" in there[0][2]
    assert there[0][2].splitlines()[0] == here[0][2].splitlines()[0]


async def test_the_commands_log_lines_go_to_the_log_file_as_in_its_own_process(
    tmp_path: Path, llm_fake: FakeLLM, hf_fake: FakeHF, workers: list[Worker]
) -> None:
    """A warning the request logs goes to the terminal's log file
    (DATA_DIR/logs/bot.log), not to the terminal, where the failure is said
    once: run here or in the worker alike."""
    env = env_for(tmp_path, llm_fake, hf_fake, LLM_MAX_RETRIES="0")
    log_file = tmp_path / "logs" / "bot.log"
    llm_fake.fail(500, stage="plan")
    code, _, here = await process_env.run_bot("ask", "hello", env=env, cwd=tmp_path)
    assert code == 1
    logged_here = log_file.read_text(encoding="utf-8")
    worker = await serving(env, tmp_path, workers)
    llm_fake.fail(500, stage="plan")
    code, _, there = await process_env.run_bot("ask", "hello", env=env, cwd=tmp_path)
    assert code == 1 and worker.commands() == 1
    logged_there = log_file.read_text(encoding="utf-8").removeprefix(logged_here)

    for logged in (logged_here, logged_there):
        assert logged.count("WARNING core.llm: llm call failed") == 1, logged
    for err in (here, there):
        assert not LOG_LINE.search(err), err
        assert [line for line in err.splitlines() if "HTTP 500" in line] == [
            err.splitlines()[-1]
        ]  # said once: the status's last line
    last = [without_durations(err.splitlines()[-1]) for err in (there, here)]
    assert last[0] == last[1]


async def test_a_file_named_with_file_reaches_the_model(
    tmp_path: Path, llm_fake: FakeLLM, hf_fake: FakeHF, workers: list[Worker]
) -> None:
    serve_all(hf_fake)
    env = env_for(tmp_path, llm_fake, hf_fake)
    worker = await serving(env, tmp_path, workers)
    elsewhere = tmp_path / "sub"
    elsewhere.mkdir()
    (elsewhere / "photo.png").write_bytes(sample_png())

    llm_fake.reply("plan", DETECT)
    code, out, err = await process_env.run_bot(
        "ask", "what is in it?", "--file", "sub/photo.png", "--json", env=env, cwd=tmp_path
    )
    assert code == 0, err
    assert worker.commands() == 1, worker.log
    assert json.loads(out)["tasks"][0]["status"] == "done"
    assert hf_fake.calls_for(model_a("object-detection"))[0].body == sample_png()

    # a missing file and one over the limit: the same one-line errors as here
    code, _, err = await process_env.run_bot(
        "ask", "x", "--file", "nope.png", env=env, cwd=tmp_path
    )
    assert (code, err) == (2, "error: nope.png: no such file\n")
    assert worker.commands() == 2


async def test_chat_through_the_worker(
    tmp_path: Path, llm_fake: FakeLLM, hf_fake: FakeHF, workers: list[Worker]
) -> None:
    serve_all(hf_fake)
    env = env_for(tmp_path, llm_fake, hf_fake)
    (tmp_path / "photo.png").write_bytes(sample_png())
    script = "/file photo.png\nwhat is in it?\n/help\n"  # then end of input (Ctrl-D)

    llm_fake.reply("plan", DETECT, DETECT)
    llm_fake.reply("answer", "A cat.", "A cat.")
    code, here, here_err = await run_chat(env, tmp_path, script, "--conversation", "a")
    assert code == 0, here_err
    worker = await serving(env, tmp_path, workers)
    code, there, there_err = await run_chat(env, tmp_path, script, "--conversation", "b")
    assert code == 0, there_err
    assert worker.commands() == 1, worker.log

    assert there == here  # the prompts and the answer
    assert "A cat." in there
    assert "attached photo.png" in there_err and "/forget" in there_err
    calls = hf_fake.calls_for(model_a("object-detection"))
    assert len(calls) == 2 and calls[1].body == sample_png()


# -- when the worker is not used ---------------------------------------------------------


async def test_a_worker_started_with_other_settings_is_not_used(
    tmp_path: Path, llm_fake: FakeLLM, hf_fake: FakeHF, workers: list[Worker]
) -> None:
    serve_all(hf_fake)
    env = env_for(tmp_path, llm_fake, hf_fake)
    worker = await serving(env, tmp_path, workers)

    other = dict(env, TOP_K="3", LOG_LEVEL="DEBUG")
    llm_fake.reply("plan", DRAW)
    code, out, err = await process_env.run_bot("ask", "draw", env=other, cwd=tmp_path)
    assert code == 0, err
    assert "image.png" in out  # answered here, in this process
    logged = (tmp_path / "logs" / "bot.log").read_text(encoding="utf-8")  # LOG_LEVEL=DEBUG
    assert "runs here, not in a CLI worker" in logged and "other settings" in logged
    assert worker.commands() == 0

    # a .env in the directory is part of the settings too
    (tmp_path / ".env").write_text("TOP_K=4\n")
    code, _, _ = await process_env.run_bot("ask", "draw", env=env, cwd=tmp_path)
    assert code == 0 and worker.commands() == 0
    (tmp_path / ".env").unlink()
    code, _, _ = await process_env.run_bot("ask", "draw", env=env, cwd=tmp_path)
    assert code == 0 and worker.commands() == 1


async def test_a_worker_of_other_code_is_not_used_and_retires(
    tmp_path: Path, llm_fake: FakeLLM, hf_fake: FakeHF, workers: list[Worker]
) -> None:
    """The project copied, its worker started, then a file of it changed."""
    copy = tmp_path / "project"
    for package in worker_client.PACKAGES:
        shutil.copytree(
            worker_client.ROOT / package,
            copy / package,
            ignore=shutil.ignore_patterns("__pycache__"),
        )
    serve_all(hf_fake)
    env = env_for(tmp_path, llm_fake, hf_fake, PYTHONPATH=str(copy))
    worker = await serving(env, tmp_path, workers)
    code, _, err = await process_env.run_bot("ask", "hello", env=env, cwd=tmp_path)
    assert code == 0, err
    assert worker.commands() == 1

    edited = copy / "core" / "prompts" / "__init__.py"
    st = edited.stat()
    os.utime(edited, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))
    code, _, err = await process_env.run_bot("ask", "hello", env=env, cwd=tmp_path)
    assert code == 0, err
    assert worker.commands() == 1  # run here
    assert await worker.exited() == 0  # a worker no CLI can use any more stops
    assert "code changed" in worker.log
    assert not (tmp_path / "cli.sock").exists()


async def test_a_socket_other_users_may_open_is_not_used(
    tmp_path: Path, llm_fake: FakeLLM, hf_fake: FakeHF
) -> None:
    serve_all(hf_fake)
    env = env_for(tmp_path, llm_fake, hf_fake)
    connections = 0

    async def listener(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal connections
        connections += 1
        writer.close()

    path = tmp_path / "cli.sock"
    server = await asyncio.start_unix_server(listener, path=str(path))
    async with server:
        path.chmod(0o666)
        llm_fake.reply("plan", DRAW)
        code, out, err = await process_env.run_bot("ask", "draw", env=env, cwd=tmp_path)
    assert code == 0, err
    assert "image.png" in out
    assert connections == 0


def test_a_socket_of_another_user_or_open_to_others_is_refused(tmp_path: Path) -> None:
    uid = os.getuid()

    def st(mode: int, owner: int) -> os.stat_result:
        return os.stat_result((mode, 1, 1, 1, owner, 0, 0, 0, 0, 0))

    assert worker_client.socket_refusal(st(stat.S_IFSOCK | 0o600, uid), uid) is None
    assert "uid" in str(worker_client.socket_refusal(st(stat.S_IFSOCK | 0o600, uid + 1), uid))
    assert "mode 0660" in str(worker_client.socket_refusal(st(stat.S_IFSOCK | 0o660, uid), uid))
    assert "not a socket" in str(worker_client.socket_refusal(st(stat.S_IFREG | 0o600, uid), uid))


# -- the worker's life -----------------------------------------------------------------


async def test_a_stale_socket_is_removed_and_a_second_worker_refused(
    tmp_path: Path, llm_fake: FakeLLM, hf_fake: FakeHF, workers: list[Worker]
) -> None:
    path = tmp_path / "cli.sock"
    stale = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    stale.bind(str(path))  # a worker killed with -9 leaves its socket file
    stale.close()
    path.chmod(0o600)
    env = env_for(tmp_path, llm_fake, hf_fake)

    llm_fake.reply("plan", DRAW)
    code, _, err = await process_env.run_bot("ask", "draw", env=env, cwd=tmp_path)
    assert code == 0, err  # nobody listens: run here

    worker = await serving(env, tmp_path, workers)
    assert "removing a stale CLI worker socket" in worker.log
    assert stat.S_IMODE(path.stat().st_mode) == 0o600

    code, _out, err = await process_env.run_bot("serve", env=env, cwd=tmp_path)
    assert code == 1
    assert err.count("\n") == 1 and "already serving" in err and "Traceback" not in err
    assert f"pid {worker.proc.pid}" in err
    code, _, err = await process_env.run_bot("ask", "hi", env=env, cwd=tmp_path)
    assert code == 0, err
    assert worker.commands() == 1  # the first worker still serves


async def test_the_worker_exits_when_idle_and_on_sigterm(
    tmp_path: Path, llm_fake: FakeLLM, hf_fake: FakeHF, workers: list[Worker]
) -> None:
    env = env_for(tmp_path, llm_fake, hf_fake, CLI_WORKER_IDLE="0.2")
    worker = await serving(env, tmp_path, workers)
    assert await worker.exited() == 0
    assert "no command for 0.2s; stopping" in worker.log
    assert not (tmp_path / "cli.sock").exists()

    env["CLI_WORKER_IDLE"] = "0"  # never idle: until stopped
    worker = await serving(env, tmp_path, workers)
    worker.proc.send_signal(signal.SIGTERM)
    assert await worker.exited() == 143
    assert not (tmp_path / "cli.sock").exists()


async def test_a_worker_killed_mid_request_is_one_line_error(
    tmp_path: Path, llm_fake: FakeLLM, hf_fake: FakeHF, workers: list[Worker]
) -> None:
    env = env_for(tmp_path, llm_fake, hf_fake)
    worker = await serving(env, tmp_path, workers)
    llm_fake.gate = asyncio.Event()  # the planning call waits here
    ask = asyncio.ensure_future(process_env.run_bot("ask", "hello", env=env, cwd=tmp_path))
    try:
        await llm_fake.wait_in_flight(within=WITHIN)
        worker.proc.kill()
        code, _, err = await ask
    finally:
        llm_fake.gate.set()
    assert code == 1
    last = err.splitlines()[-1]
    assert last == (
        f"error: the CLI worker (pid {worker.proc.pid}) stopped before the command finished; "
        "run it again"
    )
    assert err.count("error:") == 1 and "Traceback" not in err


async def test_a_terminal_that_leaves_stops_its_request(
    tmp_path: Path, llm_fake: FakeLLM, hf_fake: FakeHF, workers: list[Worker]
) -> None:
    """Ctrl-C in ``ask``: the worker stops the request, closes its job and
    serves the conversation's next request."""
    env = env_for(tmp_path, llm_fake, hf_fake)
    worker = await serving(env, tmp_path, workers)
    gate = llm_fake.gate = asyncio.Event()
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "bot", "ask", "hello",
        env=env, cwd=tmp_path, stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    await llm_fake.wait_in_flight(within=WITHIN)
    proc.send_signal(signal.SIGINT)
    await asyncio.wait_for(proc.communicate(), WITHIN)
    assert proc.returncode == 130
    await worker.logged("its terminal left; stopped")
    gate.set()
    llm_fake.gate = None
    code, _, err = await process_env.run_bot("ask", "again", env=env, cwd=tmp_path)
    assert code == 0, err  # the same conversation is not held up
    assert worker.commands() == 1


# -- the two sides agree --------------------------------------------------------------


@pytest.mark.parametrize(
    "env",
    [
        {},
        {"DATA_DIR": "~/bot-data"},
        {"data_dir": "/srv/bot"},
        {"CLI_SOCKET": "/run/user/bot.sock", "DATA_DIR": "/srv/bot"},
    ],
)
def test_the_cli_finds_the_socket_the_worker_listens_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, env: dict[str, str]
) -> None:
    monkeypatch.chdir(tmp_path)
    for name in ("DATA_DIR", "CLI_SOCKET"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    origin = worker_client.Origin.here()
    assert worker_client.socket_path(origin) == socket_path(Settings())
    assert worker_client.APP_NAME == APP_NAME


def test_the_cli_reads_data_dir_from_dotenv_and_an_earlier_versions_data(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("DATA_DIR", raising=False)
    monkeypatch.delenv("CLI_SOCKET", raising=False)
    (tmp_path / "data" / "media").mkdir(parents=True)  # an earlier version's ./data
    assert worker_client.socket_path(worker_client.Origin.here()) == socket_path(Settings())
    (tmp_path / ".env").write_text('export DATA_DIR="/srv/from dotenv"  # here\n')
    path = worker_client.socket_path(worker_client.Origin.here())
    assert path == socket_path(Settings()) == Path("/srv/from dotenv/cli.sock")


def test_the_fingerprint_covers_the_settings_variables(tmp_path: Path) -> None:
    names, prefixes = setting_names(), ("HF_",)
    assert "OPENAI_API_KEY" in names and "DISCORD_TOKEN" in names
    assert "CLI_WORKER_IDLE" not in names  # how long the worker waits changes no request

    def fp(environ: dict[str, str], dotenv: bytes | None = None, cwd: str = "/x") -> str:
        return worker_client.settings_fingerprint(
            worker_client.Origin(cwd, environ, dotenv), names, prefixes
        )

    base = fp({"TOP_K": "5", "PATH": "/bin"})
    assert fp({"TOP_K": "5", "PATH": "/usr/bin"}) == base  # not a setting
    assert fp({"TOP_K": "5", "PATH": "/bin", "CLI_WORKER_IDLE": "5"}) == base
    assert fp({"TOP_K": "6", "PATH": "/bin"}) != base
    assert fp({"top_k": "5", "PATH": "/bin"}) != base  # read case-insensitively
    assert fp({"TOP_K": "5", "HF_HOME": "/h"}) != base
    assert fp({"TOP_K": "5"}, dotenv=b"TOP_K=5\n") != base
    assert fp({"TOP_K": "5"}, cwd="/y") != base


def test_messages_are_checked_on_the_wire() -> None:
    line = wire.encode(wire.SentFile.of("a.png", 3, b"abc"))
    sent = wire.decode(line)
    assert isinstance(sent, wire.SentFile) and sent.content() == b"abc"
    assert wire.decode(wire.encode(wire.Exit(2))) == wire.Exit(2)
    for bad in (
        b'{"type": "exit", "code": "2"}\n',
        b'{"type": "exit", "code": true}\n',
        b'{"type": "exit"}\n',
        b'{"type": "nope"}\n',
        b"[1, 2]\n",
        b'{"type": "hello", "protocol": 1, "pid": 1, "names": [1], "prefixes": []}\n',
    ):
        with pytest.raises(wire.ProtocolError):
            wire.decode(bad)


EVERY_MESSAGE: list[wire.Message] = [
    wire.Hello(wire.PROTOCOL, 42, ["TOP_K", "HF_TOKEN"], ["HF_"]),
    wire.Handshake("abc:def"),
    wire.Welcome(False, "other settings", 25 * 1024 * 1024),
    wire.SentFile.of("a.png", 3, b"abc"),
    wire.SentFile.of("big.mp4", 10**9, None),
    wire.SentFile.of("missing.png", None, None),
    wire.Ask("draw a cat", "default", True, "ada"),
    wire.Chat("default", "ada"),
    wire.Line("/file a.png"),
    wire.EndOfInput(),
    wire.Output("err", "[planning] …\n"),
    wire.Prompt("you> "),
    wire.Exit(130),
]


def test_every_message_round_trips_on_both_sides() -> None:
    assert {type(m) for m in EVERY_MESSAGE} == set(wire.CLASSES)
    for message in EVERY_MESSAGE:
        line = wire.encode(message)
        assert json.loads(line)["type"] == message.type
        assert wire.decode(line) == message  # the worker's side: pydantic
        assert wire.unchecked(line) == message  # the CLI's side: no pydantic


def test_a_malformed_message_says_what_is_wrong() -> None:
    def why(line: bytes) -> str:
        with pytest.raises(wire.ProtocolError) as e:
            wire.decode(line)
        return str(e.value)

    assert why(b'{"type": "exit", "code": "2"}\n') == "exit.code: Input should be a valid integer"
    assert why(b'{"type": "exit"}\n') == "exit.code: Field required"
    assert why(b'{"type": "exit", "code": 1, "x": 1}\n').startswith("exit.x: ")
    assert why(b'{"type": "output", "stream": "log", "text": ""}\n').startswith("output.stream: ")
    assert why(b'{"type": "nope"}\n') == 'not a message: b\'{"type": "nope"}\\n\''
    assert why(b"not json\n") == "not a message: b'not json\\n'"
    # the CLI's side checks the shape: the type, and exactly the class's fields
    for bad in (b'{"type": "nope"}\n', b"[1]\n", b'{"type": "exit"}\n', b'{"type": "eof", "x": 1}'):
        with pytest.raises(wire.ProtocolError):
            wire.unchecked(bad)


async def test_sigterm_lets_a_running_ask_finish_and_ends_a_waiting_chat(
    tmp_path: Path, llm_fake: FakeLLM, hf_fake: FakeHF, workers: list[Worker]
) -> None:
    env = env_for(tmp_path, llm_fake, hf_fake)
    worker = await serving(env, tmp_path, workers)
    chat = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "bot", "chat", "--conversation", "idle",
        env=env, cwd=tmp_path, stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    assert chat.stdout is not None
    assert await asyncio.wait_for(chat.stdout.readexactly(5), WITHIN) == b"you> "

    gate = llm_fake.gate = asyncio.Event()
    llm_fake.reply("answer", "Done after all.")
    ask = asyncio.ensure_future(process_env.run_bot("ask", "hello", env=env, cwd=tmp_path))
    await llm_fake.wait_in_flight(within=WITHIN)
    worker.proc.send_signal(signal.SIGTERM)
    await worker.logged("CLI worker stopping: finishing 1 running request(s)")
    gate.set()
    code, out, err = await ask
    assert code == 0, err
    assert "Done after all." in out  # drained: answered before the worker stopped
    assert await worker.exited() == 143

    _, chat_err = await asyncio.wait_for(chat.communicate(), WITHIN)
    assert chat.returncode == 1
    assert chat_err.decode().splitlines()[-1].startswith("error: the CLI worker (pid ")
