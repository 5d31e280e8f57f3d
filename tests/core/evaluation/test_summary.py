"""What an evaluation run adds up to, and what its report holds per request:
the plan scored (also when refused), that plan as TaskBench nodes, the gold
as given, and both views' scores."""

from __future__ import annotations

from typing import Any

import pytest

from core.evaluation.datasets import item_of
from core.evaluation.runner import Attempt, RequestResult
from core.evaluation.summary import plan_status, report_json, request_json, summarise
from core.plan_repair import Repair, RepairKind
from core.planning import PlannedTask

GOLD = [
    {"task": "Image-to-Text", "arguments": ["cat.png"]},
    {"task": "Text-to-Speech", "arguments": ["<node-0>"]},
]
CAPTION = PlannedTask(4, "image-to-text", [], {"image": "cat.png"})
SPEAK = PlannedTask(6, "text-to-speech", [4], {"text": "<resource>-4"})


def result(id: str, *attempts: Attempt, llm_error: str | None = None, **row: Any) -> RequestResult:
    line = {"id": id, "type": "chain", "instruction": "Caption cat.png and read it", **row}
    if "plan" not in row:
        line.setdefault("task_nodes", GOLD)
    return RequestResult(item_of(line, id), list(attempts), llm_error)


def test_a_refused_plan_is_the_one_scored_and_reported() -> None:
    refused = Attempt("[…]", (CAPTION, SPEAK), "task 6 needs a file", repairs=())
    r = result("refused", Attempt("not json", None, "not a plan"), refused)
    assert plan_status(r) == "refused" and not r.valid
    j = request_json(r)
    assert j["plan_status"] == "refused"
    assert j["plan"] == [
        {"task": "image-to-text", "id": 4, "dep": [], "args": {"image": "cat.png"}},
        {"task": "text-to-speech", "id": 6, "dep": [4], "args": {"text": "<resource>-4"}},
    ]
    assert j["plan_taskbench"] == [
        {"task": "Image-to-Text", "arguments": ["cat.png"]},
        {"task": "Text-to-Speech", "arguments": ["<node-0>"]},
    ]
    assert j["gold"] == GOLD and j["gold_taskbench"] == GOLD
    assert j["gold_ours"] == [
        {"task": "image-to-text", "arguments": ["cat.png"]},
        {"task": "text-to-speech", "arguments": ["<node-0>"]},
    ]
    assert j["scores"]["ours"]["nodes"] == {"tp": 2, "fp": 0, "fn": 0, "f1": 1.0}


def test_the_last_answer_is_scored_even_when_an_earlier_one_parsed() -> None:
    r = result(
        "cut", Attempt("[…]", (CAPTION,), "a file is missing"), Attempt('[{"task', None, "cut")
    )
    j = request_json(r)
    assert j["plan_status"] == "unparsed"
    assert j["plan"] == '[{"task'  # the raw answer, as it came
    assert j["plan_taskbench"] == []
    # our view scores the same: no task (gold 2 nodes missed)
    assert j["scores"]["ours"]["nodes"] == {"tp": 0, "fp": 0, "fn": 2, "f1": 0.0}
    none = result("none", llm_error="the language model did not answer within 120 s")
    assert plan_status(none) == "no answer" and request_json(none)["plan"] is None


def test_the_run_adds_up_both_views_and_the_repairs() -> None:
    valid = Attempt(
        "[…]", (CAPTION, SPEAK), None,
        repairs=(Repair(RepairKind.RENUMBERED, None, "ids"),
                 Repair(RepairKind.ADDED_DEP, 6, "dep on task 4")),
    )  # fmt: skip
    cut = Attempt("[", None, "cut off")
    renumbered = Attempt(
        "[…]", (CAPTION,), None, repairs=(Repair(RepairKind.RENUMBERED, None, "ids"),)
    )
    lacking = [{"task": "Sentence Similarity", "arguments": ["a", "b"]}]
    results = [
        result("1", valid),
        result("2", cut, cut),
        result("3", renumbered, task_nodes=lacking, type="single"),
        # the same id as line 1, later: TaskBench scores this one, not line 1
        result("1", renumbered),
    ]
    for r in results:
        r.usage.llm_calls = len(r.attempts)
    summary = summarise(results)
    assert summary.repairs == {"renumbered": 3, "added_dep": 1}
    assert (summary.taskbench_requests, summary.no_plan) == (4, 1)
    exact = summary.taskbench
    assert exact is not None
    # TaskBench: ids 1 (its last line: Image-to-Text only), 2 (nothing), 3 (a tool we lack)
    # nodes: id 1 TP 1 FN 1; id 2 FN 2; id 3: Image-to-Text FP 1, Sentence Similarity FN 1
    assert exact.overall.all_samples == 3
    # TP 1, FP 1, FN 1 + 2 + 1: 2·1 / (2·1 + 1 + 4)
    assert exact.overall.node_micro().f1 == pytest.approx(2 / 7)
    # ours: the three lines with our gold (3's tool we lack is left out)
    assert summary.gold["all"].requests == 3 and summary.excluded == 1
    data = report_json(summary, results, {"dataset": "x"})
    assert data["repairs"] == {"renumbered": 3, "added_dep": 1}
    tb = data["taskbench"]
    assert tb["overall"]["requests"] == 3 and tb["overall"]["node_f1"] == pytest.approx(2 / 7)
    assert tb["single"]["requests"] == 1 and tb["dag"] == {"samples": 0, "requests": 0}
    assert tb["evaluate_py"]["overall_overall"]["node_micro_f1_no_matching"] == pytest.approx(2 / 7)
    assert (tb["lines"], tb["scored_with_no_plan"], tb["left_out"]) == (4, 1, [])
    first, second = data["requests"][0], data["requests"][3]
    assert first["scores"]["taskbench"] == {
        "left_out": "a later line has the same id (TaskBench scores the last)"
    }
    assert second["scores"]["taskbench"]["nodes"] == {"tp": 1, "fp": 0, "fn": 1}
    assert data["requests"][0]["repairs"] == {"renumbered": 1, "added_dep": 1}
