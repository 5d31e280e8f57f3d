"""``python -m bot eval plans DATASET.jsonl`` end to end: a real process, the
real ``openai`` client, the loopback OpenAI fake scripted with known plans.

Seven requests (and an eighth ``--limit`` leaves out): a correct single plan,
a correct chain written with other ids and the paper's aliases, a parallel
pair whose first answer is cut off and fixed on the re-ask, an invented task
(asked again, invented again), a chain that reads a picture aloud (valid,
type-inconsistent, one task short of the gold), one without gold, and a
TaskBench line whose gold needs a tool we do not have.  Every figure below
is computed by hand in the comments.
"""

from __future__ import annotations

import io
import json
import logging
import re
import sys
from pathlib import Path
from typing import Any

import pytest

from bot.eval_command import _Progress
from core.evaluation.datasets import item_of
from core.evaluation.runner import Attempt, RequestResult
from core.planning import PlannedTask
from core.tasks import TASKS
from tests.fakes.hf_fake import FakeHF
from tests.fakes.openai_fake import FakeLLM
from tests.fakes.process_env import clean_env, fake_env, run_bot


def task(name: str, id: int, dep: list[int], **args: str) -> dict[str, Any]:
    return {"task": name, "id": id, "dep": dep or [-1], "args": args}


ROWS: list[dict[str, Any]] = [
    {"id": "caption", "request": "Write a caption for beach_sunset.jpg.",
     "plan": [task("image-to-text", 0, [], image="beach_sunset.jpg")]},
    {"id": "podcast", "request": "Transcribe podcast.mp3 and summarise it.",
     "plan": [task("automatic-speech-recognition", 0, [], audio="podcast.mp3"),
              task("summarization", 1, [0], text="<resource>-0")]},
    {"id": "photos", "request": "Caption both photo1.jpg and photo2.jpg.",
     "plan": [task("image-to-text", 0, [], image="photo1.jpg"),
              task("image-to-text", 1, [], image="photo2.jpg")]},
    {"id": "garden", "request": "Make garden.jpg look like an oil painting.",
     "plan": [task("image-to-image", 0, [], image="garden.jpg", text="an oil painting")]},
    {"id": "fox", "request": "Draw a red fox in the snow, describe the picture and read that aloud.",
     "plan": [task("text-to-image", 0, [], text="a red fox in the snow"),
              task("image-to-text", 1, [0], image="<resource>-0"),
              task("text-to-speech", 2, [1], text="<resource>-1")]},
    {"id": "speak", "request": 'Read this out loud: "Your table is ready."'},
    {"id": "similar", "type": "single",
     "instruction": "How similar are 'a cat sat' and 'a cat sits'?",
     "task_nodes": [{"task": "Sentence Similarity", "arguments": ["a cat sat", "a cat sits"]}],
     "task_links": []},
    {"id": "left-out", "request": "Transcribe left_out.wav."},
]  # fmt: skip

FIRST: dict[str, Any] = {
    "caption": ROWS[0]["plan"],
    # the same chain with other ids and the paper's names
    "podcast": [task("ASR", 5, [], audio="podcast.mp3"),
                task("Summarization", 9, [5], text="<GENERATED>-5")],
    "photos": '[{"task": "image-to-text", "id": 0, "dep": [-1], "args": {"image": "photo1.jpg"}}, '
              '{"task": "image-to-te',
    "garden": [task("style-transfer", 0, [], image="garden.jpg")],
    "fox": [task("text-to-image", 0, [], text="a red fox in the snow"),
            task("text-to-speech", 1, [0], text="<resource>-0")],
    "speak": [task("text-to-speech", 0, [], text="Your table is ready.")],
    "similar": [],
}  # fmt: skip
AGAIN: dict[str, Any] = {
    "photos": ROWS[2]["plan"],
    "garden": [task("image-style-transfer", 0, [], image="garden.jpg")],
}


