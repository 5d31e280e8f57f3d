"""The planning stage run for evaluation, against the loopback OpenAI fake:
the agent's prompt, parser, validator and one re-ask, every answer kept."""

from __future__ import annotations

import json
from typing import Any

from core.errors import RunFailed
from core.evaluation.datasets import item_of
from core.evaluation.runner import EMPTIED, PlanningOptions, plan_request, run_eval
from core.planning import reask_messages
from core.tasks import TASKS
from tests.fakes.clock import FakeClock
from tests.fakes.openai_fake import FakeLLM
from tests.said import raises_saying

OPTIONS = PlanningOptions(tuple(TASKS), max_tasks=10, max_tokens=4096)
CAPTION = json.dumps(
    [{"task": "image-to-text", "id": 0, "dep": [-1], "args": {"image": "cat.png"}}]
)
CUT_OFF = '[{"task": "image-to-text", "id": 0, "dep": [-1], "args": {"image": "cat.p'


def item(request: str = "Describe cat.png", **extra: Any) -> Any:
    return item_of({"request": request, **extra}, "r1")


def fake_tokens(body: dict[str, Any], answer: str) -> tuple[int, int]:
    """What the fake reports: a quarter of the characters sent and answered."""
    return sum(len(m["content"]) for m in body["messages"]) // 4, len(answer) // 4


async def test_a_valid_first_answer(llm_fake: FakeLLM) -> None:
    llm_fake.reply("plan", CAPTION)
    r = await plan_request(llm_fake.client(), item(), OPTIONS, FakeClock(readings=(10.0, 12.5)))
    assert (r.parsed, r.valid, r.reasked) == (True, True, False)
    assert r.plan is not None and [t.task for t in r.plan] == ["image-to-text"]
    assert r.latency == 2.5
    (body,) = llm_fake.calls("plan")
    # the agent's planning request: the stage's prompt, the schema, the cap
    assert body["messages"][0]["content"].startswith("#1 Task Planning Stage")
    assert "Files: cat.png (image)" in body["messages"][-1]["content"]
    assert body["response_format"]["type"] == "json_schema"
    assert body["max_completion_tokens"] == 4096
    prompt, completion = fake_tokens(body, CAPTION)
    assert (r.usage.llm_calls, r.usage.prompt_tokens, r.usage.completion_tokens) == (
        1,
        prompt,
        completion,
    )


async def test_a_malformed_answer_is_asked_again_as_the_agent_does(llm_fake: FakeLLM) -> None:
    llm_fake.reply("plan", CUT_OFF, CAPTION)
    r = await plan_request(llm_fake.client(), item(), OPTIONS)
    assert (r.parsed, r.valid, r.reasked) == (False, True, True)
    first, second = llm_fake.calls("plan")
    error = r.attempts[0].error
    assert error is not None and r.attempts[0].plan is None
    # the re-ask is the agent's: the rejected answer and the error, files: [] not offered
    assert second["messages"] == reask_messages(
        first["messages"], CUT_OFF, error, empty_is_wrong=True
    )
    assert r.usage.llm_calls == 2


async def test_an_invented_task_twice_leaves_no_plan(llm_fake: FakeLLM) -> None:
    invented = [{"task": "image-upscaling", "id": 0, "dep": [-1], "args": {"image": "cat.png"}}]
    again = [{"task": "super-resolution", "id": 0, "dep": [-1], "args": {"image": "cat.png"}}]
    llm_fake.reply("plan", json.dumps(invented), json.dumps(again))
    r = await plan_request(llm_fake.client(), item(), OPTIONS)
    assert (r.parsed, r.valid, r.reasked) == (False, False, True)
    assert r.invented == ("image-upscaling", "super-resolution")
    assert r.scored_plan == ()
    assert r.shape == "none"


async def test_a_plan_dropped_on_the_re_ask_is_not_valid(llm_fake: FakeLLM) -> None:
    wrong_file = [  # the conversation's one file is an image: not repaired
        {"task": "automatic-speech-recognition", "id": 0, "dep": [-1], "args": {"audio": "cat.png"}}
    ]
    llm_fake.reply("plan", json.dumps(wrong_file), "[]")
    r = await plan_request(llm_fake.client(), item(), OPTIONS)
    assert (r.parsed, r.valid) == (True, False)
    assert r.attempts[1].error == EMPTIED
    assert r.scored_plan == ()  # the last answer that parsed: no task


