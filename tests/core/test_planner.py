"""The planning loop (core.planner) against the loopback OpenAI fake: ask,
read, repair, check, re-ask once; copied demonstrations refused; a looping
model cut as it loops; the cap fitted to the plan and to a reasoning model."""

from __future__ import annotations

import json
from typing import Any

import pytest

from adapters.chat.messages import error_text
from core.plan_prompt import demos_shown
from core.plan_schema import REASONING_ROOM, planning_token_cap
from core.planner import LOOP_SPAN, LoopGuard, PlanAsk, judge, make_plan
from core.repeats import Looping, repeating_tail
from core.tasks import TASKS
from core.types import PlanChange, PlanNote, Usage
from tests.fakes.openai_fake import FakeLLM, WeakModel

REQUEST = "Transcribe memo.wav and read the transcript aloud"
ASK = PlanAsk(REQUEST, handles={"memo.wav": "audio"}, runnable=list(TASKS), needs_models=True)
CAP = planning_token_cap(10, len(REQUEST))


def t(task: str, id: int = 0, dep: list[int] | None = None, **args: str) -> dict[str, Any]:
    return {"task": task, "id": id, "dep": dep or [-1], "args": args}


GOOD = json.dumps(
    [
        t("automatic-speech-recognition", 0, audio="memo.wav"),
        t("text-to-speech", 1, [0], text="<resource>-0"),
    ]
)


async def test_a_good_plan_is_one_streamed_call_with_the_schema_and_the_cap(
    llm_fake: FakeLLM,
) -> None:
    llm_fake.reply("plan", GOOD)
    usage = Usage()
    result = await make_plan(llm_fake.client(), ASK, usage)
    assert result.plan is not None and [p.task for p in result.plan] == [
        "automatic-speech-recognition",
        "text-to-speech",
    ]
    assert result.failure is None and result.notes == ()
    (body,) = llm_fake.calls("plan")
    assert body["stream"] is True and body["max_completion_tokens"] == CAP
    schema = body["response_format"]["json_schema"]["schema"]
    assert schema["properties"]["tasks"]["maxItems"] == 10
    assert schema["$defs"]["audio"]["enum"][0] == "memo.wav"
    assert schema["$defs"]["text"]["maxLength"] == len(REQUEST) + 300
    assert usage.llm_calls == 1


async def test_a_repairable_plan_is_repaired_not_asked_again(llm_fake: FakeLLM) -> None:
    llm_fake.reply(
        "plan",
        json.dumps(
            [
                t("speech-recognition", 0, [0], audio="question.wav", image="example.jpg"),
                t("text-to-speech", 0, [-1], text="<resource>-0"),
            ]
        ),
    )
    result = await make_plan(llm_fake.client(), ASK, Usage())
    assert result.plan is not None and len(llm_fake.calls("plan")) == 1
    assert result.plan[0].args == {"audio": "memo.wav"} and result.plan[1].dep == [0]
    (attempt,) = result.attempts
    assert sorted(r.kind.value for r in attempt.repairs) == [
        "added_dep",
        "dropped_arg",
        "dropped_dep",
        "file",
        "renumbered",
        "task_name",
    ]
    assert result.notes == (
        PlanNote(PlanChange.TASK, 0, "speech-recognition", "automatic-speech-recognition"),
        PlanNote(PlanChange.FILE, 0, "question.wav", "memo.wav", "audio"),
    )


async def test_what_cannot_be_repaired_is_asked_again_with_the_reason(llm_fake: FakeLLM) -> None:
    bad = json.dumps([t("image-generation", text="a fox")])
    llm_fake.reply("plan", bad, GOOD)
    result = await make_plan(llm_fake.client(), ASK, Usage())
    assert result.plan is not None and len(result.attempts) == 2
    _first, second = llm_fake.calls("plan")
    reask = second["messages"][-1]["content"]
    assert "unknown task 'image-generation'" in reask and "The tasks you may use are" in reask
    assert second["messages"][-2] == {"role": "assistant", "content": bad}


async def test_an_answer_copying_a_demonstration_is_refused_as_copied(llm_fake: FakeLLM) -> None:
    ask = PlanAsk(
        "enhance the audio of example.wav",
        handles={"example.wav": "audio"},
        runnable=list(TASKS),
    )
    demos = demos_shown(ask.request_text, chat_log=(), files=[("example.wav", "audio")],
                        runnable=list(TASKS))  # fmt: skip
    (demo,) = [d for d in demos if d.request == "Remove the background noise from memo.wav."]
    copied = json.dumps([t("audio-to-audio", audio="memo.wav")])  # the demo's file
    llm_fake.reply("plan", copied, json.dumps([t("audio-to-audio", audio="example.wav")]))
    result = await make_plan(llm_fake.client(), ask, Usage())
    assert result.plan is not None and result.plan[0].args == {"audio": "example.wav"}
    first, _second = result.attempts
    assert first.error is not None and "copies an example" in first.error
    assert "'memo.wav'" in first.error and first.copied == demo.request
    asked, reasked = llm_fake.calls("plan")
    assert "Your plan copies an example, not this request" in reasked["messages"][-1]["content"]
    # asked again without the demonstration it copied
    assert demo.request in json.dumps(asked["messages"])
    assert demo.request not in json.dumps(reasked["messages"][:-2])


