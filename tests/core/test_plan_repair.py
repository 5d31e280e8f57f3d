"""Repairs before refusing: each kind, what has no single reading (refused),
and near-miss task names."""

from __future__ import annotations

import json
from typing import Any

import pytest

from core.errors import PlanError
from core.plan_repair import RepairKind, near_task, notes, repair_plan
from core.planning import PlannedTask, check_plan, read_drafts
from core.tasks import TASKS
from core.types import PlanChange, PlanNote

HANDLES = {"photo.png": "image", "memo.wav": "audio"}


def t(task: Any, id: Any = 0, dep: Any = None, **args: Any) -> dict[str, Any]:
    return {"task": task, "id": id, "dep": [-1] if dep is None else dep, "args": args}


def repaired(
    *tasks: dict[str, Any],
    handles: dict[str, str] | None = None,
    runnable: Any = None,
    request: str = "",
) -> tuple[list[PlannedTask], list[tuple[str, int | None, str]]]:
    drafts, problems = read_drafts(json.dumps(list(tasks)))
    assert problems == []
    plan, repairs = repair_plan(
        drafts,
        handles=HANDLES if handles is None else handles,
        runnable=list(TASKS) if runnable is None else runnable,
        request_text=request,
    )
    return plan, [(r.kind.value, r.task, r.detail) for r in repairs]


def plain(plan: list[PlannedTask]) -> list[tuple[int, str, list[int], dict[str, str]]]:
    return [(p.id, p.task, p.dep, p.args) for p in plan]


def test_a_good_plan_needs_no_repair() -> None:
    plan, repairs = repaired(
        t("automatic-speech-recognition", 0, audio="memo.wav"),
        t("text-to-speech", 1, [0], text="<resource>-0"),
    )
    assert repairs == []
    assert plain(plan) == [
        (0, "automatic-speech-recognition", [], {"audio": "memo.wav"}),
        (1, "text-to-speech", [0], {"text": "<resource>-0"}),
    ]


def test_duplicate_ids_are_renumbered_with_their_references() -> None:
    # every task id 0: each reference means the nearest task 0 before it
    plan, repairs = repaired(
        t("automatic-speech-recognition", 0, audio="memo.wav"),
        t("translation", 0, [0], text="<resource>-0"),
        t("text-to-speech", 0, [0], text="<resource>-0"),
    )
    assert plain(plan) == [
        (0, "automatic-speech-recognition", [], {"audio": "memo.wav"}),
        (1, "translation", [0], {"text": "<resource>-0"}),
        (2, "text-to-speech", [1], {"text": "<resource>-1"}),
    ]
    assert repairs == [("renumbered", None, "ids 0→1, 0→2")]


def test_ids_from_one_and_out_of_order_are_renumbered() -> None:
    plan, repairs = repaired(
        t("text-to-speech", 2, [1], text="<resource>-1"),
        t("automatic-speech-recognition", 1, audio="memo.wav"),
    )
    assert plain(plan) == [
        (0, "text-to-speech", [1], {"text": "<resource>-1"}),
        (1, "automatic-speech-recognition", [], {"audio": "memo.wav"}),
    ]
    assert [r[0] for r in repairs] == ["renumbered"]


def test_a_self_reference_and_a_dep_on_no_task_are_dropped_when_unused() -> None:
    plan, repairs = repaired(
        t("automatic-speech-recognition", 0, [0], audio="memo.wav"),
        t("summarization", 1, [1, 7], text="a long text"),
    )
    assert [p.dep for p in plan] == [[], []]
    assert repairs == [
        ("dropped_dep", 0, "dep on itself"),
        ("dropped_dep", 1, "dep on itself"),
        ("dropped_dep", 1, "dep on task 7, which is not in the plan"),
    ]


def test_the_dep_a_reference_implies_is_added() -> None:
    plan, repairs = repaired(
        t("automatic-speech-recognition", 0, audio="memo.wav"),
        t("text-to-speech", 1, [-1], text="<resource>-0"),  # dep: [-1] with a real dependency
    )
    assert plan[1].dep == [0]
    assert repairs == [("added_dep", 1, "dep on task 0 (<resource>-0)")]


