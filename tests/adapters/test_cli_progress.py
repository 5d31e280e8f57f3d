"""The terminal, in process: status lines on stderr (each change once, the
"still waiting" notices each time), the answer printed on stdout as the
model writes it, and the chat's own commands, which never reach the model."""

from __future__ import annotations

import io
import time
from dataclasses import replace
from pathlib import Path

from adapters.chat.board import Board
from adapters.cli import RENDERER, TERMINAL, TerminalSurface, ask, chat
from core.types import Stage, StageStarted, StillWaiting
from tests.fakes.agent_fixture import AgentEnv, open_agent_env
from tests.fakes.hf_fake import FakeHF
from tests.fakes.openai_fake import FakeLLM


class Writes(io.StringIO):
    """stdout that remembers each write and when it came."""

    def __init__(self) -> None:
        super().__init__()
        self.writes: list[tuple[float, str]] = []

    def write(self, s: str) -> int:
        self.writes.append((time.monotonic(), s))
        return super().write(s)


async def ask_in(env: AgentEnv, text: str, out: io.StringIO, err: io.StringIO) -> int:
    """``python -m bot ask TEXT`` in process (conversation "t")."""
    return await ask(
        env.agent, text, files=[], conversation="t", as_json=False, max_bytes=1000, out=out, err=err
    )


class Lines:
    """The chat's input, one scripted line after another."""

    def __init__(self, *lines: str) -> None:
        self.lines = list(lines)

    async def __call__(self, prompt: str) -> str:
        if not self.lines:
            raise EOFError
        return self.lines.pop(0)


async def test_each_status_line_is_printed_once_and_every_notice_each_time() -> None:
    err = io.StringIO()
    surface = TerminalSurface(None, err)
    board = Board()
    for event in (
        StageStarted(Stage.PLANNING),
        StillWaiting(Stage.PLANNING, 10.0),
        StillWaiting(Stage.PLANNING, 20.0, attempt=2),
        StageStarted(Stage.PLANNING),
    ):
        board.apply(event)
        await surface.edit_status(RENDERER.status(board, TERMINAL.message_chars))
    assert err.getvalue().splitlines() == [
        "[planning] Reading the conversation and planning",
        "[planning] Still waiting for the language model (10 s)",
        "[planning] Still waiting for the language model (20 s, attempt 2)",
    ]


async def test_ask_shows_that_it_is_still_waiting_and_is_not_limited(
    tmp_path: Path, llm_fake: FakeLLM, hf_fake: FakeHF
) -> None:
    async with open_agent_env(tmp_path, llm_fake, hf_fake, requests_per_user_per_minute=1) as env:
        env.agent.config = replace(env.agent.config, llm_wait_notice=0.2)
        llm_fake.delay = 0.5
        err = io.StringIO()
        for _ in range(2):  # the operator at the terminal is not held to the quota
            code = await ask_in(env, "hello", io.StringIO(), err)
            assert code == 0
    lines = err.getvalue().splitlines()
    assert any(
        line.startswith("[planning] Still waiting for the language model (") for line in lines
    )
    assert any(
        line.startswith("[answering] Still waiting for the language model") for line in lines
    )


async def test_ask_prints_the_answer_as_it_comes(agent_env: AgentEnv) -> None:
    answer = "A fox is a small wild canid.\nIt has a bushy tail and lives in dens."
    agent_env.llm.reply("answer", answer)
    agent_env.llm.stream_chunk_chars = 8
    agent_env.llm.stream_gap = 0.02
    out, err = Writes(), io.StringIO()
    code = await ask_in(agent_env, "what is a fox?", out, err)
    assert code == 0, err.getvalue()
    assert out.getvalue() == answer + "\n"
    pieces = [s for _, s in out.writes if s.strip()]
    assert len(pieces) >= 5  # word by word, not once at the end
    # the first words were on the terminal before the model had sent its last ones
    last_sent = max(at for at, stage, _ in agent_env.llm.streamed if stage == "answer")
    assert out.writes[0][0] < last_sent
    assert "[answering] Writing the answer" in err.getvalue().splitlines()


async def test_a_broken_stream_on_the_terminal_ends_in_the_fallback(agent_env: AgentEnv) -> None:
    agent_env.llm.reply("answer", "Foxes are canids.\nThey live in dens and hunt at night.")
    agent_env.llm.stream_chunk_chars = 5
    agent_env.llm.break_stream(25, stage="answer")
    out, err = io.StringIO(), io.StringIO()
    code = await ask_in(agent_env, "hi", out, err)
    assert code == 1  # the fallback is not a success
    first, second, rest = out.getvalue().split("\n", 2)
    assert (first, second) == ("Foxes are canids.", "They li")  # what had come, then a new line
    assert rest.startswith("Sorry, I could not write an answer")
    assert "stopped in the middle of its answer" in rest and rest.count("Sorry") == 1
    assert "the answer stopped there; what follows replaces it" in err.getvalue()


async def test_a_looping_answer_on_the_terminal_is_replaced_by_what_was_kept(
    agent_env: AgentEnv,
) -> None:
    kept = "A fox is a small wild canid. It lives in a den."
    agent_env.llm.reply("answer", kept + " It lives in a den." * 60)
    agent_env.llm.stream_chunk_chars = 16
    agent_env.llm.stream_gap = 0.002
    out, err = io.StringIO(), io.StringIO()
    code = await ask_in(agent_env, "what is a fox?", out, err)
    assert code == 0, err.getvalue()
    streamed, after = out.getvalue().split("\n", 1)
    assert streamed.startswith(kept + " It lives in a den.")  # what came before the cut
    assert after == kept + "\n"  # then the answer once, as kept
    assert "the answer stopped there; what follows replaces it" in err.getvalue()


async def test_chat_commands_are_listed_and_never_sent_to_the_model(agent_env: AgentEnv) -> None:
    out, err = io.StringIO(), io.StringIO()
    code = await chat(
        agent_env.agent,
        conversation="cmds",
        max_bytes=1000,
        prompt=Lines("/help", "/xyz now", "/file", "/forget", "//etc is a folder", "/quit", "bye"),
        out=out,
        err=err,
    )
    assert code == 0
    said = err.getvalue()
    for usage in ("/help", "/file PATH", "/forget", "/quit"):
        assert usage in said
    assert "unknown command /xyz: /help lists the commands" in said
    assert "usage: /file PATH" in said and "forgot 0 messages" in said
    # only the // message reached the model, without its escape; /quit ended the chat
    (plan,) = agent_env.llm.calls("plan")
    assert "/etc is a folder" in plan["messages"][-1]["content"]
    assert "/xyz" not in str(agent_env.llm.requests) and "bye" not in str(agent_env.llm.requests)
    assert out.getvalue().strip() == "Here is the answer."