class Script:
    """The fake's plan answers, by request (the first answer, or the re-ask's);
    every (request body, answer) kept to recount the tokens the fake reported."""

    def __init__(self) -> None:
        self.sent: list[tuple[dict[str, Any], str]] = []

    def __call__(self, body: dict[str, Any]) -> str:
        messages = body["messages"]
        user = [
            m["content"] for m in messages if m["role"] == "user" and "<request>" in m["content"]
        ]
        request = user[-1].split("<request>\n", 1)[1].split("\n</request>", 1)[0]
        row = next(r for r in ROWS if r.get("request", r.get("instruction")) == request)
        reask = messages[-2]["role"] == "assistant" and "<request>" not in messages[-1]["content"]
        answer = (AGAIN if reask else FIRST)[row["id"]]
        text = answer if isinstance(answer, str) else json.dumps(answer)
        self.sent.append((body, text))
        return text


def table(out: str, title: str) -> dict[str, list[str]]:
    """The rows of the table under ``title``: shape -> its cells."""
    lines = out.split(title, 1)[1].splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("shape"))
    rows: dict[str, list[str]] = {}
    for line in lines[start + 1 :]:
        if not line.strip() or not line[0].islower():
            break
        cells = re.split(r"\s{2,}", line.strip())
        rows[cells[0]] = cells[1:]
    return rows