def test_inputs_a_task_does_not_take_are_dropped() -> None:
    # the nullable-every-modality schema's ASR: image and the whole request as text
    plan, repairs = repaired(
        t("automatic-speech-recognition", audio="memo.wav", image="example.jpg", text="the request")
    )
    assert plan[0].args == {"audio": "memo.wav"}
    assert [(k, d) for k, _, d in repairs] == [
        ("dropped_arg", "text='the request'"),
        ("dropped_arg", "image='example.jpg'"),
    ]


@pytest.mark.parametrize(
    ("written", "meant"),
    [
        ("text-to-image-generation", "text-to-image"),
        ("Text To Speech Model", "text-to-speech"),
        ("speech-recognition", "automatic-speech-recognition"),
        ("image-clasification", "image-classification"),
        ("ObjectDetectionTask", "object-detection"),
        ("image segmentation pipeline", "image-segmentation"),
    ],
)
def test_near_miss_task_names_are_read_as_ours(written: str, meant: str) -> None:
    assert near_task(written, list(TASKS)) == meant


@pytest.mark.parametrize(
    "written",
    [
        "image-generation",  # text-to-image? image-to-image? not ours to guess
        "classification",  # one of four
        "text",
        "image-to-video",
        "image-to-image-translation",
        "super-resolution",
        "brew-coffee",
        "",
    ],
)
def test_names_near_no_task_or_several_are_not_mapped(written: str) -> None:
    assert near_task(written, list(TASKS)) is None


def test_a_near_miss_is_never_a_task_that_is_not_offered() -> None:
    assert near_task("text-to-image-generation", ["image-to-text", "text-to-speech"]) is None
    with pytest.raises(PlanError) as info:
        repaired(t("text-to-image-generation", text="a fox"), runnable=["image-to-text"])
    assert "unknown task 'text-to-image-generation'" in str(info.value)
    assert "The tasks you may use are: image-to-text." in str(info.value)


def test_a_near_miss_name_is_repaired_and_told() -> None:
    plan, repairs = repaired(t("text-to-image-generation", text="a fox"))
    assert plan[0].task == "text-to-image"
    assert repairs == [("task_name", 0, "'text-to-image-generation' → text-to-image")]


def test_a_file_the_conversation_lacks_becomes_its_one_file_of_that_kind() -> None:
    drafts, _ = read_drafts(json.dumps([t("asr", audio="question.wav")]))
    plan, repairs = repair_plan(drafts, handles=HANDLES, runnable=list(TASKS))
    assert plan[0].args == {"audio": "memo.wav"}
    assert notes(repairs) == (PlanNote(PlanChange.FILE, 0, "question.wav", "memo.wav", "audio"),)
    # a missing input of a task that depends on nothing: the same
    plan, repairs2 = repaired(t("image-classification"))
    assert plan[0].args == {"image": "photo.png"}
    assert [r[0] for r in repairs2] == ["file"]


def test_a_file_the_conversation_lacks_stays_when_it_has_two_or_none_of_that_kind() -> None:
    two = {"a.png": "image", "b.png": "image"}
    plan, repairs = repaired(t("image-classification", image="c.png"), handles=two)
    assert plan[0].args == {"image": "c.png"} and repairs == []  # check_plan refuses it
    plan, repairs = repaired(t("image-classification", image="c.png"), handles={})
    assert plan[0].args == {"image": "c.png"} and repairs == []


def test_a_file_the_conversation_lacks_is_the_one_dependency_making_that_kind() -> None:
    plan, repairs = repaired(
        t("text-to-image", 0, text="a fox"),
        t("image-classification", 1, [0], image="generated.png"),
    )
    assert plan[1].args == {"image": "<resource>-0"}
    assert repairs == [("output", 1, "image 'generated.png' → <resource>-0")]
    assert notes([]) == ()


def test_a_file_of_the_wrong_kind_is_not_replaced() -> None:
    plan, repairs = repaired(t("image-classification", image="memo.wav"))
    assert plan[0].args == {"image": "memo.wav"} and repairs == []  # check_plan refuses it