def test_copied_words_are_found_and_the_persons_own_words_are_not() -> None:
    ask = PlanAsk(
        "Answer the question I recorded in q.wav about a photo of a lake",
        handles={"q.wav": "audio"},
        runnable=list(TASKS),
    )
    demos = demos_shown(
        "Draw a mountain lake at dawn, then answer the question I recorded in question.wav",
        chat_log=(),
        files=[("question.wav", "audio")],
        runnable=list(TASKS),
    )
    lake = json.dumps(
        [
            t("text-to-image", 0, text="A mountain lake at dawn"),
            t("automatic-speech-recognition", 1, audio="q.wav"),
            t("visual-question-answering", 2, [0, 1], image="<resource>-0", text="<resource>-1"),
        ]
    )
    attempt = judge(lake, ask, demos)
    assert attempt.error is not None and "'a mountain lake at dawn'" in attempt.error
    own = lake.replace("A mountain lake at dawn", "a photo of a lake")
    assert judge(own, ask, demos).error is None


async def test_a_looping_model_is_cut_in_its_loop_and_the_person_told(llm_fake: FakeLLM) -> None:
    llm_fake.weak = WeakModel(loop=True)  # "la la la …" to the cap
    result = await make_plan(llm_fake.client(), ASK, Usage())
    assert result.plan is None and [a.cut for a in result.attempts] == ["loop", "loop"]
    assert all(len(a.answer) < LOOP_SPAN + 200 for a in result.attempts)  # not the cap's 3000
    assert result.failure is not None
    said = error_text(result.failure)
    assert "kept repeating itself" in said and "LLM_MODEL" in said
    reask = llm_fake.calls("plan")[1]["messages"][-1]["content"]
    assert "Your answer kept repeating" in reask and "was cut off after" in reask


async def test_an_answer_past_the_cap_is_named_as_such(llm_fake: FakeLLM) -> None:
    prose = " ".join(f"step{i}" for i in range(200))  # no loop, no plan, 1,300 characters
    llm_fake.reply("plan", prose, prose)
    ask = PlanAsk(REQUEST, handles={"memo.wav": "audio"}, runnable=list(TASKS), max_tokens=100)
    result = await make_plan(llm_fake.client(), ask, Usage())
    assert [a.cut for a in result.attempts] == ["cap", "cap"]
    assert [b["max_completion_tokens"] for b in llm_fake.calls("plan")] == [100, 100]
    first = result.attempts[0].error or ""
    assert "cut off at the limit of 100 tokens" in first
    assert result.failure is not None and "kept writing past" in error_text(result.failure)
    assert "LLM_MODEL" in error_text(result.failure)


async def test_a_model_that_thinks_the_cap_away_gets_room_once_and_keeps_it(
    llm_fake: FakeLLM,
) -> None:
    llm_fake.reasoning_tokens = CAP + 100  # it thinks past the plan's cap: nothing written
    llm_fake.reply("plan", GOOD, GOOD, GOOD)
    llm = llm_fake.client()
    assert llm.reasons is False  # a local server, no effort set
    result = await make_plan(llm, ASK, Usage())
    assert result.plan is not None and len(result.attempts) == 1
    assert llm.reasons is True
    await make_plan(llm, ASK, Usage())
    caps = [b["max_completion_tokens"] for b in llm_fake.calls("plan")]
    assert caps == [CAP, CAP + REASONING_ROOM, CAP + REASONING_ROOM]


async def test_a_failed_call_is_recorded_with_the_answers_before_it(llm_fake: FakeLLM) -> None:
    refused = json.dumps([t("image-generation", text="x")])

    def then_fail(_body: dict[str, Any]) -> str:
        llm_fake.fail(500, times=1, stage="plan")  # the re-ask fails
        return refused

    llm_fake.reply("plan", then_fail)
    result = await make_plan(llm_fake.client(max_retries=0), ASK, Usage())
    assert result.llm_error is not None and "HTTP 500" in str(result.llm_error)
    assert result.plan is None and result.failure is None
    (first,) = result.attempts
    assert first.answer == refused and first.error is not None


@pytest.mark.parametrize(
    ("text", "unit"),
    [
        ("[" + "la " * 300, "la "),
        ('{"text": "' + "a cat " * 120, "a cat "),
        ("x" * 700, "x"),
    ],
)
def test_a_repeating_tail_is_found(text: str, unit: str) -> None:
    found = repeating_tail(text, LOOP_SPAN)
    assert found is not None and found * 2 in text and len(found) <= len(unit)


