"""Evaluation datasets: the paper's plan format, TaskBench's, and no gold; the
shipped hand-written gold set."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from core.evaluation.datasets import DatasetError, load_dataset
from core.evaluation.graphs import SHAPES
from core.planning import check_plan, parse_plan
from core.tasks import MODALITIES, TASKS

GOLD = Path(__file__).resolve().parents[2] / "data" / "eval_gold_plans.jsonl"


def write(tmp_path: Path, *rows: object) -> Path:
    path = tmp_path / "set.jsonl"
    lines = [r if isinstance(r, str) else json.dumps(r) for r in rows]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def test_the_three_formats(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        {"id": "p1", "request": "Caption cat.png then read it aloud",
         "plan": [{"task": "Image-to-Text", "id": 3, "dep": [-1], "args": {"image": "cat.png"}},
                  {"task": "tts", "id": 5, "dep": [3], "args": {"text": "<resource>-3"}}]},
        {"id": "t1", "type": "single", "instruction": "Classify 'example.jpg' please",
         "task_nodes": [{"task": "Image Classification", "arguments": ["example.jpg"]}],
         "task_links": []},
        {"id": "r1", "user_request": "Transcribe talk.WAV and summarise notes.txt"},
        "",
    )  # fmt: skip
    paper, tb, plain = load_dataset(path)
    assert paper.files == (("cat.png", "image"),)
    assert paper.shape == "chain"
    assert paper.gold is not None
    assert [(n.task, n.args) for n in paper.gold.nodes] == [
        ("image-to-text", ("cat.png",)),
        ("text-to-speech", ("<node-0>",)),  # ids renumbered to positions
    ]
    assert tb.shape == "single" and tb.gold is not None
    assert tb.gold.nodes[0].task == "image-classification"
    assert tb.files == (("example.jpg", "image"),)
    assert plain.gold is None and not plain.has_gold and plain.shape is None
    assert plain.files == (("talk.WAV", "audio"), ("notes.txt", "text"))


def test_the_gold_kept_as_given_and_as_taskbench_nodes(tmp_path: Path) -> None:
    given = [
        {"task": "Sentence Similarity", "arguments": ["a", "b"]},  # a tool we lack
        {"task": "Text-to-Speech", "arguments": {"text": "<node-0>"}},  # a dict, as given
    ]
    path = write(
        tmp_path,
        {"id": "t", "type": "chain", "instruction": "x", "task_nodes": given},
        {"id": "p", "request": "Caption cat.png then read it aloud",
         "plan": [{"task": "Image-to-Text", "id": 3, "dep": [-1], "args": {"image": "cat.png"}},
                  {"task": "tts", "id": 5, "dep": [3], "args": {"text": "<resource>-3"}}]},
        {"id": "s", "type": "dag", "request": "x",
         "plan": [{"task": "sentence-similarity", "id": 0, "dep": [-1], "args": {"text": "a"}}]},
    )  # fmt: skip
    tb, paper, lacking = load_dataset(path)
    # TaskBench's line: scored by TaskBench's rules as it is, not by ours (a tool we lack)
    assert tb.gold_given == given and tb.taskbench_gold == given
    assert tb.taskbench_type == "chain" and tb.gold is None and tb.has_gold
    # our format: written as TaskBench would, under TaskBench's names
    assert paper.taskbench_gold == [
        {"task": "Image-to-Text", "arguments": ["cat.png"]},
        {"task": "Text-to-Speech", "arguments": ["<node-0>"]},
    ]
    assert paper.taskbench_type == "chain" and paper.gold_given[1]["task"] == "tts"
    # our format naming a task we do not know: nothing TaskBench's figures can take
    assert lacking.taskbench_gold is None and lacking.gold_given[0]["task"] == "sentence-similarity"


def test_files_given_as_handles_or_pairs(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        {"request": "what is in it?", "files": ["a.png", ["rec", "audio"], "a.png"]},
    )
    (item,) = load_dataset(path)
    assert item.id == "line-1"
    assert item.files == (("a.png", "image"), ("rec", "audio"))


def test_gold_with_a_task_we_lack_is_counted_not_scored(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        {"request": "x", "plan": [{"task": "sentence-similarity", "id": 0, "dep": [-1],
                                   "args": {"text": "a"}}]},
        {"request": "y", "plan": [{"task": "summarization", "id": 0, "dep": [1],
                                   "args": {"text": "a"}}]},
    )  # fmt: skip
    lacking, broken = load_dataset(path)
    assert lacking.gold is None and lacking.missing == ("sentence-similarity",)
    assert lacking.has_gold
    assert broken.gold is None and broken.gold_problem is not None
    assert "not in the plan" in broken.gold_problem


@pytest.mark.parametrize(
    ("line", "words"),
    [
        ("{not json", "line 2: not JSON"),
        ('["a list"]', "line 2: expected a JSON object"),
        ('{"id": 1}', "line 2: no request text"),
        ('{"request": "x", "files": "a.png"}', "line 2: files must be a list"),
        ('{"request": "x", "files": [["a", "smell"]]}', "line 2: files: the kind of 'a'"),
        ('{"request": "x", "plan": {"task": "summarization"}}', "line 2: the gold plan must be"),
    ],
)
def test_a_bad_line_is_named(tmp_path: Path, line: str, words: str) -> None:
    path = write(tmp_path, {"request": "fine"}, line)
    with pytest.raises(DatasetError, match=words):
        load_dataset(path)


def test_missing_or_empty_files_are_one_clear_error(tmp_path: Path) -> None:
    with pytest.raises(DatasetError, match="cannot read the dataset"):
        load_dataset(tmp_path / "nope.jsonl")
    with pytest.raises(DatasetError, match="holds no request"):
        load_dataset(write(tmp_path, ""))


def test_the_shipped_gold_set_covers_every_shape_task_and_modality() -> None:
    items = load_dataset(GOLD)
    assert 55 <= len(items) <= 70
    assert len({i.id for i in items}) == len(items)
    shapes = Counter(i.shape for i in items)
    assert set(shapes) == set(SHAPES) and min(shapes.values()) >= 15
    tasks: set[str] = set()
    kinds: set[str] = set()
    for line in GOLD.read_text(encoding="utf-8").splitlines():
        row = json.loads(line)
        item = next(i for i in items if i.id == row["id"])
        plan = parse_plan(json.dumps(row["plan"]))
        # every gold plan is one the bot would run: known tasks, files of the request
        check_plan(plan, handles=dict(item.files), runnable=list(TASKS), max_tasks=10)
        tasks |= {t.task for t in plan}
        kinds |= {k for t in plan for k in t.args} | {k for _, k in item.files}
    assert tasks == set(TASKS)
    assert kinds == set(MODALITIES)
