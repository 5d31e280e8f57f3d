"""The buttons under an answer — Run again, Details, Delete — pressed through
discord.py's own dispatch (a component INTERACTION_CREATE for a message the
fake Discord server kept), also on a new client after a restart.  Assertions
are on what the fake Discord server received."""

from __future__ import annotations

import re
from pathlib import Path

from adapters.discord.buttons import NOT_YOURS_DELETE, b36
from tests.adapters.discord.conftest import Harness, config, running_bot
from tests.adapters.discord.helpers import plan, step
from tests.fakes.agent_fixture import AgentEnv, model_a, model_b, open_agent_env
from tests.fakes.discord_fake import CHANNEL_ID, USER_ID, FakeDiscord
from tests.fakes.samples import sample_png

EPHEMERAL = 64
MANAGE_MESSAGES = 1 << 13


async def answered(h: Harness, prompt: str = "draw a fox") -> tuple[dict[str, object], str]:
    """An /ask answered with one drawing; its payload and the answer's message id."""
    h.env.llm.reply("plan", plan(step(0, "text-to-image", text="a fox")))
    h.env.llm.reply("answer", "Here is your fox.")
    p = await h.interact(h.fake.interaction("ask", {"prompt": prompt}))
    [answer] = h.fake.followups(p["token"])
    assert answer.message_id is not None
    return p, answer.message_id


def button(fake: FakeDiscord, message_id: str, prefix: str) -> str:
    [found] = [c for c in fake.buttons(message_id) if c.startswith(prefix)]
    return found


async def test_an_answer_carries_run_again_details_and_delete(harness: Harness) -> None:
    h, fake = harness, harness.fake
    p, answer = await answered(h)
    again, details, delete = fake.buttons(answer)
    assert again.startswith("hg:again:") and details == again.replace("again", "details")
    # Delete names who asked and the status message (the interaction's own)
    status = fake.original(p["token"])
    assert delete == f"hg:delete:{b36(USER_ID)}:{b36(int(status))}"
    labels = [c["label"] for row in fake.messages[answer]["components"] for c in row["components"]]
    assert labels == ["Run again", "Details", "Delete"]


async def test_run_again_runs_the_same_plan_on_the_next_model(harness: Harness) -> None:
    h, fake = harness, harness.fake
    _, answer = await answered(h)
    assert len(h.env.hf.calls_for(model_a("text-to-image"))) == 1
    bob = fake.user(fake.next_id(), "bob")
    h.env.llm.reply("answer", "Another fox.")
    llm_calls = len(h.env.llm.calls())
    click = await h.click(answer, button(fake, answer, "hg:again:"), user=bob)

    assert [c.json for c in fake.callbacks(click["id"])] == [{"type": 5}]  # a public "thinking…"
    assert len(h.env.hf.calls_for(model_b("text-to-image"))) == 1  # the next candidate
    assert len(h.env.hf.calls_for(model_a("text-to-image"))) == 1  # not again
    # the same plan, no planning or selection call: only the answer
    assert [c for c in h.env.llm.calls()[llm_calls:]] == h.env.llm.calls("answer")[1:]
    final = fake.edits(click["token"])[-1].content or ""
    assert final.startswith("✅ **Done") and f"`{model_b('text-to-image')}`" in final
    [again] = fake.followups(click["token"])
    assert again.content == "Another fox." and [f.filename for f in again.files]
    assert fake.buttons(again.message_id or "")[0].startswith("hg:again:")  # buttons again

    # and once more: back to the first (the ranking wraps round)
    second = await h.click(again.message_id or "", button(fake, again.message_id or "", "hg:a"))
    assert fake.followups(second["token"])
    assert len(h.env.hf.calls_for(model_a("text-to-image"))) == 2


async def test_run_again_works_on_the_files_the_person_sent(harness: Harness) -> None:
    h, fake = harness, harness.fake
    upload = fake.attachment("photo.png", sample_png(), "image/png")
    h.env.llm.reply("plan", plan(step(0, "image-classification", image="photo.png")))
    p = await h.interact(
        fake.interaction("ask", {"prompt": "what is this?"}, attachments={"file1": upload})
    )
    [answer] = fake.followups(p["token"])
    click = await h.click(answer.message_id or "", button(fake, answer.message_id or "", "hg:a"))
    assert fake.followups(click["token"])
    [first] = h.env.hf.calls_for(model_a("image-classification"))
    [again] = h.env.hf.calls_for(model_b("image-classification"))
    assert again.body == first.body == sample_png()  # the same photo, from the store
    assert fake.cdn_requests == [f"{upload['id']}/photo.png"]  # downloaded once


