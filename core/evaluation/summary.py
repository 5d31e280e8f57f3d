"""The figures of an evaluation run, per plan shape and over all requests,
and the JSON report (figures, then every request with its answers).

Against gold, both views score the same prediction per request: the plan of
the LLM's last answer as parsed, valid or refused (:func:`scored_plan`); no
task when that answer did not parse or no answer came.  TaskBench's own
figures (:mod:`.taskbench_exact`) read it as TaskBench nodes
(:func:`prediction`), ours (:mod:`.metrics`) as a graph in our names.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from core.evaluation.graphs import NONE, SHAPES, graph_of_plan
from core.evaluation.metrics import GoldScores, SampleScore, score_sample
from core.evaluation.runner import Attempt, RequestResult
from core.evaluation.taskbench import TOOL_OUTPUTS, plan_nodes
from core.evaluation.taskbench_exact import (
    OVERALL,
    SPLITS,
    ExactScores,
    GroupFigures,
    Sample,
    SampleCounts,
    evaluate,
)
from core.planning import PlannedTask

ALL = "all"
ANSWER_CHARS = 4000  # of each LLM answer kept in the report
VALID, REFUSED, UNPARSED, NO_ANSWER = "valid", "refused", "unparsed", "no answer"


def last_answer(r: RequestResult) -> Attempt | None:
    """The answer in force (the last one, unless a worse re-ask was not taken)."""
    return r.final


def plan_status(r: RequestResult) -> str:
    """What the scored prediction is: a ``valid`` plan, a ``refused`` one
    that parsed, an answer that did not parse (``unparsed``), ``no answer``."""
    a = last_answer(r)
    if a is None:
        return NO_ANSWER
    if a.plan is None:
        return UNPARSED
    return VALID if r.valid else REFUSED


def scored_plan(r: RequestResult) -> tuple[PlannedTask, ...]:
    """The plan scored against gold: the last answer's as parsed (also when
    refused), else no task."""
    a = last_answer(r)
    return a.plan if a is not None and a.plan is not None else ()


def prediction(r: RequestResult) -> dict[str, Any]:
    """The scored plan as a TaskBench prediction's ``result``."""
    return {"task_nodes": plan_nodes(scored_plan(r))}


def exact_sample(r: RequestResult) -> Sample | None:
    """The request for TaskBench's figures (None: no gold TaskBench can take)."""
    item = r.item
    if item.taskbench_gold is None:
        return None
    return Sample(item.id, {"task_nodes": item.taskbench_gold}, prediction(r), item.taskbench_type)


def repair_counts(attempts: Sequence[Attempt]) -> Counter[str]:
    """The repairs made to the answers (:mod:`core.plan_repair`), per kind."""
    return Counter(str(repair.kind) for a in attempts for repair in a.repairs)


@dataclass(slots=True)
class PlanningStats:
    """The gold-free figures of a set of requests."""

    requests: int = 0
    parsed: int = 0  # the first answer parsed as a plan
    valid: int = 0  # a valid plan at the end (re-ask included): what the bot would run
    reasked: int = 0
    invented: int = 0  # requests with a task name not in our table, in any answer
    invented_names: int = 0
    inconsistent: int = 0  # requests with a link feeding the wrong kind, in any parsed answer
    inconsistent_links: int = 0
    llm_errors: int = 0  # the LLM call itself failed
    latency: float = 0.0  # seconds, summed
    llm_calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0

    def add(self, r: RequestResult) -> None:
        self.requests += 1
        self.parsed += r.parsed
        self.valid += r.valid
        self.reasked += r.reasked
        self.invented += bool(r.invented)
        self.invented_names += len(r.invented)
        self.inconsistent += bool(r.inconsistent)
        self.inconsistent_links += len(r.inconsistent)
        self.llm_errors += r.llm_error is not None
        self.latency += r.latency
        self.llm_calls += r.usage.llm_calls
        self.prompt_tokens += r.usage.prompt_tokens
        self.completion_tokens += r.usage.completion_tokens

    def share(self, count: int) -> float | None:
        return None if self.requests == 0 else count / self.requests

    def mean(self, total: float) -> float | None:
        return None if self.requests == 0 else total / self.requests

    def to_json(self) -> dict[str, Any]:
        return {
            "requests": self.requests,
            "parse_rate": self.share(self.parsed),
            "valid_rate": self.share(self.valid),
            "reask_rate": self.share(self.reasked),
            "invented_rate": self.share(self.invented),
            "inconsistent_rate": self.share(self.inconsistent),
            "llm_error_rate": self.share(self.llm_errors),
            "mean_latency_s": self.mean(self.latency),
            "mean_prompt_tokens": self.mean(self.prompt_tokens),
            "mean_completion_tokens": self.mean(self.completion_tokens),
            "mean_tokens": self.mean(self.prompt_tokens + self.completion_tokens),
            "counts": {
                "parsed": self.parsed,
                "valid": self.valid,
                "reasked": self.reasked,
                "invented": self.invented,
                "invented_names": self.invented_names,
                "inconsistent": self.inconsistent,
                "inconsistent_links": self.inconsistent_links,
                "llm_errors": self.llm_errors,
                "llm_calls": self.llm_calls,
                "prompt_tokens": self.prompt_tokens,
                "completion_tokens": self.completion_tokens,
            },
        }