async def test_eval_plans_end_to_end(tmp_path: Path, llm_fake: FakeLLM) -> None:
    dataset = tmp_path / "plans.jsonl"
    dataset.write_text("".join(json.dumps(r) + "\n" for r in ROWS), encoding="utf-8")
    script = Script()
    llm_fake.reply("plan", *[script] * 20)
    env = clean_env(tmp_path) | {"OPENAI_API_KEY": "sk-test", "OPENAI_BASE_URL": llm_fake.base_url}
    report = tmp_path / "out.json"
    code, out, err = await run_bot(
        "eval", "plans", str(dataset), "--limit", "7", "--concurrency", "3",
        "--report", str(report), env=env, cwd=tmp_path,
    )  # fmt: skip
    assert code == 0, err
    assert "Traceback" not in err
    # stderr is no terminal: plain progress lines, no bar frames
    assert "\r" not in err
    assert "planning: 7/7 requests, valid 6/7" in err.splitlines()
    assert "Planning: 7 requests" in out and "25 tasks offered" in out

    # 9 planning calls: 7 requests, 2 re-asks; the eighth request never sent
    assert len(llm_fake.calls("plan")) == 9
    assert not any("left_out.wav" in json.dumps(b) for b in llm_fake.calls())

    planning = table(out, "Planning:")
    # columns: requests, parsed, valid, re-asked, invented, type-inconsistent, LLM errors, …
    # single: caption, garden (invented twice), speak (no gold: its plan's shape), similar
    assert planning["single"][:7] == ["4", "75.0%", "75.0%", "25.0%", "25.0%", "0.0%", "0"]
    # chain: podcast, fox (a picture read aloud)
    assert planning["chain"][:7] == ["2", "100.0%", "100.0%", "0.0%", "0.0%", "50.0%", "0"]
    # dag: photos, cut off then fixed
    assert planning["dag"][:7] == ["1", "0.0%", "100.0%", "100.0%", "0.0%", "0.0%", "0"]
    # all: parsed 5/7, valid 6/7, re-asked 2/7, invented 1/7, inconsistent 1/7
    assert planning["all"][:7] == ["7", "71.4%", "85.7%", "28.6%", "14.3%", "14.3%", "0"]

    # TaskBench's figures: every request with gold, its own tool names; our-format gold written
    # as TaskBench nodes.  Per request (tool numbers: I2T 12, I2I 11, T2I 13, TTS 19, SS 7):
    #   caption [I2T] = gold: nodes TP 1, arg names TP 1, values TP 1, ratio 1
    #   garden  gold [I2I: "an oil painting", garden.jpg], no plan: nodes FN 1, names FN 2
    #           (text, image), values FN 2, ratio 0
    #   similar gold [Sentence Similarity: two texts], plan []: nodes FN 1, names FN 1,
    #           values FN 2, ratio 0
    #   podcast = gold: nodes TP 2, link TP 1, names TP 2, values TP 2, ratio 1
    #   fox     [T2I, TTS <node-0>] vs [T2I, I2T <node-0>, TTS <node-1>]: nodes TP 2 FN 1,
    #           links FP 1 FN 2, names {T2I-text, TTS-image} vs {T2I-text, I2T-image,
    #           TTS-text}: TP 1 FP 1 FN 2, values likewise, ratio 1 - (5 - 4)/5 = 0.8
    #   photos  = gold (two I2T, one name): nodes TP 1, names TP 1, values TP 2, ratio 1
    exact = table(out, "TaskBench's figures")
    assert "exactly as its evaluate.py computes them: 6 of 6 requests scored" in out
    # columns: requests, scored, node F1, node macro-F1, edge F1, arg-name F1, arg-value F1, ED
    # single (caption, garden, similar): nodes TP 1 FN 2 -> 2/(2+2) = 50.00; macro: only I2T
    #   scores (1 of 23 tools) 4.35; no link: 0; names TP 1 FN 3 -> 2/6; values TP 1 FN 4 ->
    #   2/7; ED 1 - 1/3
    assert exact["single"] == ["3", "3", "50.00", "4.35", "0.00", "40.00", "33.33", "0.6667"]
    # chain (podcast, fox): nodes TP 4 FN 1 -> 8/9; macro: ASR, Summ, T2I, TTS score 1 of 23 ->
    #   4/23; links TP 1 FP 1 FN 2 -> 2/5; names and values TP 3 FP 1 FN 2 -> 6/9; ED 1 - 1.8/2
    assert exact["chain"] == ["2", "2", "88.89", "17.39", "40.00", "66.67", "66.67", "0.1000"]
    assert exact["dag"] == ["1", "1", "100.00", "4.35", "0.00", "100.00", "100.00", "0.0000"]
    # all: nodes TP 6 FN 3 -> 12/15; macro (I2T P 1 R 2/3 F1 0.8, ASR, Summ, T2I, TTS 1) ->
    #   4.8/23; names TP 5 FP 1 FN 5 -> 10/16; values TP 6 FP 1 FN 6 -> 12/19; ED 1 - 3.8/6
    assert exact["all"] == ["6", "6", "80.00", "20.87", "40.00", "62.50", "63.16", "0.3667"]
    assert "Scored as a plan with no task: 1 request whose last answer did not parse" in out

    gold = table(out, "Our view:")
    assert "Our view: 5 of 7 requests scored" in out
    # columns: scored, node F1, edge F1, arg-name F1, arg-value F1, NED
    # single: caption perfect; garden no plan (1 node, 2 args missed; similarity 0)
    #   nodes 2·1/(2·1+1) = 66.67, args 2·1/(2·1+2) = 50.00, NED 1 − (1+0)/2
    assert gold["single"] == ["2", "66.67", "—", "50.00", "50.00", "0.5000"]
    # chain: podcast perfect (2 nodes, 1 edge, 2 args); fox: nodes TP 2 FN 1, edges FP 1
    #   FN 2, args TP 1 FP 1 FN 2, similarity 2·2/5 → nodes 8/9, edges 2/5, args 6/9, NED 0.1
    assert gold["chain"] == ["2", "88.89", "40.00", "66.67", "66.67", "0.1000"]
    # dag: photos right on the re-ask (one name, one arg name, two arg values)
    assert gold["dag"] == ["1", "100.00", "—", "100.00", "100.00", "0.0000"]
    # all: nodes 12/14, edges 2/5, arg names 10/15, arg values 12/17, NED 1 − 3.8/5
    assert gold["all"] == ["5", "85.71", "40.00", "66.67", "70.59", "0.2400"]
    assert (
        "Not scored in our view: 1 request whose gold uses a tool we do not have "
        "(Sentence Similarity 1)" in out
    )
    assert out.index("TaskBench's figures") < out.index("Our view:")
    assert "Repairs: renumbered 1" in out  # podcast's ids 5 and 9
    assert "Invented tasks: style-transfer 1, image-style-transfer 1" in out
    assert f"Report: {report}" in out

    data = json.loads(report.read_text(encoding="utf-8"))
    every = data["planning"]["all"]
    assert every["requests"] == 7
    assert every["parse_rate"] == 5 / 7 and every["valid_rate"] == 6 / 7
    assert every["reask_rate"] == 2 / 7
    assert every["counts"]["invented_names"] == 2
    assert every["counts"]["inconsistent_links"] == 1
    # the tokens are the fake's own counts
    prompt = sum(sum(len(m["content"]) for m in b["messages"]) // 4 for b, _ in script.sent)
    completion = sum(len(a) // 4 for _, a in script.sent)
    assert every["counts"]["llm_calls"] == 9
    assert (every["counts"]["prompt_tokens"], every["counts"]["completion_tokens"]) == (
        prompt,
        completion,
    )
    assert every["mean_tokens"] == (prompt + completion) / 7
    latencies = [r["latency_s"] for r in data["requests"]]
    assert all(t >= 0 for t in latencies)
    assert abs(every["mean_latency_s"] - sum(latencies) / 7) < 1e-3

    tb = data["taskbench"]
    assert tb["overall"]["requests"] == 6 and tb["overall"]["node_f1"] == pytest.approx(12 / 15)
    assert tb["evaluate_py"]["chain_overall"]["link_binary_f1"] == pytest.approx(2 / 5)
    assert tb["evaluate_py"]["overall_overall"]["edit_distance"] == pytest.approx(1 - 3.8 / 6)
    assert data["repairs"] == {"renumbered": 1}

    g = data["gold"]
    assert (g["requests_with_gold"], g["scored"], g["excluded_missing_tools"]) == (6, 5, 1)
    assert g["missing_tools"] == {"Sentence Similarity": 1}
    assert g["by_shape"]["all"]["node_f1"] == 12 / 14
    assert g["by_shape"]["all"]["arg_value_f1"] == 12 / 17
    assert g["by_shape"]["all"]["ned"] == 1 - 3.8 / 5
    assert g["by_shape"]["single"]["edge_f1"] is None

    by_id = {r["id"]: r for r in data["requests"]}
    assert list(by_id) == [r["id"] for r in ROWS[:7]]  # in dataset order
    # the plan scored: the answer's, repaired (ids 5 and 9 renumbered)
    assert by_id["podcast"]["plan"] == [
        {"task": "automatic-speech-recognition", "id": 0, "dep": [], "args": {"audio": "podcast.mp3"}},
        {"task": "summarization", "id": 1, "dep": [0], "args": {"text": "<resource>-0"}},
    ]  # fmt: skip
    assert by_id["podcast"]["plan_taskbench"] == [
        {"task": "Automatic Speech Recognition", "arguments": ["podcast.mp3"]},
        {"task": "Summarization", "arguments": ["<node-0>"]},
    ]
    assert by_id["podcast"]["scores"]["ours"]["nodes"] == {"tp": 2, "fp": 0, "fn": 0, "f1": 1.0}
    assert by_id["podcast"]["scores"]["taskbench"]["links"] == {"tp": 1, "fp": 0, "fn": 0}
    assert by_id["podcast"]["repairs"] == {"renumbered": 1}
    assert [a["parsed"] for a in by_id["photos"]["answers"]] == [False, True]
    assert by_id["garden"]["invented"] == ["style-transfer", "image-style-transfer"]
    # refused twice: the last answer is what was scored, as it came
    assert by_id["garden"]["valid"] is False and by_id["garden"]["plan_status"] == "unparsed"
    assert json.loads(by_id["garden"]["plan"]) == AGAIN["garden"]
    assert by_id["garden"]["plan_taskbench"] == []
    assert by_id["fox"]["inconsistent"] == [
        "task 0 (text-to-image) makes image, given to task 1 (text-to-speech) as text"
    ]
    assert by_id["speak"]["gold"] is None and by_id["speak"]["shape"] == "single"
    assert by_id["similar"]["gold_missing_tools"] == ["Sentence Similarity"]
    # the gold as given, in TaskBench's names, scored by TaskBench's rules
    assert by_id["similar"]["gold"] == ROWS[6]["task_nodes"]
    assert by_id["similar"]["scores"]["taskbench"]["nodes"] == {"tp": 0, "fp": 0, "fn": 1}
    assert by_id["similar"]["scores"]["ours"] is None


async def test_a_bad_dataset_is_one_error_line(tmp_path: Path, llm_fake: FakeLLM) -> None:
    dataset = tmp_path / "bad.jsonl"
    dataset.write_text('{"request": "fine"}\n{"id": 2}\n', encoding="utf-8")
    env = clean_env(tmp_path) | {"OPENAI_API_KEY": "sk-test", "OPENAI_BASE_URL": llm_fake.base_url}
    code, out, err = await run_bot("eval", "plans", str(dataset), env=env, cwd=tmp_path)
    assert code == 1
    assert err.strip().splitlines()[-1] == (
        f"error: {dataset}, line 2: no request text (one of request, user_request, instruction)"
    )
    assert "Traceback" not in err and out == ""
    assert llm_fake.calls() == []


async def test_only_the_deployment_s_tasks_when_asked(
    tmp_path: Path, llm_fake: FakeLLM, hf_fake: FakeHF
) -> None:
    dataset = tmp_path / "one.jsonl"
    dataset.write_text('{"request": "Describe cat.png"}\n', encoding="utf-8")
    llm_fake.reply("plan", json.dumps([{"task": "image-to-text", "id": 0, "dep": [-1],
                                        "args": {"image": "cat.png"}}]))  # fmt: skip
    report = tmp_path / "out.json"
    env = fake_env(tmp_path, llm_fake, hf_fake)  # remote inference, the test catalog
    code, out, err = await run_bot(
        "eval", "plans", str(dataset), "--tasks", "deployment", "--report", str(report),
        env=env, cwd=tmp_path,
    )  # fmt: skip
    assert code == 0, err
    offered = json.loads(report.read_text(encoding="utf-8"))["tasks_offered"]
    assert "image-to-text" in offered and "video-classification" not in offered
    assert f"{len(offered)} tasks offered" in out
    # the planner's prompt lists those tasks and no other
    (body,) = llm_fake.calls("plan")
    listed = body["messages"][0]["content"].split("Tasks, by inputs -> output:", 1)[1]
    assert {t for t in TASKS if re.search(rf"(?<![\w-]){t}(?![\w-])", listed)} == set(offered)


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def _result(valid: bool) -> Any:
    """A planned request as the progress sees it."""
    item = item_of({"request": "x"}, "r")
    plan = (PlannedTask(0, "text-generation", [], {"text": "x"}),)
    return RequestResult(item, [Attempt("[…]", plan, None if valid else "refused")])


def test_progress_in_a_log_is_whole_lines_that_log_lines_do_not_break() -> None:
    stream = io.StringIO()  # not a terminal
    handler = logging.StreamHandler(stream)
    log = logging.getLogger("test.eval.progress")
    log.addHandler(handler)
    try:
        progress = _Progress(5, stream=stream, step=2)
        for n in range(5):
            progress.update(_result(valid=n != 1))
            if n == 2:
                log.warning("the language model is slow")
        progress.close()
    finally:
        log.removeHandler(handler)
    assert stream.getvalue().splitlines() == [
        "planning: 2/5 requests, valid 1/2",
        "the language model is slow",
        "planning: 4/5 requests, valid 3/4",
        "planning: 5/5 requests, valid 4/5",  # the last one always
    ]


def test_progress_on_a_terminal_is_a_bar_with_log_lines_above_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    terminal = _Terminal()
    monkeypatch.setattr(sys, "stderr", terminal)
    handler = logging.StreamHandler(sys.stderr)  # the console handler the bot sets up
    root = logging.getLogger()
    root.addHandler(handler)
    try:
        progress = _Progress(4)
        progress.update(_result(valid=True))
        logging.getLogger("test.eval.progress").warning("the language model is slow")
        progress.update(_result(valid=True))
        progress.close()
    finally:
        root.removeHandler(handler)
    written = terminal.getvalue()
    assert "\r" in written and "planning:" in written and "valid 2/2" in written  # bar frames
    pieces = re.split(r"[\r\n]", written)
    # the warning is a line of its own, not written into a frame of the bar
    assert "the language model is slow" in pieces
    assert not any("planning" in p and "slow" in p for p in pieces)
