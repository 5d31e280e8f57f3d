"""The plan's structured output: three forms, each one a plan parse_plan reads,
none a plan the task table forbids; the token cap; the step-down when a
server refuses a form (against the loopback OpenAI fake)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from core.llm import JSONSchema
from core.plan_schema import (
    FORMS,
    REASONING_ROOM,
    TEXT_MARGIN,
    plan_schema,
    planning_token_cap,
    text_limit,
)
from core.planning import parse_plan
from core.tasks import TASKS
from core.types import Usage
from tests.core.schema_subset import violation
from tests.fakes.openai_fake import FakeLLM

FILES = [("photo.png", "image"), ("memo.wav", "audio"), ("notes.txt", "text")]
SCHEMA = plan_schema(list(TASKS), max_tasks=3, files=FILES, text_chars=50)
FULL, STRICT, PLAIN = SCHEMA.forms


def plan(*tasks: dict[str, Any]) -> dict[str, Any]:
    return {"tasks": list(tasks)}


def t(task: str, id: int = 0, dep: list[int] | None = None, **args: str | None) -> dict[str, Any]:
    return {"task": task, "id": id, "dep": dep or [-1], "args": args}


GOOD = plan(
    t("automatic-speech-recognition", 0, audio="memo.wav"),
    t("visual-question-answering", 1, [0], text="<resource>-0", image="photo.png"),
    t("text-to-speech", 2, [1], text="<resource>-1"),
)


def test_there_are_three_forms_most_constraining_first() -> None:
    assert FORMS == ("full", "strict", "plain")
    assert SCHEMA.name == "plan" and SCHEMA.forms == (FULL, STRICT, PLAIN)


@pytest.mark.parametrize("form", [FULL, STRICT, PLAIN], ids=FORMS)
def test_a_good_plan_fits_every_form_and_parses(form: dict[str, Any]) -> None:
    answer = GOOD
    if form is STRICT:  # every property present, the optional ones null
        answer = plan(*GOOD["tasks"][:2], t("image-to-image", 2, image="photo.png", text=None))
    assert violation(answer, form) is None
    assert [p.task for p in parse_plan(json.dumps(answer))] == [x["task"] for x in answer["tasks"]]


@pytest.mark.parametrize(
    ("answer", "why"),
    [
        (plan(t("text-to-image-generation", text="a cat")), "anyOf"),
        (plan(t("automatic-speech-recognition", audio="memo.wav", image="photo.png")), "anyOf"),
        (plan(t("automatic-speech-recognition", audio="question.wav")), "anyOf"),
        (plan(t("image-classification", image="memo.wav")), "anyOf"),  # the file is audio
        (plan(t("image-classification", image="<resource>-7")), "anyOf"),  # past the cap
        (plan(t("summarization", text="x" * 51)), "anyOf"),
        (plan(*[t("summarization", i, text="x") for i in range(4)]), "more than 3 items"),
        (plan({**t("summarization", text="x"), "id": "0"}), "anyOf"),
        (plan(t("summarization", 0, [1, 2, 3, 4], text="x")), "anyOf"),  # SmolLM2 counts
    ],
    ids=["unknown", "foreign", "no-such-file", "wrong-kind", "ref", "long", "many", "id", "deps"],
)
def test_the_full_form_refuses_what_the_plan_cannot_be(answer: dict[str, Any], why: str) -> None:
    bad = violation(answer, FULL)
    assert bad is not None and why in bad


def test_each_task_takes_exactly_its_own_inputs_in_the_full_form() -> None:
    for name, spec in TASKS.items():
        args = {m: "<resource>-0" if m != "text" else "x" for m in spec.args}
        assert violation(plan({**t(name), "args": args}), FULL) is None, name
        for m in ("text", "image", "audio", "video"):
            if m in spec.args or m in spec.optional:
                continue
            extra = {**args, m: "<resource>-0" if m != "text" else "x"}
            assert violation(plan({**t(name), "args": extra}), FULL) is not None, (name, m)
    # image-to-image's text is optional: it may be left out
    assert violation(plan(t("image-to-image", image="photo.png")), FULL) is None


def test_only_offered_tasks_and_only_the_inputs_they_take() -> None:
    schema = plan_schema(["image-to-text", "TTS"], max_tasks=2, files=FILES)
    full = schema.schema
    names = [v["properties"]["task"] for v in full["properties"]["tasks"]["items"]["anyOf"]]
    assert names == [{"const": "image-to-text"}, {"const": "text-to-speech"}]
    assert set(full["$defs"]) == {"image", "text"}
    assert full["$defs"]["image"]["enum"] == ["photo.png", "<resource>-0", "<resource>-1"]
    assert full["properties"]["tasks"]["maxItems"] == 2
    plain = schema.fallbacks[1]
    assert plain["properties"]["tasks"]["items"]["properties"]["task"]["enum"] == [
        "image-to-text",
        "text-to-speech",
    ]
    assert set(plain["properties"]["tasks"]["items"]["properties"]["args"]["properties"]) == {
        "text",
        "image",
    }


def test_nothing_offered_allows_only_the_empty_plan() -> None:
    for form in plan_schema([]).forms:
        assert violation({"tasks": []}, form) is None
        assert violation(plan(t("summarization", text="x")), form) is not None


def _walk(node: Any) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = []
    if isinstance(node, dict):
        found.append(node)
        for v in node.values():
            found += _walk(v)
    elif isinstance(node, list):
        for v in node:
            found += _walk(v)
    return found


def test_the_strict_form_keeps_to_what_openai_strict_mode_documents() -> None:
    nodes = _walk(STRICT)
    assert not any("const" in n or "maxLength" in n or "minLength" in n for n in nodes)
    for n in nodes:
        if n.get("type") == "object" and "properties" in n:
            assert n["additionalProperties"] is False
            assert set(n["required"]) == set(n["properties"]), n  # every property required
    assert "anyOf" not in STRICT  # not at the root
    i2i = [
        v
        for v in STRICT["properties"]["tasks"]["items"]["anyOf"]
        if v["properties"]["task"] == {"type": "string", "enum": ["image-to-image"]}
    ]
    assert i2i[0]["properties"]["args"]["properties"]["text"]["anyOf"][1] == {"type": "null"}


def test_the_plain_form_has_no_anyof_const_or_ref() -> None:
    text = json.dumps(PLAIN)
    assert "anyOf" not in text and "const" not in text and "$ref" not in text
    assert violation(plan(t("automatic-speech-recognition", audio="x.wav")), PLAIN) is None
    assert violation(plan(t("no-such-task", text="x")), PLAIN) is not None
    assert violation(plan(*[t("summarization", i, text="x") for i in range(4)]), PLAIN)


def test_token_cap_fits_the_plan_cap_and_the_request() -> None:
    assert planning_token_cap(10) == 800
    assert planning_token_cap(10, 300) == 900
    assert planning_token_cap(1) == 170
    assert planning_token_cap(10, reasoning=True) == 800 + REASONING_ROOM
    assert text_limit(40, 100) == 140 + TEXT_MARGIN


# ------------------------------------------------- the step-down, per server


def refusal(message: str) -> dict[str, Any]:
    return {"error": {"message": message, "type": "invalid_request_error", "param": None}}


async def test_a_refused_form_steps_to_the_next_and_is_remembered(llm_fake: FakeLLM) -> None:
    llm = llm_fake.client(max_retries=0)
    # vLLM's words when xgrammar lacks a feature; then a server refusing anyOf
    llm_fake.fail_with(400, refusal("The provided JSON schema contains features not supported"))
    llm_fake.fail_with(400, refusal("Invalid schema: 'anyOf' is not permitted"))
    llm_fake.reply("plan", "[]", "[]")
    assert llm.structured_output == "json_schema"
    await llm.complete(_messages(), usage=Usage(), schema=SCHEMA)
    sent = [r["response_format"]["json_schema"]["schema"] for r in llm_fake.requests]
    assert sent == [FULL, STRICT, PLAIN]
    assert llm.structured_output == "json_schema form 3"
    await llm.complete(_messages(), usage=Usage(), schema=SCHEMA)  # remembered
    assert llm_fake.requests[-1]["response_format"]["json_schema"]["schema"] == PLAIN


async def test_a_schema_without_fallbacks_steps_to_json_object(llm_fake: FakeLLM) -> None:
    llm = llm_fake.client(max_retries=0)
    llm_fake.reject_json_schema = True  # llama.cpp's old words, the type named
    llm_fake.reply("plan", "[]")
    await llm.complete(_messages(), usage=Usage(), schema=JSONSchema("plan", FULL))
    assert [(r.get("response_format") or {}).get("type") for r in llm_fake.requests] == [
        "json_schema",
        "json_object",
    ]
    assert llm.structured_output == "json_object"


async def test_streamed_calls_carry_the_schema(llm_fake: FakeLLM) -> None:
    llm = llm_fake.client()
    llm_fake.reply("plan", "[]")
    pieces: list[str] = []

    async def keep(piece: str) -> None:
        pieces.append(piece)

    assert await llm.complete(_messages(), usage=Usage(), schema=SCHEMA, on_delta=keep) == "[]"
    (body,) = llm_fake.requests
    assert body["stream"] is True and body["response_format"]["json_schema"]["schema"] == FULL
    assert pieces == ["[]"]


def _messages() -> list[dict[str, str]]:
    return [
        {"role": "system", "content": "#1 Task Planning Stage"},
        {"role": "user", "content": "hi"},
    ]