async def test_details_show_the_plan_models_timings_and_usage_privately(harness: Harness) -> None:
    h, fake = harness, harness.fake
    _, answer = await answered(h)
    click = await h.click(answer, button(fake, answer, "hg:details:"))
    [cb] = fake.callbacks(click["id"])
    assert cb.json == {"type": 5, "data": {"flags": EPHEMERAL}}
    [shown] = fake.followups(click["token"])
    text = shown.content or ""
    assert shown.flags & EPHEMERAL
    assert "> draw a fox" in text and "Plan (1 task)" in text
    assert f"✅ 0. text-to-image · `{model_a('text-to-image')}`" in text
    assert "planning" in text and "execution" in text and "total" in text  # the timings
    assert re.search(r"Language model: [23] calls, [\d,]+ tokens in, [\d,]+ out", text)


async def test_delete_by_the_requester_removes_the_answer_and_its_status(
    harness: Harness,
) -> None:
    h, fake = harness, harness.fake
    p, answer = await answered(h)
    status = fake.original(p["token"])
    click = await h.click(answer, button(fake, answer, "hg:delete:"))
    assert [c.json for c in fake.callbacks(click["id"])] == [{"type": 6}]  # acknowledged
    deleted = {c.path for c in fake.find("DELETE", r"^/channels/")}
    assert deleted == {
        f"/channels/{CHANNEL_ID}/messages/{answer}",
        f"/channels/{CHANNEL_ID}/messages/{status}",
    }
    assert answer not in fake.messages and status not in fake.messages
    assert fake.followups(click["token"]) == []  # nothing else said


async def test_delete_by_someone_else_is_refused_privately_but_a_moderator_may(
    harness: Harness,
) -> None:
    h, fake = harness, harness.fake
    _, answer = await answered(h)
    bob = fake.user(fake.next_id(), "bob")
    delete = button(fake, answer, "hg:delete:")

    refused = await h.click(answer, delete, user=bob)
    [cb] = fake.callbacks(refused["id"])
    assert cb.json["type"] == 4 and cb.json["data"]["flags"] == EPHEMERAL
    assert cb.json["data"]["content"] == f"❌ {NOT_YOURS_DELETE}"
    assert fake.find("DELETE", r"^/channels/") == [] and answer in fake.messages

    await h.click(answer, delete, user=bob, permissions=MANAGE_MESSAGES)
    assert answer not in fake.messages


async def test_buttons_on_an_old_message_work_on_a_new_client_after_a_restart(
    discord_fake: FakeDiscord, agent_env: AgentEnv, tmp_path: Path
) -> None:
    fake = discord_fake
    async with running_bot(agent_env.agent) as bot:
        _, answer = await answered(Harness(fake, bot, agent_env))

    # a new process: a new agent on the same store, a new client
    async with (
        open_agent_env(tmp_path, agent_env.llm, agent_env.hf) as env,
        running_bot(env.agent) as bot,
    ):
        h = Harness(fake, bot, env)
        details = await h.click(answer, button(fake, answer, "hg:details:"))
        assert model_a("text-to-image") in (fake.followups(details["token"])[0].content or "")

        env.llm.reply("answer", "A fox from the other model.")
        again = await h.click(answer, button(fake, answer, "hg:again:"))
        [reply] = fake.followups(again["token"])
        assert reply.content == "A fox from the other model."
        assert len(env.hf.calls_for(model_b("text-to-image"))) == 1

        await h.click(answer, button(fake, answer, "hg:delete:"))
        assert answer not in fake.messages


async def test_a_button_where_the_bot_is_not_allowed_is_refused_privately(
    discord_fake: FakeDiscord, agent_env: AgentEnv
) -> None:
    fake = discord_fake
    async with running_bot(agent_env.agent) as bot:
        _, answer = await answered(Harness(fake, bot, agent_env))
    from adapters.discord.access import AccessPolicy

    denied = AccessPolicy(denied_channels=frozenset({CHANNEL_ID}))
    async with running_bot(agent_env.agent, config(access=denied)) as bot:
        h = Harness(fake, bot, agent_env)
        click = await h.click(answer, button(fake, answer, "hg:again:"))
    [cb] = fake.callbacks(click["id"])
    assert cb.json["type"] == 4 and cb.json["data"]["flags"] == EPHEMERAL
    assert cb.json["data"]["content"] == "❌ I'm not enabled in this channel."
    assert len(agent_env.hf.calls_for(model_b("text-to-image"))) == 0


async def test_a_request_the_store_no_longer_has_is_refused_privately(harness: Harness) -> None:
    h, fake = harness, harness.fake
    _, answer = await answered(h)
    await h.interact(fake.interaction("forget", permissions=MANAGE_MESSAGES))
    click = await h.click(answer, button(fake, answer, "hg:again:"))
    [cb] = fake.callbacks(click["id"])
    assert cb.json["type"] == 4 and cb.json["data"]["flags"] == EPHEMERAL
    assert "no longer have that request" in cb.json["data"]["content"]
