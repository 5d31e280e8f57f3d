"""Job.status_ref, typed (core.types.Posted): what each surface stored before
reads back, only set fields are stored, and a key it does not know is kept."""

from __future__ import annotations

from core.types import Posted, Uploading


def test_what_the_surfaces_stored_reads_back() -> None:
    discord = {"message_id": 12, "channel": True, "answer": [13, 14]}
    assert Posted.model_validate(discord).stored() == discord
    slack = {"ts": "1.5", "posted": 2, "uploading": {"step": 3, "files": ["F1"]}}
    ref = Posted.model_validate(slack)
    assert ref.uploading == Uploading(step=3, files=["F1"])
    assert ref.stored() == slack


def test_only_set_fields_are_stored_and_unknown_keys_are_kept() -> None:
    assert Posted(message_id=5).stored() == {"message_id": 5}
    assert Posted.model_validate({"ts": "1.5", "later": 1}).stored() == {"ts": "1.5", "later": 1}
    cleared = Posted(ts="1.5", posted=1, uploading=Uploading(step=2)).model_copy(
        update={"uploading": None, "posted": 2}
    )
    assert cleared.stored() == {"ts": "1.5", "posted": 2}


def test_no_job_has_nothing_recorded() -> None:
    assert Posted.of(None) == Posted()
