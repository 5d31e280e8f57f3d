"""Repairs that changed the plan's meaning, in the words people read."""

from __future__ import annotations

from adapters.chat.render import plan_note
from adapters.cli import RENDERER as TERMINAL
from adapters.discord.surface import MESSAGE_LIMIT, RENDERER
from core.types import PlanChange, PlanNote, Reply

FILE = PlanNote(PlanChange.FILE, 1, "question.wav", "example.wav", "audio")
TASK = PlanNote(PlanChange.TASK, 0, "text-to-image-generation", "text-to-image")


def test_one_sentence_per_kind_of_change() -> None:
    assert plan_note(FILE) == (
        "I used example.wav as the audio of task 1 (it named 'question.wav', which is not here)."
    )
    assert plan_note(TASK) == "I read the task 'text-to-image-generation' as text-to-image."
    missing = PlanNote(PlanChange.FILE, 0, "", "photo.png", "image")
    assert plan_note(missing) == "I used photo.png as the image of task 0."
    asked = PlanNote(PlanChange.REQUEST, 0, "<resource>-0", "", "text")
    assert (
        plan_note(asked) == "I used your message as the text of task 0 (it named '<resource>-0')."
    )
    added = PlanNote(PlanChange.BRIDGED, 1, "example.jpg", "image-to-text", "text")
    assert plan_note(added) == "I added task 1 (image-to-text) to make text from example.jpg."


def test_the_final_status_says_them_under_the_done_line() -> None:
    reply = Reply("ok", plan_notes=(TASK, FILE))
    lines = RENDERER.final(reply, 2.0, MESSAGE_LIMIT).splitlines()
    assert lines[0].startswith("✅") and "Done in 2 s" in lines[0]
    assert lines[1] == f"ℹ️ {plan_note(TASK)}"
    assert lines[2].startswith("ℹ️ I used example.wav")
    assert TERMINAL.final(reply, 2.0, 4000).splitlines()[1:] == [plan_note(TASK), plan_note(FILE)]
    assert len(RENDERER.final(Reply("ok"), 2.0, MESSAGE_LIMIT).splitlines()) == 1
