"""A Slack job's payload: one TypeAdapter (``adapters.slack.jobs.PAYLOAD``)
writes and reads it, and payloads stored by earlier versions still load."""

from __future__ import annotations

import json

import pytest
from pydantic import ValidationError

from adapters.slack.jobs import Incoming, incoming_of, payload

FILE = {
    "id": "F0FILE",
    "name": "photo.png",
    "mimetype": "image/png",
    "size": 1234,
    "url_private_download": "https://files.slack.com/photo.png",
}


@pytest.mark.parametrize(
    "incoming",
    [
        Incoming("T0TEAM", "C0CHAN", "U0USER", "draw a fox", "1700000000.000100", None),
        Incoming(
            team="T0TEAM",
            channel="D0DM",
            user="U0USER",
            text="what is this?",
            ts="1700000000.000200",
            thread_ts="1700000000.000100",
            files=(FILE,),
            event_id="Ev0ONE",
            assistant=True,
        ),
    ],
)
def test_a_payload_round_trips(incoming: Incoming) -> None:
    stored = json.loads(json.dumps(payload(incoming)))  # as the store keeps it
    assert incoming_of(stored) == incoming


def test_the_stored_names_stay() -> None:
    incoming = Incoming("T0TEAM", "C0CHAN", "U0USER", "hi", "1.2", "1.1", (FILE,), "Ev0", True)
    assert payload(incoming) == {
        "team": "T0TEAM",
        "channel": "C0CHAN",
        "user": "U0USER",
        "text": "hi",
        "ts": "1.2",
        "thread_ts": "1.1",
        "files": [FILE],
        "event_id": "Ev0",
        "assistant": True,
    }


def test_a_payload_stored_by_an_earlier_version_still_loads() -> None:
    """Before assistant threads, a payload had no "assistant"."""
    old = {
        "team": "T0TEAM",
        "channel": "C0CHAN",
        "user": "U0USER",
        "text": "draw a fox",
        "ts": "1700000000.000100",
        "thread_ts": None,
        "files": [FILE],
        "event_id": "Ev0OLD",
    }
    incoming = incoming_of(old)
    assert incoming == Incoming(
        "T0TEAM", "C0CHAN", "U0USER", "draw a fox", "1700000000.000100", None, (FILE,), "Ev0OLD"
    )
    assert not incoming.assistant and incoming.key.thread is None


def test_a_payload_without_its_place_is_refused() -> None:
    with pytest.raises(ValidationError):
        incoming_of({"team": "T0TEAM", "user": "U0USER", "text": "", "ts": "", "thread_ts": None})