@dataclass(slots=True)
class EvalSummary:
    planning: dict[str, PlanningStats] = field(default_factory=dict)  # per shape, then "all"
    # TaskBench's own figures (None: no request has gold TaskBench can take)
    taskbench: ExactScores | None = None
    taskbench_requests: int = 0  # requests with such gold (lines, before ids are merged)
    no_plan: int = 0  # of those, scored as a plan with no task (no answer, or unparsed)
    # our view
    gold: dict[str, GoldScores] = field(default_factory=dict)  # per shape, then "all"
    with_gold: int = 0  # requests that carry a gold plan (scored or not)
    excluded: int = 0  # gold uses a tool we do not have
    missing_tools: Counter[str] = field(default_factory=Counter)  # tool -> requests
    unreadable: list[tuple[str, str]] = field(default_factory=list)  # (id, why)
    invented_names: Counter[str] = field(default_factory=Counter)
    repairs: Counter[str] = field(default_factory=Counter)  # kind -> repairs made

    def taskbench_left_out(self) -> list[tuple[str, str]]:
        """(id, why) of the requests evaluate.py leaves out."""
        if self.taskbench is None:
            return []
        return [(i, why) for i, why in self.taskbench.samples.items() if isinstance(why, str)]

    def taskbench_json(self) -> dict[str, Any] | None:
        if self.taskbench is None:
            return None
        out: dict[str, Any] = {
            name: _figures(self.taskbench.groups[f"{name}_{OVERALL}"])
            for name in (OVERALL, *SPLITS)
        }
        return out | {
            "lines": self.taskbench_requests,
            "scored_with_no_plan": self.no_plan,
            "left_out": [{"id": i, "why": why} for i, why in self.taskbench_left_out()],
            "evaluate_py": self.taskbench.to_json(),
        }

    def to_json(self) -> dict[str, Any]:
        return {
            "planning": {k: v.to_json() for k, v in self.planning.items()},
            "taskbench": self.taskbench_json(),
            "gold": {
                "requests_with_gold": self.with_gold,
                "scored": self.gold[ALL].requests if ALL in self.gold else 0,
                "excluded_missing_tools": self.excluded,
                "missing_tools": dict(self.missing_tools.most_common()),
                "unreadable": [{"id": i, "why": why} for i, why in self.unreadable],
                "by_shape": {k: v.to_json() for k, v in self.gold.items()},
            },
            "invented_tasks": dict(self.invented_names.most_common()),
            "repairs": dict(self.repairs.most_common()),
        }


def _figures(g: GroupFigures) -> dict[str, Any]:
    """A group's headline figures under plain names (the rest: ``evaluate_py``)."""
    if not g.scored:
        return {"samples": g.all_samples, "requests": 0}
    micro, macro = g.node_micro(), g.node_macro()
    return {
        "samples": g.all_samples,
        "requests": g.supports,
        "node_precision": micro.precision,
        "node_recall": micro.recall,
        "node_f1": micro.f1,
        "node_macro_f1": macro.f1,
        "edge_f1": g.links.prf().f1,
        "arg_name_f1": g.arg_names.prf().f1,
        "arg_value_f1": g.arg_values.prf().f1,
        "edit_distance": g.edit_distance,
    }


def sample_score(r: RequestResult) -> SampleScore | None:
    """The request's scores against its gold, our view (None: no gold we can score)."""
    if r.item.gold is None:
        return None
    return score_sample(r.item.gold, graph_of_plan(scored_plan(r)))


