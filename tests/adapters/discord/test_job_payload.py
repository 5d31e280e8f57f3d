"""A Discord job's payload: one TypeAdapter (``adapters.discord.jobs.PAYLOAD``)
writes and reads it, and payloads stored by earlier versions still load."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import pytest
from pydantic import ValidationError

from adapters.discord.jobs import (
    PAYLOAD,
    AttachmentRef,
    InteractionPayload,
    MessagePayload,
)
from core.types import PlannedStep

KEY = ("discord", "111", "222", None)
STEPS = (
    PlannedStep(0, "text-to-image", (), {"text": "a cat"}, "acme/t2i", "most downloaded"),
    PlannedStep(1, "image-to-text", (0,), {"image": "<resource>-0"}, None, None, 2.0, 60.0, 0.01),
)
PHOTO = AttachmentRef("photo.png", 1234, "https://cdn.example/photo.png", "image/png")


def stored(payload: InteractionPayload | MessagePayload) -> dict[str, Any]:
    """As the store keeps it: JSON text, read back."""
    data: dict[str, Any] = json.loads(json.dumps(PAYLOAD.dump_python(payload, mode="json")))
    return data


@pytest.mark.parametrize(
    "payload",
    [
        InteractionPayload(
            app_id="9",
            interaction_id="10",
            token="tok",
            token_expires=datetime(2026, 1, 2, 3, 19, tzinfo=UTC),
            channel_id="222",
            guild_id="111",
            key=KEY,
            user_id="5",
            user_name="Ada",
            is_admin=True,
            text="draw a cat",
            files=(PHOTO,),
            upload_limit=10_485_760,
            plan=STEPS,
        ),
        InteractionPayload(
            app_id="9",
            interaction_id="10",
            token="tok",
            token_expires=datetime(2026, 1, 2, 3, 19, tzinfo=UTC),
            channel_id="222",
            guild_id=None,
            key=("discord", "dm", "222", None),
            user_id="5",
        ),
        MessagePayload(
            message_id="77",
            channel_id="222",
            guild_id="111",
            key=("discord", "111", "222", "333"),
            user_id="5",
            user_name="Ada",
            text="what is this?",
            files=(PHOTO,),
            upload_limit=8_388_608,
        ),
    ],
)
def test_a_payload_round_trips(payload: InteractionPayload | MessagePayload) -> None:
    assert PAYLOAD.validate_python(stored(payload)) == payload


def test_the_stored_names_are_the_ones_the_surface_reads() -> None:
    data = stored(
        InteractionPayload(
            app_id="9",
            interaction_id="10",
            token="tok",
            token_expires=datetime(2026, 1, 2, 3, 19, tzinfo=UTC),
            channel_id="222",
            guild_id="111",
            key=KEY,
            user_id="5",
            files=(PHOTO,),
        )
    )
    assert data["via"] == "interaction"
    assert datetime.fromisoformat(data["token_expires"]) == datetime(2026, 1, 2, 3, 19, tzinfo=UTC)
    assert data["files"] == [
        {
            "filename": "photo.png",
            "size": 1234,
            "url": "https://cdn.example/photo.png",
            "content_type": "image/png",
        }
    ]
    assert data["key"] == ["discord", "111", "222", None]
    message = stored(
        MessagePayload(message_id="77", channel_id="222", guild_id=None, key=KEY, user_id="5")
    )
    assert message["via"] == "message" and message["message_id"] == "77" and "plan" not in message


# Payloads exactly as earlier versions stored them.
OLD_INTERACTION = {  # before approved plans (no "plan")
    "via": "interaction",
    "app_id": "9",
    "interaction_id": "10",
    "token": "tok",
    "token_expires": "2026-01-02T03:19:00+00:00",
    "channel_id": "222",
    "guild_id": "111",
    "key": ["discord", "111", "222", None],
    "user_id": "5",
    "user_name": "Ada",
    "is_admin": False,
    "text": "draw a cat",
    "files": [
        {
            "filename": "photo.png",
            "size": 1234,
            "url": "https://cdn.example/photo.png",
            "content_type": "image/png",
        }
    ],
    "upload_limit": 10485760,
}
OLD_PLAN = [  # steps as the hand-written converter wrote them: six fields
    {"id": 0, "task": "text-to-image", "dep": [], "args": {"text": "a cat"}, "model": "acme/t2i",
     "reason": "most downloaded"},
    {"id": 1, "task": "image-to-text", "dep": [0], "args": {"image": "<resource>-0"},
     "model": None, "reason": None},
]  # fmt: skip
OLD_MESSAGE = {
    "via": "message",
    "message_id": "77",
    "channel_id": "222",
    "guild_id": None,
    "key": ["discord", "dm", "222", None],
    "user_id": "5",
    "user_name": "Ada",
    "is_admin": False,
    "text": "hi",
    "files": [],
    "upload_limit": 8388608,
}


def test_payloads_stored_by_earlier_versions_still_load() -> None:
    ask = PAYLOAD.validate_python(OLD_INTERACTION)
    assert isinstance(ask, InteractionPayload)
    assert ask.plan is None and ask.files == (PHOTO,) and ask.key == KEY
    assert ask.token_expires == datetime(2026, 1, 2, 3, 19, tzinfo=UTC)

    run = PAYLOAD.validate_python({**OLD_INTERACTION, "plan": OLD_PLAN})
    assert isinstance(run, InteractionPayload)
    assert run.plan == (STEPS[0], PlannedStep(1, "image-to-text", (0,), STEPS[1].args, None, None))

    mention = PAYLOAD.validate_python(OLD_MESSAGE)
    assert isinstance(mention, MessagePayload) and mention.message_id == "77"


def test_a_payload_of_no_known_shape_is_refused() -> None:
    with pytest.raises(ValidationError):
        PAYLOAD.validate_python({**OLD_MESSAGE, "via": "pigeon"})
    with pytest.raises(ValidationError):
        PAYLOAD.validate_python({k: v for k, v in OLD_INTERACTION.items() if k != "token"})