async def test_an_invalid_plan_that_parsed_is_what_is_scored(llm_fake: FakeLLM) -> None:
    wrong_file = [  # the conversation's one file is an image: not repaired
        {"task": "automatic-speech-recognition", "id": 0, "dep": [-1], "args": {"audio": "cat.png"}}
    ]
    llm_fake.reply("plan", json.dumps(wrong_file), CUT_OFF)
    r = await plan_request(llm_fake.client(), item(), OPTIONS)
    assert (r.parsed, r.valid) == (True, False)
    assert [t.task for t in r.scored_plan] == ["automatic-speech-recognition"]


async def test_repairs_are_recorded_with_the_answer(llm_fake: FakeLLM) -> None:
    answer = [
        {"task": "image-to-text-generation", "id": 1, "dep": [1], "args": {"image": "dog.png"}}
    ]
    llm_fake.reply("plan", json.dumps(answer))
    r = await plan_request(llm_fake.client(), item(), OPTIONS)
    assert (r.parsed, r.valid, r.reasked) == (True, True, False)
    assert r.plan is not None and r.plan[0].args == {"image": "cat.png"}
    kinds = [x.kind.value for x in r.attempts[0].repairs]
    assert kinds == ["task_name", "renumbered", "dropped_dep", "file"]


async def test_a_type_inconsistent_link_is_recorded(llm_fake: FakeLLM) -> None:
    answer = [
        {"task": "text-to-image", "id": 0, "dep": [-1], "args": {"text": "a fox"}},
        {"task": "text-to-speech", "id": 1, "dep": [0], "args": {"text": "<resource>-0"}},
    ]
    llm_fake.reply("plan", json.dumps(answer))
    r = await plan_request(llm_fake.client(), item("Draw a fox and say what it is"), OPTIONS)
    assert r.valid  # the validator lets a text input take any output
    assert r.inconsistent == (
        "task 0 (text-to-image) makes image, given to task 1 (text-to-speech) as text",
    )
    assert r.shape == "chain"  # no gold: the plan's shape


async def test_the_llm_failing_is_recorded_not_raised(llm_fake: FakeLLM) -> None:
    llm_fake.fail(500, times=1)
    r = await plan_request(llm_fake.client(max_retries=0), item(), OPTIONS)
    assert r.llm_error is not None and r.attempts == []
    assert (r.parsed, r.valid) == (False, False)
    assert r.usage.llm_calls == 1


async def test_the_run_stops_when_the_llm_fails_on_the_first_requests(llm_fake: FakeLLM) -> None:
    llm_fake.fail(401, times=100)
    items = [item(f"request {n}") for n in range(20)]
    with raises_saying(RunFailed, "failed on the first 3 requests"):
        await run_eval(llm_fake.client(), items, OPTIONS, concurrency=2)
    assert len(llm_fake.calls()) <= 4  # the three, and one already started


async def test_results_keep_the_dataset_order(llm_fake: FakeLLM) -> None:
    def answer(body: dict[str, Any]) -> str:
        n = body["messages"][-1]["content"].split("file")[1].split(".png")[0]
        return json.dumps(
            [{"task": "image-to-text", "id": 0, "dep": [-1], "args": {"image": f"file{n}.png"}}]
        )

    items = [item(f"Describe file{n}.png") for n in range(7)]
    llm_fake.reply("plan", *[answer] * 7)
    seen: list[str] = []
    results = await run_eval(
        llm_fake.client(),
        items,
        OPTIONS,
        concurrency=3,
        on_result=lambda r: seen.append(r.item.request),
    )
    assert [r.item.request for r in results] == [i.request for i in items]
    assert sorted(seen) == sorted(i.request for i in items)
    assert all(r.valid for r in results)
    assert [r.plan[0].args["image"] for r in results if r.plan] == [
        f"file{n}.png" for n in range(7)
    ]
