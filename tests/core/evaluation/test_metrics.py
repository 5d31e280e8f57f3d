"""TaskBench's metrics on hand-computed examples (taskbench/evaluate.py's
definitions: per-request sets, micro-averaged F1, indel-ratio edit distance)."""

from __future__ import annotations

import json

import pytest

from core.evaluation.graphs import GraphNode, TaskGraph, graph_of_plan
from core.evaluation.metrics import (
    GoldScores,
    canonical_order,
    features,
    score_sample,
    sequence_similarity,
)
from core.planning import parse_plan


def graph(*nodes: tuple[str, tuple[str, ...]]) -> TaskGraph:
    return TaskGraph(tuple(GraphNode(task, args) for task, args in nodes))


def plan_graph(plan: list[dict[str, object]]) -> TaskGraph:
    return graph_of_plan(parse_plan(json.dumps(plan)))


CAPTION_THEN_SPEAK = graph(
    ("image-to-text", ("photo.jpg",)),
    ("text-to-speech", ("<node-0>",)),
)


def test_identical_plans_score_one_and_no_distance() -> None:
    s = score_sample(CAPTION_THEN_SPEAK, CAPTION_THEN_SPEAK)
    assert (s.nodes.tp, s.nodes.fp, s.nodes.fn) == (2, 0, 0)
    assert (s.edges.tp, s.edges.fp, s.edges.fn) == (1, 0, 0)
    assert s.arg_names.f1 == s.arg_values.f1 == 1.0
    assert s.similarity == 1.0


def test_one_wrong_tool_in_a_chain() -> None:
    # gold: caption photo.jpg, speak the caption; predicted: classify instead of caption
    predicted = graph(
        ("image-classification", ("photo.jpg",)),
        ("text-to-speech", ("<node-0>",)),
    )
    s = score_sample(CAPTION_THEN_SPEAK, predicted)
    # nodes {i2t, tts} vs {img-cls, tts}: 1 TP, 1 FP, 1 FN -> 2/(2+1+1)
    assert (s.nodes.tp, s.nodes.fp, s.nodes.fn) == (1, 1, 1)
    assert s.nodes.f1 == 0.5
    # edges (i2t, tts) vs (img-cls, tts): nothing in common
    assert (s.edges.tp, s.edges.fp, s.edges.fn) == (0, 1, 1)
    assert s.edges.f1 == 0.0
    # arg names: {i2t-image, tts-text} vs {img-cls-image, tts-text} (both sources output text)
    assert (s.arg_names.tp, s.arg_names.fp, s.arg_names.fn) == (1, 1, 1)
    # arg values: a reference's value is the source's name, so none match
    assert (s.arg_values.tp, s.arg_values.fp, s.arg_values.fn) == (0, 2, 2)
    # sequences [i2t, tts] vs [img-cls, tts]: LCS 1 -> 2*1/(2+2)
    assert s.similarity == 0.5


def test_f1_is_micro_averaged_over_requests() -> None:
    scores = GoldScores()
    scores.add(score_sample(CAPTION_THEN_SPEAK, CAPTION_THEN_SPEAK))  # nodes: 2 TP
    scores.add(
        score_sample(graph(("summarization", ("a.txt",))), graph(("translation", ("a.txt",))))
    )  # nodes: 1 FP, 1 FN
    # micro: 2*2 / (2*2 + 1 + 1) = 4/6, not the macro mean (1.0 + 0.0) / 2
    assert scores.nodes.f1 == pytest.approx(4 / 6)
    assert scores.requests == 2
    assert scores.ned == pytest.approx(1 - (1.0 + 0.0) / 2)


def test_argument_names_come_from_the_source_output_kind_and_file_extensions() -> None:
    gold = graph(
        ("text-to-image", ("a red fox",)),
        ("text-to-speech", ("<node-0>",)),  # fed an image: its argument is an image
        ("visual-question-answering", ("What is in it? see photo.png",)),  # .png -> image
    )
    f = features(gold)
    assert f.arg_names == {
        "text-to-image-text",
        "text-to-speech-image",
        "visual-question-answering-image",
    }
    assert "text-to-speech-image-text-to-image" in f.arg_values
    assert f.links == {("text-to-image", "text-to-speech")}


