"""@mentions and DMs end to end, through discord.py's own MESSAGE_CREATE parsing."""

from __future__ import annotations

from core.types import ConversationKey
from tests.adapters.discord.conftest import Harness
from tests.adapters.discord.helpers import plan, step
from tests.fakes.agent_fixture import model_a
from tests.fakes.discord_fake import BOT_ID, CHANNEL_ID, GUILD_ID
from tests.fakes.samples import sample_png

CHANNEL_KEY = ConversationKey("discord", str(GUILD_ID), str(CHANNEL_ID), None)


async def test_mention_replies_in_place_with_status_typing_and_files(harness: Harness) -> None:
    h, fake = harness, harness.fake
    h.env.llm.reply("plan", plan(step(0, "image-to-image", image="photo.png", text="blue")))
    h.env.llm.reply("answer", "Here it is: edited.png")
    upload = fake.attachment("photo.png", sample_png(), "image/png")
    m = await h.post(fake.message(f"<@{BOT_ID}> make photo.png blue", attachments=[upload]))

    assert fake.find("POST", rf"^/channels/{CHANNEL_ID}/typing$")
    assert fake.cdn_requests == [f"{upload['id']}/photo.png"]
    planned = h.env.llm.calls("plan")[0]["messages"]
    assert "make photo.png blue" in str(planned) and f"<@{BOT_ID}>" not in str(planned)

    status, answer = fake.find("POST", rf"^/channels/{CHANNEL_ID}/messages$")
    for post in (status, answer):  # both reply to the user's message
        assert post.json["message_reference"]["message_id"] == int(m["id"])
    assert status.json["allowed_mentions"] == {"parse": [], "replied_user": False}
    edits = fake.find("PATCH", rf"^/channels/{CHANNEL_ID}/messages/\d+$")
    assert edits and (edits[-1].content or "").startswith("✅ **Done")
    assert f"`{model_a('image-to-image')}`" in (edits[-1].content or "")
    assert answer.content == "Here it is: edited.png"
    assert [f.filename for f in answer.files] == ["edited.png"]


async def test_messages_not_for_the_bot_are_ignored(harness: Harness) -> None:
    h, fake = harness, harness.fake
    before = len(fake.calls)
    await h.post(fake.message("just chatting", mention_bot=False))
    bot_author = fake.user(fake.next_id(), "otherbot") | {"bot": True}
    await h.post(fake.message(f"<@{BOT_ID}> hi", author=bot_author))
    assert fake.calls[before:] == [] and h.env.llm.calls() == []


async def test_a_replayed_message_is_answered_once(harness: Harness) -> None:
    h, fake = harness, harness.fake
    payload = fake.message(f"<@{BOT_ID}> hello")
    await h.post(payload)
    await h.post(payload)  # the gateway replays it after a resume
    assert len(h.env.llm.calls("plan")) == 1
    assert len(fake.find("POST", rf"^/channels/{CHANNEL_ID}/messages$")) == 2  # status + answer


async def test_dm_needs_no_mention_and_is_keyed_as_dm(harness: Harness) -> None:
    h, fake = harness, harness.fake
    dm_id = fake.next_id()
    h.env.llm.reply("answer", "Hi there!")
    await h.post(fake.message("hello bot", channel_id=dm_id, guild_id=None, mention_bot=False))
    posts = fake.find("POST", rf"^/channels/{dm_id}/messages$")
    assert posts[-1].content == "Hi there!"
    assert await h.env.agent.forget(ConversationKey("discord", "dm", str(dm_id), None)) == 2


async def test_mention_in_a_thread_uses_the_thread_key_under_its_parent(harness: Harness) -> None:
    h, fake = harness, harness.fake
    thread_id = fake.next_id()
    guild = fake.guild(channels=[fake.text_channel()], threads=[fake.thread(thread_id)])
    h.bot._connection.parse_guild_create(guild)  # type: ignore[arg-type]
    await h.post(fake.message(f"<@{BOT_ID}> hello", channel_id=thread_id))
    assert fake.find("POST", rf"^/channels/{thread_id}/messages$")
    thread_key = ConversationKey("discord", str(GUILD_ID), str(CHANNEL_ID), str(thread_id))
    assert await h.env.agent.forget(CHANNEL_KEY) == 0
    assert await h.env.agent.forget(thread_key) == 2


async def test_failure_in_a_mention_is_answered_in_place(harness: Harness) -> None:
    h, fake = harness, harness.fake
    h.env.llm.fail(500, times=5)
    await h.post(fake.message(f"<@{BOT_ID}> anything"))
    [status] = fake.find("POST", rf"^/channels/{CHANNEL_ID}/messages$")  # no other post
    assert status.json["message_reference"]  # in place, in reply to the person
    edits = fake.find("PATCH", rf"^/channels/{CHANNEL_ID}/messages/\d+$")
    final = edits[-1].content or ""
    assert final.startswith("❌ The language model") and "HTTP 500" in final and len(final) < 500
