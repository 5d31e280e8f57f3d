"""Where a turn goes on is read from its state alone (core.turn_steps.next_step):
the one place a resumed turn is routed.  The end-to-end resumes (a killed
process, a job taken over) are in test_jobs.py and the adapters' resume tests."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

from core.planning import PlannedTask
from core.store.media import MediaStore
from core.turn import Turn
from core.turn_state import TurnState, dump_state
from core.turn_steps import Answer, Approved, Execute, Plan, complete_turn, next_step
from core.types import ConversationKey, PlannedStep, Reply, Request

KEY = ConversationKey("cli", "local", "steps", None)
TASK = PlannedTask(0, "text-to-image", [], {"text": "a fox"})


def turn(state: TurnState, *, approved: bool = False) -> Turn:
    plan = (PlannedStep(0, "text-to-image", (), {"text": "a fox"}, None, None),)
    return Turn(Request(KEY, "u1", "draw a fox", plan=plan if approved else None), state)


def test_a_fresh_turn_plans_and_an_approved_one_takes_its_plan() -> None:
    assert next_step(turn(TurnState(uploads=[]))) == Plan()
    assert next_step(turn(TurnState(uploads=[]), approved=True)) == Approved()


def test_a_resumed_turn_goes_on_from_its_plan() -> None:
    assert next_step(turn(TurnState(uploads=[], plan=[TASK]))) == Execute()
    # an approved request resumed: its checkpointed plan, not the request's again
    assert next_step(turn(TurnState(uploads=[], plan=[TASK]), approved=True)) == Execute()
    assert next_step(turn(TurnState(uploads=[], plan=[]))) == Answer([], {})


async def test_a_saved_reply_is_only_handed_back(tmp_path: Path) -> None:
    media = MediaStore(tmp_path)
    saved = Reply("two cats", request_id="r1")
    job: Any = SimpleNamespace(checkpoint=dump_state(TurnState(uploads=[], reply=saved), media))
    deps: Any = SimpleNamespace(media=media)  # nothing else is touched

    async def emit(event: object) -> None:
        raise AssertionError(f"no event expected: {event}")

    assert await complete_turn(deps, Request(KEY, "u1", "x"), emit, job) == saved
