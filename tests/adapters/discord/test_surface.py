"""A job's surface rebuilt from its stored payload (as a resumed job's is):
an interaction is still answered through its webhook, privately too."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from adapters.discord.surface import DiscordSurface
from tests.adapters.discord.conftest import Harness
from tests.fakes.discord_fake import APP_ID, CHANNEL_ID, USER_ID

EPHEMERAL = 64
NOW = datetime(2026, 1, 5, 12, 0, tzinfo=UTC)


@dataclass
class StoredJob:
    """A job as the store hands it to its runner (the core's Job protocol)."""

    payload: dict[str, Any]
    status_ref: dict[str, Any] | None = None
    checkpoint: dict[str, Any] | None = None
    id: int = 1
    kind: str = "discord"
    request_id: str = "r-surface"
    owner: str = "test"
    resumed: bool = False
    inputs_stored: bool = False
    refs: list[dict[str, Any]] = field(default_factory=list)

    def now(self) -> datetime:
        return NOW

    async def set_status_ref(self, ref: dict[str, Any]) -> None:
        self.status_ref = ref
        self.refs.append(ref)

    async def save_checkpoint(self, data: dict[str, Any]) -> None:
        self.checkpoint = data


def interaction_job(interaction: dict[str, Any]) -> StoredJob:
    return StoredJob(
        {
            "via": "interaction",
            "app_id": str(APP_ID),
            "interaction_id": interaction["id"],
            "token": interaction["token"],
            "token_expires": (NOW + timedelta(minutes=10)).isoformat(),
            "channel_id": str(CHANNEL_ID),
            "user_id": str(USER_ID),
            "upload_limit": 10 * 1024 * 1024,
        }
    )


async def test_a_stored_interaction_is_answered_through_its_webhook(harness: Harness) -> None:
    fake = harness.fake
    interaction = fake.interaction("ask", {"prompt": "hi"})
    token = str(interaction["token"])
    job = interaction_job(interaction)
    surface = DiscordSurface(harness.bot, job)
    assert surface.via_webhook

    await surface.edit_status("⏳ working")
    await surface.tell_privately("only you see this")

    [edit] = fake.edits(token)
    assert edit.content == "⏳ working"
    assert job.status_ref == {"message_id": int(fake.original(token))}
    [private] = fake.followups(token)
    assert private.content == "only you see this"
    assert private.flags & EPHEMERAL
    assert fake.find("POST", rf"^/channels/{CHANNEL_ID}/messages$") == []  # not in the channel
