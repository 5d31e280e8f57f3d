"""TaskBench's figures exactly as its ``evaluate.py`` computes them, on
hand-computed examples: unknown names, tools we lack, Image Editing,
out-of-range and negative references, dict and number arguments, requests
it leaves out, duplicate ids.  Every figure is worked out in the comments
(TP/FP/FN per request, then summed) from evaluate.py's rules, not from the
code under test."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from core.evaluation.taskbench import TOOL_OUTPUTS
from core.evaluation.taskbench_exact import (
    GroupFigures,
    Sample,
    SampleCounts,
    content_type,
    evaluate,
    prf,
    ratio,
    read_sample,
)

DATA = Path(__file__).resolve().parents[2] / "data"


def sample(id: str, split: str, gold: Any, predicted: Any) -> Sample:
    return Sample(id, {"task_nodes": gold}, {"task_nodes": predicted}, split)


def node(task: Any, *arguments: Any) -> dict[str, Any]:
    return {"task": task, "arguments": list(arguments)}


# Tool numbers in TaskBench's list (evaluate.py's tool_map): Sentence Similarity 7,
# Object Detection 9, Image-to-Image 11, Image-to-Text 12, Text-to-Speech 19,
# Automatic Speech Recognition 20, Image Editing 23, Summarization 3; unknown names 0.
EXAMPLES = [
    # A: TaskBench's Image Editing, planned as our image-to-image (TaskBench's Image-to-Image).
    sample(
        "a", "chain",
        [node("Image Editing", "Make it red", "car.jpg"), node("Image-to-Text", "<node-0>")],
        [node("Image-to-Image", "car.jpg", "Make it red"), node("Image-to-Text", "<node-0>")],
    ),
    # B: a tool we lack (Sentence Similarity); our plan uses a task TaskBench does not know.
    sample(
        "b", "single",
        [node("Sentence Similarity", "a cat sat", "a cat sits")],
        [node("text-classification", "a cat sat")],
    ),
    # C: the gold names a tool TaskBench does not know ("Speech to Text"); the
    # prediction refers past its end (<node-2> of 2 nodes).
    sample(
        "c", "chain",
        [node("Speech to Text", "talk.wav"), node("Summarization", "<node-0>")],
        [node("Automatic Speech Recognition", "talk.wav"), node("Summarization", "<node-2>")],
    ),
    # D: a gold node with "parameters", no "arguments": evaluate.py leaves it out.
    Sample(
        "d", {"task_nodes": [{"task": "Audio-to-Audio", "parameters": ["noisy.wav"]}]},
        {"task_nodes": [node("Audio-to-Audio", "noisy.wav")]}, "single",
    ),
    # E: dict arguments in the gold (their keys are read), "_" in a name, a
    # reference to itself, a negative reference (-3 of 3 nodes: the first).
    sample(
        "e", "dag",
        [
            {"task": "Object Detection", "arguments": {"image": "street.jpg"}},
            node("Text-to-Speech", "<node-0>"),
            node("Image-to-Text", "street.jpg"),
        ],
        [
            node("Object_Detection", "street.jpg", "<node-0>"),
            node("Text-to-Speech", "<node--3>"),
            node("Image-to-Text", "street.jpg"),
        ],
    ),
]  # fmt: skip


def counts(c: SampleCounts | str) -> dict[str, Any]:
    assert not isinstance(c, str), c
    return {
        "nodes": c.nodes.to_json(),
        "links": c.links.to_json(),
        "arg_names": c.arg_names.to_json(),
        "arg_values": c.arg_values.to_json(),
        "similarity": c.similarity,
    }


def test_each_request_counted_as_evaluate_py_reads_it() -> None:
    scores = evaluate(EXAMPLES, TOOL_OUTPUTS)
    # A: names {Image Editing, Image-to-Text} vs {Image-to-Image, Image-to-Text}: TP 1 FP 1 FN 1.
    #    links (Image Editing → Image-to-Text) vs (Image-to-Image → Image-to-Text): FP 1 FN 1.
    #    arg names {IE-text, IE-image, I2T-image} vs {I2I-image, I2I-text, I2T-image}: TP 1 FP 2
    #    FN 2 (a reference's type is the output type of the tool referred to: image for both).
    #    arg values: the reference's value is the tool's name, so none match: FP 3 FN 3.
    #    sequences [11, 12] vs [23, 12]: LCS 1, ratio 1 - (4 - 2)/4 = 0.5.
    assert counts(scores.samples["a"]) == {
        "nodes": {"tp": 1, "fp": 1, "fn": 1},
        "links": {"tp": 0, "fp": 1, "fn": 1},
        "arg_names": {"tp": 1, "fp": 2, "fn": 2},
        "arg_values": {"tp": 0, "fp": 3, "fn": 3},
        "similarity": 0.5,
    }
    # B: text-classification is no TaskBench tool: node FN 1 (Sentence Similarity) only.
    #    arg names {SS-text} vs {text-classification-text}: FP 1 FN 1; values FP 1 FN 2.
    #    sequences [0] vs [7]: ratio 0.
    assert counts(scores.samples["b"]) == {
        "nodes": {"tp": 0, "fp": 0, "fn": 1},
        "links": {"tp": 0, "fp": 0, "fn": 0},
        "arg_names": {"tp": 0, "fp": 1, "fn": 1},
        "arg_values": {"tp": 0, "fp": 1, "fn": 2},
        "similarity": 0.0,
    }
    # C: "Speech to Text" counts in no node figure: known gold {Summarization}, predicted
    #    {ASR, Summarization}: TP 1 FP 1.  Gold link (Speech to Text → Summarization), its
    #    argument ("other": no output type for an unknown tool, "Speech to Text").  The
    #    prediction's <node-2> cannot be read: it is the last argument read again, (audio,
    #    talk.wav), and no link: links FN 1.
    #    arg names {StT-audio, Summarization-other} vs {ASR-audio, Summarization-audio}:
    #    FP 2 FN 2; values likewise.  Sequences [20, 3] vs [0, 3]: ratio 0.5.
    assert counts(scores.samples["c"]) == {
        "nodes": {"tp": 1, "fp": 1, "fn": 0},
        "links": {"tp": 0, "fp": 0, "fn": 1},
        "arg_names": {"tp": 0, "fp": 2, "fn": 2},
        "arg_values": {"tp": 0, "fp": 2, "fn": 2},
        "similarity": 0.5,
    }
    assert scores.samples["d"] == "gold node 0 has no arguments"
    # E: the gold's {"image": "street.jpg"} is read as its key: (text, "image").  Predicted
    #    Object_Detection is Object Detection; its <node-0> is itself (dropped); <node--3>
    #    is node 0.  names TP 3; links (OD → TTS) TP 1; arg names {OD-text, TTS-text,
    #    I2T-image} vs {OD-image, TTS-text, I2T-image}: TP 2 FP 1 FN 1; values likewise.
    assert counts(scores.samples["e"]) == {
        "nodes": {"tp": 3, "fp": 0, "fn": 0},
        "links": {"tp": 1, "fp": 0, "fn": 0},
        "arg_names": {"tp": 2, "fp": 1, "fn": 1},
        "arg_values": {"tp": 2, "fp": 1, "fn": 1},
        "similarity": 1.0,
    }


def test_the_figures_of_every_group() -> None:
    scores = evaluate(EXAMPLES, TOOL_OUTPUTS)
    overall = scores.to_json()["overall_overall"]
    assert (overall["all_samples"], overall["node_supports"]) == (5, 4)  # D left out
    # nodes: TP 1+0+1+3 = 5, FP 1+0+1+0 = 2, FN 1+1+0+0 = 2 -> P = R = F1 = 5/7
    assert overall["node_micro_precision_no_matching"] == pytest.approx(5 / 7)
    assert overall["node_micro_recall_no_matching"] == pytest.approx(5 / 7)
    assert overall["node_micro_f1_no_matching"] == pytest.approx(5 / 7)
    # macro, over all 23 tools: F1 1 for Image-to-Text (TP 2), Summarization, Object
    # Detection, Text-to-Speech; 0 for Image-to-Image, Image Editing, Sentence Similarity,
    # ASR and the 15 tools never named -> 4/23; precision and recall likewise 4/23
    assert overall["node_macro_f1_no_matching"] == pytest.approx(4 / 23)
    assert overall["node_macro_precision_no_matching"] == pytest.approx(4 / 23)
    assert overall["node_macro_recall_no_matching"] == pytest.approx(4 / 23)
    per_tool = overall["node_per_type_no_matchcing"]
    assert len(per_tool) == 23
    assert per_tool["Image-to-Text"] == {
        "precision": 1.0, "recall": 1.0, "f1-score": 1.0, "support": 2,
    }  # fmt: skip
    assert per_tool["Image Editing"]["support"] == 1 and per_tool["Image Editing"]["f1-score"] == 0
    # links: TP 1, FP 1, FN 1+1 -> P 1/2, R 1/3, F1 2·(1/2)(1/3)/(5/6) = 2/5
    assert overall["link_binary_f1"] == pytest.approx(2 / 5)
    # arg names: TP 1+0+0+2 = 3, FP 2+1+2+1 = 6, FN 2+1+2+1 = 6 -> 1/3
    assert overall["argument_task_argname_binary_f1_no_matching"] == pytest.approx(1 / 3)
    # arg values: TP 2, FP 3+1+2+1 = 7, FN 3+2+2+1 = 8 -> P 2/9, R 1/5, F1 4/19
    assert overall["argument_task_argname_value_binary_f1_no_matching"] == pytest.approx(4 / 19)
    # edit distance: 1 - mean(0.5, 0, 0.5, 1) = 0.5
    assert overall["edit_distance"] == pytest.approx(0.5)

    groups = scores.to_json()
    # single: B and D (left out) -> B alone: nodes FN 1 only, so F1 0; no link at all: 0
    single = groups["single_overall"]
    assert (single["all_samples"], single["node_supports"]) == (2, 1)
    assert single["node_micro_f1_no_matching"] == 0.0 and single["link_binary_f1"] == 0.0
    assert single["edit_distance"] == 1.0
    # chain: A and C -> nodes TP 2 FP 2 FN 1: P 1/2, R 2/3, F1 (2/3)/(7/6) = 4/7
    assert groups["chain_overall"]["node_micro_f1_no_matching"] == pytest.approx(4 / 7)
    assert groups["dag_overall"]["node_micro_f1_no_matching"] == 1.0
    # sizes: 1 node (B, D), 2 (A, C), 3 (E); none of 4 to 10 -> only the supports
    assert groups["overall_1"]["all_samples"] == 2
    assert groups["overall_2"]["edit_distance"] == pytest.approx(0.5)
    assert groups["overall_4"] == {
        "all_samples": 0, "step_supports": 0, "node_supports": 0,
        "link_supports": 0, "argument_supports": 0,
    }  # fmt: skip
    assert list(groups) == [
        "overall_overall", "single_overall", "chain_overall", "dag_overall",
        *(f"overall_{n}" for n in range(1, 11)),
    ]  # fmt: skip


def test_an_unreadable_argument_reuses_the_last_one_read_even_from_an_earlier_request() -> None:
    x = sample("x", "single", [node("Translation", "hola")], [node("Translation", "hola")])
    y = sample("y", "single", [node("Summarization", None)], [node("Summarization", "long text")])
    # y alone: its gold's null cannot be read and nothing was read before -> left out
    alone = evaluate([y], TOOL_OUTPUTS)
    assert isinstance(alone.samples["y"], str) and alone.overall.supports == 0
    # after x: the null is x's last argument, ("text", "hola"), under Summarization:
    # arg names {Summarization-text} both sides: TP 1; values {…-hola} vs {…-long text}: FP 1 FN 1
    both = evaluate([x, y], TOOL_OUTPUTS)
    assert counts(both.samples["y"])["arg_names"] == {"tp": 1, "fp": 0, "fn": 0}
    assert counts(both.samples["y"])["arg_values"] == {"tp": 0, "fp": 1, "fn": 1}


def test_a_number_in_the_gold_is_the_node_s_previous_argument() -> None:
    # TaskBench dev 13289627: ["Future of AI …", 250] reads as that text twice: one argument
    s = sample(
        "n", "single",
        [node("Text Generation", "Future of AI", 250)], [node("Text Generation", "Future of AI")],
    )  # fmt: skip
    c = counts(evaluate([s], TOOL_OUTPUTS).samples["n"])
    assert c["arg_values"] == {"tp": 1, "fp": 0, "fn": 0}


@pytest.mark.parametrize(
    ("argument", "read"),
    [
        ("<node-0", None),  # no ">": not readable
        ("<node-x>", None),
        ("a > b <node-0>", None),  # the first ">" is before the number: int("") fails
        ("see <node-0> here", ("text", "Image Classification")),  # the reference, not the text
        ("<node- 0 >", ("text", "Image Classification")),  # int() takes the spaces
        (["photo", "b.png"], ("image", "photo b.png")),  # a list, joined
        ({"x": "clip.mp4"}, ("video", "clip.mp4")),  # a dict's first value
        ({}, None),
    ],
)
def test_how_one_argument_is_read(argument: Any, read: tuple[str, str] | None) -> None:
    # the predicted node 1's argument after a readable ("text", "hello") in the same node
    gold = [node("Image Classification", "a.jpg"), node("Translation", "hello")]
    predicted = [node("Image Classification", "a.jpg"), node("Translation", "hello", argument)]
    s = sample("r", "chain", gold, predicted)
    last = read_sample(s, TOOL_OUTPUTS).predicted.args[-1]
    c = counts(evaluate([s], TOOL_OUTPUTS).samples["r"])
    # gold values {IC-image-a.jpg, Translation-text-hello}
    if read is None:  # read as the argument before it: nothing new
        assert last == ("Translation", "text", "hello")
        assert c["arg_values"] == {"tp": 2, "fp": 0, "fn": 0}
    else:  # one more value, Translation-<type>-<value>
        assert last == ("Translation", *read)
        assert c["arg_values"] == {"tp": 2, "fp": 1, "fn": 0}


def test_an_underscore_is_a_space_in_names_but_not_in_a_link_s_target() -> None:
    gold = [node("Image Classification", "a.jpg"), node("Token Classification", "<node-0>")]
    predicted = [node("Image_Classification", "a.jpg"), node("Token_Classification", "<node-0>")]
    c = counts(evaluate([sample("u", "chain", gold, predicted)], TOOL_OUTPUTS).samples["u"])
    assert c["nodes"] == {"tp": 2, "fp": 0, "fn": 0}
    assert c["arg_names"] == {"tp": 2, "fp": 0, "fn": 0}
    # evaluate.py writes a link's target as the node's task was written
    assert c["links"] == {"tp": 0, "fp": 1, "fn": 1}


def test_unknown_names_are_all_the_same_tool_in_the_edit_distance() -> None:
    s = sample(
        "k", "single", [node("Speech to Text", "a.wav")], [node("Voice Recognition", "a.wav")]
    )
    got = evaluate([s], TOOL_OUTPUTS)
    assert counts(got.samples["k"])["similarity"] == 1.0  # [0] vs [0]
    assert got.to_json()["overall_overall"]["node_micro_f1_no_matching"] == 0.0  # nothing known


def test_of_lines_with_the_same_id_the_last_is_scored() -> None:
    first = sample("same", "single", [node("Translation", "hola")], [node("Translation", "hola")])
    last = sample("same", "single", [node("Summarization", "x")], [node("Translation", "x")])
    got = evaluate([first, last], TOOL_OUTPUTS)
    assert got.overall.all_samples == 1
    assert counts(got.samples["same"])["nodes"] == {"tp": 0, "fp": 1, "fn": 1}


@pytest.mark.parametrize(
    "result",
    [{}, {"task_nodes": None}, {"task_nodes": [node(None, "a")]}, {"task_nodes": ["x"]}],
)
def test_a_prediction_evaluate_py_cannot_read_is_left_out(result: Any) -> None:
    s = Sample("p", {"task_nodes": [node("Translation", "hola")]}, result, "single")
    got = evaluate([s], TOOL_OUTPUTS)
    assert isinstance(got.samples["p"], str)
    assert (got.overall.all_samples, got.overall.supports) == (1, 0)
    assert not got.overall.scored


def test_an_empty_prediction_is_read() -> None:
    # no answer, or one that did not parse: scored as a plan with no task
    s = sample("e", "single", [node("Translation", "hola")], [])
    c = counts(evaluate([s], TOOL_OUTPUTS).samples["e"])
    assert c["nodes"] == {"tp": 0, "fp": 0, "fn": 1} and c["similarity"] == 0.0


def test_ratio_and_f1_follow_levenshtein_and_scikit_learn() -> None:
    assert ratio([1, 2, 3], [1, 3]) == pytest.approx(0.8)  # LCS 2: 1 - 1/5
    assert ratio([], []) == 1.0 and ratio([1], []) == 0.0
    assert prf(0, 0, 0).f1 == 0.0  # nothing to count: 0, not undefined
    assert prf(1, 1, 2).f1 == pytest.approx(2 * 0.5 * (1 / 3) / (0.5 + 1 / 3))
    assert GroupFigures().scored is False


@pytest.mark.parametrize(
    ("value", "kind"),
    [
        ("example.jpg", "image"),
        ("'clip.mp4'", "video"),
        ("please read memo.wav", "audio"),
        ("notes.aux", "audio"),  # ".au" is in it: TaskBench's rule, as it is
        ("Hello, world", "text"),
    ],
)
def test_content_type_is_taskbench_s(value: str, kind: str) -> None:
    assert content_type(value) == kind


def test_the_tool_list_is_taskbench_s() -> None:
    tools = json.loads((DATA / "taskbench_hf_tools.json").read_text())["nodes"]
    assert list(TOOL_OUTPUTS.items()) == [
        (t["id"], t["output-type"][0] if t["output-type"] else "none") for t in tools
    ]