@pytest.mark.parametrize(
    ("tasks", "needle"),
    [
        ([t("no-such-task", text="x")], "unknown task 'no-such-task'"),
        ([t("image-generation", text="x")], "unknown task 'image-generation'"),
        ([t(5, text="x")], "unknown task 5"),
        (
            [t("text-to-speech", 0, text="<resource>-4")],
            "takes text <resource>-4, which is no task in the plan",
        ),
        ([t("text-to-speech", 0, text="<resource>-0")], "<resource>-0, which is itself"),
        (
            [
                t("translation", 0, [1], text="<resource>-1"),
                t("summarization", 1, [0], text="<resource>-0"),
            ],
            "depend on each other in a cycle",
        ),
    ],
    ids=["unknown", "ambiguous", "not-a-name", "ref-nowhere", "ref-self", "cycle"],
)
def test_what_has_no_single_reading_is_refused(tasks: list[dict[str, Any]], needle: str) -> None:
    with pytest.raises(PlanError) as info:
        repaired(*tasks)
    assert needle in str(info.value)
    assert "JSON" in str(info.value)  # the message says how to answer instead


def test_repairs_compose_on_one_broken_plan() -> None:
    """The issue's field report in one answer: duplicate ids, a task depending
    on itself, dep [-1] beside a real reference, an unknown name, every input
    filled, an invented file."""
    plan, repairs = repaired(
        t("speech-to-text-model", 0, [0], audio="question.wav", image="example.jpg"),
        t("text-to-speech-generation", 0, [-1], text="<resource>-0", audio="no_audio"),
    )
    assert plain(plan) == [
        (0, "automatic-speech-recognition", [], {"audio": "memo.wav"}),
        (1, "text-to-speech", [0], {"text": "<resource>-0"}),
    ]
    kinds = sorted(k for k, _, _ in repairs)
    assert kinds == sorted(
        ["task_name", "task_name", "renumbered", "dropped_dep", "added_dep", "dropped_arg",
         "dropped_arg", "file"]
    )  # fmt: skip
    assert {RepairKind(k) for k in kinds} <= set(RepairKind)


def test_a_reference_to_itself_or_no_task_means_the_nearest_earlier_maker_of_its_kind() -> None:
    # Qwen's habit: ids counted from 1 in references, or the task naming its own output
    plan, repairs = repaired(
        t("automatic-speech-recognition", 0, audio="memo.wav"),
        t("translation", 1, text="<resource>-1"),
        t("text-to-image", 2, text="<resource>-7"),
    )
    assert plain(plan) == [
        (0, "automatic-speech-recognition", [], {"audio": "memo.wav"}),
        (1, "translation", [0], {"text": "<resource>-0"}),
        (2, "text-to-image", [1], {"text": "<resource>-1"}),
    ]
    assert [(k, task) for k, task, _ in repairs if k == "reference"] == [
        ("reference", 1),
        ("reference", 2),
    ]


def test_a_media_reference_to_itself_with_no_maker_becomes_the_one_file_of_its_kind() -> None:
    plan, repairs = repaired(t("image-classification", 0, image="<resource>-0"))
    assert plain(plan) == [(0, "image-classification", [], {"image": "photo.png"})]
    assert [k for k, _, _ in repairs] == ["reference", "file"]


def test_a_task_repeating_an_earlier_one_is_merged_into_it() -> None:
    # a looping model: the same drawing three times, the speech reading the last one's input
    plan, repairs = repaired(
        t("automatic-speech-recognition", 0, audio="memo.wav"),
        t("text-to-image", 1, [0], text="<resource>-0"),
        t("text-to-image", 2, [0], text="<resource>-0"),
        t("image-to-text", 3, [2], image="<resource>-2"),
        t("text-to-image", 4, [0], text="<resource>-0"),
    )
    assert plain(plan) == [
        (0, "automatic-speech-recognition", [], {"audio": "memo.wav"}),
        (1, "text-to-image", [0], {"text": "<resource>-0"}),
        (2, "image-to-text", [1], {"image": "<resource>-1"}),
    ]
    assert [(k, task) for k, task, _ in repairs if k == "merged"] == [("merged", 2), ("merged", 4)]