def test_a_plan_is_no_loop() -> None:
    tasks = [t("image-classification", i, image=f"photo-{i}.png") for i in range(10)]
    assert repeating_tail(json.dumps(tasks), LOOP_SPAN) is None
    assert repeating_tail("la " * 100, LOOP_SPAN) is None  # 300 characters: not yet


async def test_the_guard_cuts_a_loop_but_not_the_persons_own_repetition() -> None:
    guard = LoopGuard(10)
    with pytest.raises(Looping):
        for _ in range(100):
            await guard.feed("la la la la ")
    assert guard.repeated is not None and guard.size < 1000
    chorus = "na " * 400
    mine = LoopGuard(10, own_text=f"summarise this song: {chorus}")
    for _ in range(100):
        await mine.feed("na na na na ")
    many = LoopGuard(3)
    with pytest.raises(Looping, match="more than 5 tasks"):
        for i in range(20):
            await many.feed(json.dumps(t("image-classification", i, image=f"p{i}.png")) + ",")


def test_a_short_or_common_phrase_is_no_proof_of_copying() -> None:
    from core.plan_prompt import _demos, copied_demo

    (invoice,) = [d for d in _demos() if "invoice.png" in d.request]
    own = {"own_text": "how much do I owe on bill.png?", "handles": ["bill.png"]}
    assert copied_demo(["What is the total?"], [invoice], **own) is None  # 4 words
    found = copied_demo(["Tell me: What is the total amount?"], [invoice], **own)
    assert found is not None and found[0] == "what is the total amount" and found[1] is invoice
    assert copied_demo(["bill.png"], [invoice], **own) is None
    assert copied_demo(["invoice.png"], [invoice], **own) == ("invoice.png", invoice)
    mine = {"own_text": "What is the total amount on bill.png?", "handles": ["bill.png"]}
    assert copied_demo(["What is the total amount?"], [invoice], **mine) is None


async def test_a_model_counting_in_a_loop_is_cut_but_a_plan_of_alike_tasks_is_not() -> None:
    counting = LoopGuard(10)
    with pytest.raises(Looping):
        for i in range(300):  # SmolLM2: {"name":"Washington","id":N,"dep":[ nested forever
            await counting.feed(f'{{"name":"Washington","id":{i},"dep":[')
    assert 1200 <= counting.size < 1400
    alike = LoopGuard(10)
    tasks = [t("image-classification", i, image=f"photo-{i}.png") for i in range(10)]
    for piece in json.dumps({"tasks": tasks}):
        await alike.feed(piece)
    assert alike.repeated is None


# ---- a valid plan that leaves out a file the request names

PHOTO_ASK = PlanAsk(
    "I have example.jpg: tell me what it shows and read that aloud",
    handles={"example.jpg": "image"},
    runnable=list(TASKS),
    needs_models=True,
)
IGNORES = json.dumps([t("text-to-speech", text="what it shows")])
USES = json.dumps([
    t("image-to-text", 0, image="example.jpg"),
    t("text-to-speech", 1, [0], text="<resource>-0"),
])  # fmt: skip


async def test_a_plan_leaving_out_a_named_file_is_asked_again_and_the_better_one_taken(
    llm_fake: FakeLLM,
) -> None:
    llm_fake.reply("plan", IGNORES, USES)
    result = await make_plan(llm_fake.client(), PHOTO_ASK, Usage())
    assert result.plan is not None and [p.task for p in result.plan] == [
        "image-to-text",
        "text-to-speech",
    ]
    _, reasked = llm_fake.calls("plan")
    assert "Your plan does not use example.jpg" in reasked["messages"][-1]["content"]
    assert reasked["messages"][-2] == {"role": "assistant", "content": IGNORES}


@pytest.mark.parametrize("second", [IGNORES, json.dumps([t("no-such-task", text="x")])])
async def test_the_first_plan_stays_when_the_re_ask_is_no_better(
    llm_fake: FakeLLM, second: str
) -> None:
    llm_fake.reply("plan", IGNORES, second)
    result = await make_plan(llm_fake.client(), PHOTO_ASK, Usage())
    assert len(result.attempts) == 2 and result.chosen == 0 and result.failure is None
    assert result.plan is not None and [p.task for p in result.plan] == ["text-to-speech"]


async def test_the_first_plan_stays_when_the_re_ask_fails(llm_fake: FakeLLM) -> None:
    def then_fail(body: dict[str, Any]) -> str:
        llm_fake.fail(500, times=5, stage="plan")  # every later plan call
        return IGNORES

    llm_fake.reply("plan", then_fail)
    result = await make_plan(llm_fake.client(), PHOTO_ASK, Usage())
    assert result.llm_error is None and result.plan is not None
    assert [p.task for p in result.plan] == ["text-to-speech"]


async def test_a_plan_using_every_named_file_is_one_call(llm_fake: FakeLLM) -> None:
    llm_fake.reply("plan", USES)
    result = await make_plan(llm_fake.client(), PHOTO_ASK, Usage())
    assert result.plan is not None and len(llm_fake.calls("plan")) == 1
