"""A terminal request's job carries the size of the files it attaches
(admission weighs it by them)."""

from __future__ import annotations

import io
import json

import sqlalchemy as sa

from adapters.cli import Terminal, TerminalSurface
from core.store.models import StoredJob
from core.types import Attachment, ConversationKey, Request
from tests.fakes.agent_fixture import AgentEnv
from tests.fakes.samples import sample_png

KEY = ConversationKey("cli", "local", "weights", None)


async def test_a_terminal_request_is_weighed_by_its_files(agent_env: AgentEnv) -> None:
    plan = [{"task": "image-classification", "id": 0, "dep": [-1], "args": {"image": "a.png"}}]
    agent_env.llm.reply("plan", json.dumps(plan))
    terminal = Terminal(agent_env.agent)
    photo = Attachment("a.png", "image/png", sample_png())
    asked = Request(KEY, "me", "what is this?", (photo,), is_admin=True)
    assert await terminal.answer(asked, TerminalSurface(None, io.StringIO())) is not None
    said = Request(KEY, "me", "thanks", is_admin=True)
    assert await terminal.answer(said, TerminalSurface(None, io.StringIO())) is not None
    async with agent_env.agent.repo.db.sessions() as s:
        rows = await s.scalars(sa.select(StoredJob.upload_bytes).order_by(StoredJob.id))
        assert list(rows.all()) == [len(sample_png()), 0]