def test_tasks_alike_but_for_their_inputs_are_not_merged() -> None:
    plan, repairs = repaired(
        t("text-to-image", 0, text="a cat"),
        t("text-to-image", 1, text="a dog"),
    )
    assert len(plan) == 2 and repairs == []


def test_a_file_written_as_the_text_moves_to_the_input_of_its_kind() -> None:
    # a task taking text and an image, given the image as its text (the check then
    # asks for the question that is missing); a task taking no text loses it first
    plan, repairs = repaired(
        t("visual-question-answering", 0, text="photo.png"),
        t("image-classification", 1, text="photo.png"),
    )
    assert plain(plan) == [
        (0, "visual-question-answering", [], {"image": "photo.png"}),
        (1, "image-classification", [], {"image": "photo.png"}),
    ]
    assert [(k, task) for k, task, _ in repairs] == [("dropped_arg", 1), ("moved", 0), ("file", 1)]


def test_a_missing_input_is_the_output_of_the_one_dependency_making_its_kind() -> None:
    plan, repairs = repaired(
        t("text-to-image", 0, text="a red fox"),
        t("image-to-text", 1, [0]),
    )
    assert plain(plan)[1] == (1, "image-to-text", [0], {"image": "<resource>-0"})
    assert [k for k, _, _ in repairs] == ["output"]


def test_a_missing_input_of_a_task_whose_dependencies_make_other_kinds_is_the_one_file() -> None:
    plan, repairs = repaired(
        t("automatic-speech-recognition", 0, audio="memo.wav"),
        t("visual-question-answering", 1, [0], text="<resource>-0"),
    )
    assert plain(plan)[1] == (
        1, "visual-question-answering", [0], {"text": "<resource>-0", "image": "photo.png"}
    )  # fmt: skip
    assert [k for k, _, _ in repairs] == ["file"]


# The request and bridged repairs, on the first answers Qwen2.5-Coder-0.5B wrote
# on llama.cpp for TaskBench dev requests (tests/data/llamacpp_eval_answers.jsonl).
ASK = "Could you help me with the files I sent?"


def test_a_first_task_naming_its_own_output_as_text_takes_the_message() -> None:
    plan, repairs = repaired(t("text-to-speech", 0, [0], text="<resource>-0"), request=ASK)
    assert plain(plan) == [(0, "text-to-speech", [], {"text": ASK})]
    assert ("request", 0, "text <resource>-0 → the message") in repairs
    # without the message there is nothing to read it as: refused (the re-ask)
    with pytest.raises(PlanError, match="which is itself"):
        repaired(t("text-to-speech", 0, [0], text="<resource>-0"))


def test_a_reference_with_an_earlier_text_maker_is_not_the_message() -> None:
    plan, _ = repaired(
        t("automatic-speech-recognition", 0, audio="memo.wav"),
        t("summarization", 1, [1], text="<resource>-1"),
        request=ASK,
    )
    assert plain(plan)[1] == (1, "summarization", [0], {"text": "<resource>-0"})


def test_a_question_written_as_the_document_itself_is_the_message() -> None:
    handles = {"document.jpg": "image"}
    plan, repairs = repaired(
        t("document-question-answering", 0, text="document.jpg", image="document.jpg"),
        handles=handles,
        request=ASK,
    )
    assert plain(plan) == [
        (0, "document-question-answering", [], {"text": ASK, "image": "document.jpg"})
    ]
    assert [k for k, _, _ in repairs] == ["request"]


def test_a_text_task_given_an_image_gets_a_caption_of_it_first() -> None:
    handles = {"example.jpg": "image"}
    plan, repairs = repaired(t("text-classification", 0, text="example.jpg"), handles=handles,
                             request=ASK)  # fmt: skip
    assert plain(plan) == [
        (0, "image-to-text", [], {"image": "example.jpg"}),
        (1, "text-classification", [0], {"text": "<resource>-0"}),
    ]
    assert repairs == [
        ("bridged", 0, "image-to-text on example.jpg makes the text of task "
         "text-classification (text was 'example.jpg')"),
    ]  # fmt: skip
    check_plan(plan, handles=handles, runnable=list(TASKS), max_tasks=10)


