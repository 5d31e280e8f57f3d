"""``/plan`` checks its attachments like a request that runs: decoding an
upload is CPU-bound, so it happens in a worker thread, never on the event
loop (a large image would otherwise stall every other conversation)."""

from __future__ import annotations

import threading
from typing import Any

import pytest

import core.previews
from core.types import Attachment, ConversationKey, Request
from tests.fakes.agent_fixture import AgentEnv
from tests.fakes.samples import sample_png

KEY = ConversationKey("cli", "local", "preview", None)


async def test_plan_only_decodes_attachments_off_the_event_loop(
    agent_env: AgentEnv, monkeypatch: pytest.MonkeyPatch
) -> None:
    loop_thread = threading.get_ident()
    seen: list[int] = []
    real = core.previews.inspect_attachment

    def recording(*args: Any, **kwargs: Any) -> Any:
        seen.append(threading.get_ident())
        return real(*args, **kwargs)

    monkeypatch.setattr(core.previews, "inspect_attachment", recording)
    agent_env.llm.reply("plan", "[]")
    request = Request(
        KEY, "u1", "what is in it?", (Attachment("photo.png", "image/png", sample_png()),)
    )
    preview = await agent_env.agent.plan_only(request)
    assert not preview.error, preview.note
    assert seen and all(t != loop_thread for t in seen)


async def test_plan_only_still_refuses_a_file_that_is_not_what_it_claims(
    agent_env: AgentEnv,
) -> None:
    request = Request(KEY, "u1", "look", (Attachment("photo.png", "image/png", b"<html></html>"),))
    preview = await agent_env.agent.plan_only(request)
    assert preview.error
    assert "photo.png" in preview.note
    assert agent_env.llm.calls() == []  # refused before any LLM cost