def summarise(results: Sequence[RequestResult]) -> EvalSummary:
    shapes = [s for s in (*SHAPES, NONE) if any(r.shape == s for r in results)]
    shapes += sorted({r.shape for r in results} - set(shapes))
    out = EvalSummary()
    out.planning = {s: PlanningStats() for s in (*shapes, ALL)}
    gold = {s: GoldScores() for s in (*shapes, ALL)}
    samples: list[Sample] = []
    for r in results:
        out.planning[r.shape].add(r)
        out.planning[ALL].add(r)
        out.invented_names.update(r.invented)
        out.repairs.update(repair_counts(r.attempts))
        out.with_gold += r.item.has_gold
        if r.item.missing:
            out.excluded += 1
            out.missing_tools.update(r.item.missing)
        if r.item.gold_problem is not None:
            out.unreadable.append((r.item.id, r.item.gold_problem))
        sample = sample_score(r)
        if sample is not None:
            gold[r.shape].add(sample)
            gold[ALL].add(sample)
        exact = exact_sample(r)
        if exact is not None:
            samples.append(exact)
            out.no_plan += plan_status(r) in (UNPARSED, NO_ANSWER)
    if samples:
        out.taskbench = evaluate(samples, TOOL_OUTPUTS)
        out.taskbench_requests = len(samples)
    if out.with_gold:
        out.gold = {s: g for s, g in gold.items() if g.requests or s == ALL}
    return out


def _plan_json(plan: Sequence[PlannedTask]) -> list[dict[str, Any]]:
    return [{"task": t.task, "id": t.id, "dep": t.dep, "args": t.args} for t in plan]


def _exact_json(
    summary: EvalSummary | None, r: RequestResult, superseded: bool
) -> dict[str, Any] | None:
    """The request's share of TaskBench's figures, or why it has none."""
    if r.item.taskbench_gold is None:
        return None
    if superseded:
        return {"left_out": "a later line has the same id (TaskBench scores the last)"}
    read = None if summary is None or summary.taskbench is None else summary.taskbench.samples
    got: SampleCounts | str | None = None if read is None else read.get(r.item.id)
    if got is None:
        return None
    if isinstance(got, str):
        return {"left_out": got}
    return {
        "nodes": got.nodes.to_json(),
        "links": got.links.to_json(),
        "arg_names": got.arg_names.to_json(),
        "arg_values": got.arg_values.to_json(),
        "similarity": got.similarity,
    }


def request_json(
    r: RequestResult, summary: EvalSummary | None = None, *, superseded: bool = False
) -> dict[str, Any]:
    """One request in the report: what was asked, every answer, the plan
    scored (as parsed and as TaskBench nodes), the gold and the scores
    (``superseded``: a later line has the same id, TaskBench scores that one)."""
    sample = sample_score(r)
    status = plan_status(r)
    last = last_answer(r)
    plan: Any = None
    if last is not None:
        plan = last.answer[:ANSWER_CHARS] if last.plan is None else _plan_json(last.plan)
    return {
        "id": r.item.id,
        "shape": r.shape,
        "request": r.item.request,
        "files": [list(f) for f in r.item.files],
        "parsed": r.parsed,
        "valid": r.valid,
        "reasked": r.reasked,
        "invented": list(r.invented),
        "inconsistent": list(r.inconsistent),
        "repairs": dict(repair_counts(r.attempts)),
        "llm_error": r.llm_error,
        "latency_s": round(r.latency, 4),
        "usage": {
            "llm_calls": r.usage.llm_calls,
            "prompt_tokens": r.usage.prompt_tokens,
            "completion_tokens": r.usage.completion_tokens,
        },
        "answers": [
            {"answer": a.answer[:ANSWER_CHARS], "parsed": a.parsed, "error": a.error}
            for a in r.attempts
        ],
        "plan_status": status,
        "plan": plan,
        "plan_taskbench": prediction(r)["task_nodes"],
        "gold": r.item.gold_given,
        "gold_taskbench": r.item.taskbench_gold,
        "gold_ours": r.item.gold.to_json() if r.item.gold is not None else None,
        "gold_missing_tools": list(r.item.missing),
        "gold_problem": r.item.gold_problem,
        "scores": {
            "taskbench": _exact_json(summary, r, superseded),
            "ours": None
            if sample is None
            else {
                "nodes": sample.nodes.to_json(),
                "edges": sample.edges.to_json(),
                "arg_names": sample.arg_names.to_json(),
                "arg_values": sample.arg_values.to_json(),
                "sequence_similarity": sample.similarity,
            },
        },
    }


def report_json(
    summary: EvalSummary, results: Sequence[RequestResult], meta: Mapping[str, Any]
) -> dict[str, Any]:
    last = {r.item.id: i for i, r in enumerate(results) if r.item.taskbench_gold is not None}
    return {
        **meta,
        **summary.to_json(),
        "requests": [
            request_json(r, summary, superseded=last.get(r.item.id, i) != i)
            for i, r in enumerate(results)
        ],
    }