def test_a_media_input_made_of_nothing_gets_the_converter_of_the_text_before_it() -> None:
    """describe example.jpg and make audio of it: image-to-text, then an
    audio clean-up of "<resource>-1" (itself): speech of the caption first."""
    handles = {"example.jpg": "image"}
    plan, repairs = repaired(
        t("image-to-text", 0, image="example.jpg"),
        t("audio-to-audio", 1, [0], audio="<resource>-1"),
        handles=handles,
        request=ASK,
    )
    assert plain(plan) == [
        (0, "image-to-text", [], {"image": "example.jpg"}),
        (1, "text-to-speech", [0], {"text": "<resource>-0"}),
        (2, "audio-to-audio", [0, 1], {"audio": "<resource>-1"}),
    ]
    assert [k for k, _, _ in repairs] == ["reference", "bridged"]
    check_plan(plan, handles=handles, runnable=list(TASKS), max_tasks=10)


def test_an_edit_of_no_image_draws_its_own_text_first_and_later_ids_move_up() -> None:
    plan, _ = repaired(
        t("image-to-image", 0, image="<resource>-5", text="vintage cars downtown"),
        t("image-to-text", 1, [0], image="<resource>-0"),
        handles={},
        request=ASK,
    )
    assert plain(plan) == [
        (0, "text-to-image", [], {"text": "vintage cars downtown"}),
        (1, "image-to-image", [0], {"image": "<resource>-0", "text": "vintage cars downtown"}),
        (2, "image-to-text", [1], {"image": "<resource>-1"}),
    ]


def test_an_image_input_fed_a_text_output_gets_an_image_drawn_from_it() -> None:
    handles = {"example.wav": "audio"}
    plan, _ = repaired(
        t("automatic-speech-recognition", 0, audio="example.wav"),
        t("image-to-text", 1, [0], image="<resource>-0"),
        handles=handles,
        request=ASK,
    )
    assert plain(plan) == [
        (0, "automatic-speech-recognition", [], {"audio": "example.wav"}),
        (1, "text-to-image", [0], {"text": "<resource>-0"}),
        (2, "image-to-text", [0, 1], {"image": "<resource>-1"}),
    ]
    check_plan(plan, handles=handles, runnable=list(TASKS), max_tasks=10)


def test_no_bridge_without_an_offered_converter_or_for_a_file_of_the_wrong_kind() -> None:
    handles = {"example.jpg": "image"}
    offered = [n for n in TASKS if n != "image-to-text"]
    with pytest.raises(PlanError, match="which is image, not text"):
        drafts, _ = read_drafts(json.dumps([t("text-classification", 0, text="example.jpg")]))
        plan, _ = repair_plan(drafts, handles=handles, runnable=offered, request_text=ASK)
        check_plan(plan, handles=handles, runnable=offered, max_tasks=10)
    # an image input given the audio file: the check says which kind it is, nothing is added
    plan, repairs = repaired(t("image-to-text", 0, image="memo.wav"), request=ASK)
    assert [k for k, _, _ in repairs] == [] and len(plan) == 1


def test_request_and_bridged_are_told() -> None:
    handles = {"example.jpg": "image"}
    drafts, _ = read_drafts(json.dumps([
        t("text-to-speech", 0, [0], text="<resource>-0"),
        t("text-classification", 1, text="example.jpg"),
    ]))  # fmt: skip
    _, repairs = repair_plan(drafts, handles=handles, runnable=list(TASKS), request_text=ASK)
    assert notes(repairs) == (
        PlanNote(PlanChange.REQUEST, 0, "<resource>-0", "", "text"),
        PlanNote(PlanChange.BRIDGED, 1, "example.jpg", "image-to-text", "text"),
    )


def test_nothing_is_made_in_place_of_a_file_name_or_when_there_are_files_to_choose_from() -> None:
    two = {"a.png": "image", "b.png": "image"}
    for handles, image in ((two, "/etc/passwd"), (two, "<resource>-3"), ({}, "question.png")):
        plan, repairs = repaired(
            t("image-classification", 0, image=image), handles=handles, request=ASK
        )
        assert [p.task for p in plan] == ["image-classification"], (handles, image)
        assert "bridged" not in [k for k, _, _ in repairs]
