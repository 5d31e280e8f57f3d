"""``/ask``'s platform round trips are beside its turn, not in front of it:
the planning call starts while the defer and the status message are still
on their way, and nothing reaches the interaction before its defer, nor is
shown or posted before the status message (discord.py on the fake Discord
and the fake language model; the order is the fake's recorded order)."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest

from tests.adapters.discord.conftest import Harness, settle
from tests.fakes.discord_fake import DiscordCall, FakeDiscord
from tests.fakes.openai_fake import answering, translation_plan

CALLBACK = r"^/interactions/\d+/[^/]+/callback$"
ORIGINAL = r"/messages/@original$"


def of_interaction(fake: FakeDiscord, p: dict[str, Any]) -> list[DiscordCall]:
    """The calls about the interaction (its callback, its webhook), in the order Discord got them."""
    return [c for c in fake.calls if p["id"] in c.path or p["token"] in c.path]


def start(h: Harness, prompt: str) -> dict[str, Any]:
    """Deliver ``/ask prompt`` without waiting for it."""
    p = h.fake.interaction("ask", {"prompt": prompt})
    h.bot._connection.parse_interaction_create(p)  # type: ignore[arg-type]
    return p


async def test_planning_starts_while_the_status_message_is_being_posted(harness: Harness) -> None:
    h, fake, llm = harness, harness.fake, harness.env.llm
    status_posted = fake.hold("PATCH", ORIGINAL)
    llm.gate = asyncio.Event()
    llm.reply("plan", translation_plan())
    asked, answer = answering("Bonjour")
    llm.reply("answer", answer)

    p = start(h, "translate hi")
    await llm.wait_in_flight(1)  # the planning call is at the model...
    assert fake.edits(p["token"]) == []  # ...and the status message is not out yet
    llm.gate.set()
    await asyncio.wait_for(asked.wait(), 20)  # the whole turn ran meanwhile
    assert fake.edits(p["token"]) == fake.followups(p["token"]) == []  # nothing before the status
    status_posted.set()
    await settle()

    callback, status, *rest = of_interaction(fake, p)
    assert callback.json == {"type": 5}
    assert status.method == "PATCH" and "translate" not in (status.content or "")
    assert [c.content for c in rest if c.method == "POST"] == ["Bonjour"]  # one answer, after
    assert (rest[-1].content or "").startswith("✅")


async def test_planning_starts_while_the_interaction_is_being_deferred(harness: Harness) -> None:
    h, fake, llm = harness, harness.fake, harness.env.llm
    deferred = fake.hold("POST", CALLBACK)
    llm.gate = asyncio.Event()
    llm.reply("plan", translation_plan())
    asked, answer = answering("Bonjour")
    llm.reply("answer", answer)

    p = start(h, "translate hi")
    await llm.wait_in_flight(1)  # the planning call is at the model while the defer waits
    assert [c.path for c in fake.held] == [f"/interactions/{p['id']}/{p['token']}/callback"]
    llm.gate.set()
    await asyncio.wait_for(asked.wait(), 20)
    assert of_interaction(fake, p) == []  # nothing reached the interaction before its defer
    assert [c.path for c in fake.held] == [f"/interactions/{p['id']}/{p['token']}/callback"]
    deferred.set()
    await settle()

    callback, status, *rest = of_interaction(fake, p)
    assert callback.json == {"type": 5}  # the defer first, then the status, then the answer
    assert status.method == "PATCH" and status.path.endswith("/@original")
    assert [c.content for c in rest if c.method == "POST"] == ["Bonjour"]
    assert (rest[-1].content or "").startswith("✅")
    assert h.bot.deferring == {}


async def test_a_status_message_that_cannot_be_posted_stops_the_turn(
    harness: Harness, caplog: pytest.LogCaptureFixture
) -> None:
    h, fake, llm = harness, harness.fake, harness.env.llm
    llm.gate = asyncio.Event()  # the planning call, if it starts, waits
    llm.reply("plan", translation_plan())
    llm.reply("answer", "Bonjour")
    fake.fail("PATCH", ORIGINAL, 403, code=50001)  # the status message is refused once

    with caplog.at_level(logging.INFO, logger="adapters.chat.turn"):
        p = start(h, "translate hi")
        await settle()  # the request's job has ended
    llm.gate.set()

    callback, refused, sorry = of_interaction(fake, p)
    assert callback.json == {"type": 5}
    assert refused.method == sorry.method == "PATCH"  # the status, then the sorry in its place
    assert "something went wrong" in (sorry.content or "")
    assert llm.calls("answer") == []  # the turn stopped
    assert sum("could not be posted" in r.getMessage() for r in caplog.records) == 1
