"""The figures of an evaluation run, per plan shape and over all requests,
and the JSON report (figures, then every request with its answers)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from core.evaluation.graphs import NONE, SHAPES, graph_of_plan
from core.evaluation.metrics import GoldScores, SampleScore, score_sample
from core.evaluation.runner import RequestResult

ALL = "all"
ANSWER_CHARS = 4000  # of each LLM answer kept in the report


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
    gold: dict[str, GoldScores] = field(default_factory=dict)  # per shape, then "all"
    with_gold: int = 0  # requests that carry a gold plan (scored or not)
    excluded: int = 0  # gold uses a tool we do not have
    missing_tools: Counter[str] = field(default_factory=Counter)  # tool -> requests
    unreadable: list[tuple[str, str]] = field(default_factory=list)  # (id, why)
    invented_names: Counter[str] = field(default_factory=Counter)

    def to_json(self) -> dict[str, Any]:
        return {
            "planning": {k: v.to_json() for k, v in self.planning.items()},
            "gold": {
                "requests_with_gold": self.with_gold,
                "scored": self.gold[ALL].requests if ALL in self.gold else 0,
                "excluded_missing_tools": self.excluded,
                "missing_tools": dict(self.missing_tools.most_common()),
                "unreadable": [{"id": i, "why": why} for i, why in self.unreadable],
                "by_shape": {k: v.to_json() for k, v in self.gold.items()},
            },
            "invented_tasks": dict(self.invented_names.most_common()),
        }


def sample_score(r: RequestResult) -> SampleScore | None:
    """The request's scores against its gold (None: no gold we can score)."""
    if r.item.gold is None:
        return None
    return score_sample(r.item.gold, graph_of_plan(r.scored_plan))


def summarise(results: Sequence[RequestResult]) -> EvalSummary:
    shapes = [s for s in (*SHAPES, NONE) if any(r.shape == s for r in results)]
    shapes += sorted({r.shape for r in results} - set(shapes))
    out = EvalSummary()
    out.planning = {s: PlanningStats() for s in (*shapes, ALL)}
    gold = {s: GoldScores() for s in (*shapes, ALL)}
    for r in results:
        out.planning[r.shape].add(r)
        out.planning[ALL].add(r)
        out.invented_names.update(r.invented)
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
    if out.with_gold:
        out.gold = {s: g for s, g in gold.items() if g.requests or s == ALL}
    return out


def request_json(r: RequestResult) -> dict[str, Any]:
    """One request in the report: what was asked, every answer, the plan and scores."""
    sample = sample_score(r)
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
        "plan": None
        if r.plan is None
        else [{"task": t.task, "id": t.id, "dep": t.dep, "args": t.args} for t in r.plan],
        "gold": r.item.gold.to_json() if r.item.gold is not None else None,
        "gold_missing_tools": list(r.item.missing),
        "gold_problem": r.item.gold_problem,
        "scores": None
        if sample is None
        else {
            "nodes": sample.nodes.to_json(),
            "edges": sample.edges.to_json(),
            "arg_names": sample.arg_names.to_json(),
            "arg_values": sample.arg_values.to_json(),
            "sequence_similarity": sample.similarity,
        },
    }


def report_json(
    summary: EvalSummary, results: Sequence[RequestResult], meta: Mapping[str, Any]
) -> dict[str, Any]:
    return {**meta, **summary.to_json(), "requests": [request_json(r) for r in results]}