def test_renumbered_ids_aliases_and_order_are_not_errors() -> None:
    gold = plan_graph([
        {"task": "Image-to-Text", "id": 0, "dep": [-1], "args": {"image": "cat.png"}},
        {"task": "object-detection", "id": 1, "dep": [-1], "args": {"image": "cat.png"}},
        {"task": "tts", "id": 2, "dep": [0], "args": {"text": "<resource>-0"}},
    ])  # fmt: skip
    predicted = plan_graph([
        {"task": "detection", "id": 9, "dep": [-1], "args": {"image": "cat.png"}},
        {"task": "image-to-text", "id": 4, "dep": [-1], "args": {"image": "cat.png"}},
        {"task": "text-to-speech", "id": 7, "dep": [4], "args": {"text": "<GENERATED>-4"}},
    ])  # fmt: skip
    s = score_sample(gold, predicted)
    assert s.nodes.f1 == s.edges.f1 == s.arg_names.f1 == s.arg_values.f1 == 1.0
    assert s.similarity == 1.0  # same graph, written in another order


def test_tasks_compare_as_sets_per_request() -> None:
    # TaskBench counts each name once per request: a repeated task is one node
    gold = graph(("translation", ("hola",)), ("translation", ("ciao",)))
    s = score_sample(gold, graph(("translation", ("hola",))))
    assert (s.nodes.tp, s.nodes.fp, s.nodes.fn) == (1, 0, 0)
    assert (s.arg_values.tp, s.arg_values.fn) == (1, 1)
    assert s.similarity == pytest.approx(2 * 1 / 3)


def test_names_outside_the_table_count_in_no_node_f1() -> None:
    gold = graph(("summarization", ("x.txt",)))
    predicted = graph(("summarization", ("x.txt",)), ("sentence-similarity", ("a", "b")))
    s = score_sample(gold, predicted)
    assert (s.nodes.tp, s.nodes.fp, s.nodes.fn) == (1, 0, 0)
    assert s.arg_values.fp == 2  # but its arguments do count


def test_f1_with_nothing_to_count_is_none() -> None:
    s = score_sample(graph(("summarization", ("x.txt",))), graph(("summarization", ("x.txt",))))
    assert s.edges.f1 is None  # no edge in either plan
    assert GoldScores().ned is None


def test_a_reference_to_itself_is_skipped() -> None:
    s = score_sample(graph(("summarization", ("<node-0>",))), graph(("summarization", ())))
    assert s.edges.f1 is None
    assert s.arg_names.f1 is None


def test_question_answering_text_is_its_two_arguments() -> None:
    plan = [{"task": "question-answering", "id": 0, "dep": [-1],
             "args": {"question": "Where?", "context": "In Paris."}}]  # fmt: skip
    assert plan_graph(plan).nodes[0].args == ("Where?", "In Paris.")


@pytest.mark.parametrize(
    ("a", "b", "ratio"),
    [
        (["a", "b", "c"], ["a", "c"], 4 / 5),  # LCS 2
        (["a", "b"], ["b", "a"], 2 / 4),  # LCS 1 (a swap costs two edits)
        (["a"], [], 0.0),
        ([], [], 1.0),
    ],
)
def test_sequence_similarity_is_levenshtein_ratio(a: list[str], b: list[str], ratio: float) -> None:
    assert sequence_similarity(a, b) == pytest.approx(ratio)


def test_canonical_order_puts_a_task_after_what_it_needs() -> None:
    g = graph(
        ("text-to-speech", ("<node-2>",)),
        ("object-detection", ("x.jpg",)),
        ("image-to-text", ("x.jpg",)),
    )
    assert canonical_order(g) == ("image-to-text", "object-detection", "text-to-speech")
