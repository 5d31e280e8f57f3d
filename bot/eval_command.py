"""``python -m bot eval plans DATASET.jsonl``: how well the configured LLM plans.

Runs the planning stage (the agent's prompt, parser, validator and one
re-ask; :mod:`core.evaluation.runner`) on every request of the dataset, a
few at a time, with its progress on stderr (a bar on a terminal, a plain line
now and then in a log); prints a table per plan shape on stdout: the planning
figures, then against gold TaskBench's figures exactly as its ``evaluate.py``
computes them, then our own view where it differs.  With ``--report`` it
writes every figure and every answer to a JSON file.  See docs/evaluation.md.

Only the standard library is imported here at start-up: the core is
imported when the command runs.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import sys
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

if TYPE_CHECKING:
    from bot.settings import Settings
    from core.evaluation.runner import RequestResult
    from core.evaluation.summary import EvalSummary

log = logging.getLogger("bot.eval")

# TaskBench's leaderboard, Hugging Face tools domain, GPT-4 (taskbench/README.md).
PUBLISHED = "node F1 81.54, edge F1 54.70, arg-name F1 77.31, arg-value F1 60.86"
DASH = "—"


def _positive(text: str) -> int:
    try:
        n = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if n < 1:
        raise argparse.ArgumentTypeError(f"{n} is not 1 or more")
    return n


def add_parser(sub: Any) -> None:
    """The ``eval`` subcommand on ``python -m bot``'s subparsers."""
    ev = sub.add_parser(
        "eval",
        help="measure how well the configured LLM plans (TaskBench metrics against gold plans)",
        description="Run the planning stage on every request of DATASET.jsonl and report "
        "per plan shape: parse, valid-plan and re-ask rates, invented tasks, type-inconsistent "
        "links, repairs, latency and tokens; against gold plans, TaskBench's figures exactly as "
        "its evaluate.py computes them (node, edge and argument F1, edit distance), then the "
        "same plans in our own terms.",
    )
    ev.add_argument("what", choices=["plans"], help="plans: the planning stage")
    ev.add_argument("dataset", metavar="DATASET.jsonl", type=Path)
    ev.add_argument("--report", metavar="OUT.json", type=Path, help="write every figure and answer")
    ev.add_argument("--concurrency", type=_positive, default=4, help="requests planned at once (4)")
    ev.add_argument(
        "--limit", type=_positive, default=None, metavar="N", help="only the first N requests"
    )
    ev.add_argument(
        "--tasks",
        choices=["all", "deployment"],
        default="all",
        help="tasks offered to the planner: every task of the table (default), or only "
        "those this deployment can run",
    )


async def run(args: argparse.Namespace, settings: Settings) -> int:
    from bot.app import agent_config, llm_from_settings
    from core.evaluation.datasets import load_dataset
    from core.evaluation.runner import PlanningOptions, run_eval
    from core.evaluation.summary import report_json, summarise

    if not settings.process.log_level:  # log lines would break into the progress bar and the table
        logging.getLogger().setLevel(logging.WARNING)
    items = load_dataset(args.dataset)
    if args.limit is not None:
        items = items[: args.limit]
    config = agent_config(settings)
    runnable = await _offered(args.tasks, settings)
    if not runnable:
        print(
            "warning: this deployment offers the planner no task, so every plan is [] "
            "(python -m bot models list says why)",
            file=sys.stderr,
        )
    options = PlanningOptions(
        tuple(runnable), max_tasks=config.max_tasks, max_tokens=config.planning_max_tokens
    )
    llm = llm_from_settings(settings)
    try:
        await llm.prepare()
        bar = _Progress(len(items))
        try:
            results = await run_eval(
                llm, items, options, concurrency=args.concurrency, on_result=bar.update
            )
        finally:
            bar.close()
    finally:
        await llm.aclose()
    summary = summarise(results)
    meta = {
        "dataset": str(args.dataset),
        "model": llm.model,
        "host": llm.host,
        "tasks_offered": list(runnable),
    }
    print(render(summary, results, meta), flush=True)
    if args.report is not None:
        data = report_json(summary, results, meta)
        try:
            args.report.write_text(json.dumps(data, indent=1, ensure_ascii=False) + "\n", "utf-8")
        except OSError as e:
            print(f"error: cannot write the report {args.report}: {e.strerror}", file=sys.stderr)
            return 1
        print(f"Report: {args.report}")
    return 0


async def _offered(which: str, settings: Settings) -> list[str]:
    """The tasks the planner is offered."""
    from core.tasks import TASKS

    if which == "all":
        return list(TASKS)
    from bot.app import router_from_settings
    from core.catalog import Catalog

    catalog = Catalog.load(settings.selection.model_catalog)
    router = router_from_settings(settings)
    try:
        return router.runnable_tasks(catalog)
    finally:
        for expert in (router.remote, router.local):
            if expert is not None:
                await expert.aclose()


PROGRESS_LINES = 20  # in a log, about this many progress lines per run


class _Progress:
    """The run's progress on stderr, with the valid plans so far: a tqdm bar
    on a terminal (log lines printed above it), else a plain line every
    ``step`` requests, whole lines that log lines cannot break."""

    def __init__(self, total: int, stream: TextIO | None = None, step: int | None = None) -> None:
        self.total = total
        self.done = 0
        self.valid = 0
        self._stream = stream if stream is not None else sys.stderr
        self._step = step or max(1, -(-total // PROGRESS_LINES))
        self._bar: Any = None
        self._redirect: contextlib.ExitStack | None = None
        if self._stream.isatty():
            from tqdm import tqdm
            from tqdm.contrib.logging import logging_redirect_tqdm

            self._bar = tqdm(total=total, desc="planning", unit="req", file=self._stream)
            self._redirect = contextlib.ExitStack()
            self._redirect.enter_context(logging_redirect_tqdm())

    def update(self, result: RequestResult) -> None:
        self.done += 1
        self.valid += result.valid
        if self._bar is not None:
            self._bar.set_postfix_str(f"valid {self.valid}/{self.done}", refresh=False)
            self._bar.update(1)
        elif self.done % self._step == 0 or self.done == self.total:
            self._stream.write(
                f"planning: {self.done}/{self.total} requests, valid {self.valid}/{self.done}\n"
            )
            self._stream.flush()

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()
        if self._redirect is not None:
            self._redirect.close()


# ------------------------------------------------------------------ the table


def render(summary: EvalSummary, results: Sequence[RequestResult], meta: dict[str, Any]) -> str:
    """The printed report: planning figures per shape, then the gold metrics."""
    n = len(results)
    offered = len(meta["tasks_offered"])
    lines = [
        f"Planning: {n} request{'' if n == 1 else 's'} of {meta['dataset']}, "
        f"model {meta['model'] or '?'} at {meta['host']}, {offered} tasks offered",
        "",
    ]
    head: tuple[str, ...] = (
        "shape",
        "requests",
        "parsed",
        "valid",
        "re-asked",
        "invented",
        "type-inconsistent",
        "LLM errors",
        "latency",
        "tokens",
    )
    rows: list[tuple[str, ...]] = []
    for shape, s in summary.planning.items():
        latency = s.mean(s.latency)
        tokens = s.mean(s.prompt_tokens + s.completion_tokens)
        rows.append((
            shape, str(s.requests), _pct(s.share(s.parsed)), _pct(s.share(s.valid)),
            _pct(s.share(s.reasked)), _pct(s.share(s.invented)), _pct(s.share(s.inconsistent)),
            str(s.llm_errors), DASH if latency is None else f"{latency:.2f} s",
            DASH if tokens is None else f"{tokens:.0f}",
        ))  # fmt: skip
    lines += _table(head, rows)
    if summary.taskbench is not None:
        lines += ["", *_taskbench_lines(summary)]
    if summary.gold:
        lines += ["", *_our_view_lines(summary, n)]
    if summary.invented_names:
        lines.append(f"Invented tasks: {_counted(summary.invented_names)}")
    if summary.repairs:
        lines.append(f"Repairs: {_counted(summary.repairs)}")
    return "\n".join(lines)


def _taskbench_lines(summary: EvalSummary) -> list[str]:
    """TaskBench's figures, exactly as its evaluate.py computes them."""
    from core.evaluation.taskbench_exact import OVERALL, SPLITS

    exact = summary.taskbench
    assert exact is not None
    overall = exact.overall
    lines = [
        "TaskBench's figures, exactly as its evaluate.py computes them: "
        f"{overall.supports} of {_requests(overall.all_samples)} scored",
        "",
    ]
    head = (
        "shape", "requests", "scored", "node F1", "node macro-F1", "edge F1",
        "arg-name F1", "arg-value F1", "edit dist.",
    )  # fmt: skip
    rows: list[tuple[str, ...]] = []
    for split in (*SPLITS, OVERALL):
        g = exact.groups[f"{split}_{OVERALL}"]
        if g.all_samples == 0:
            continue
        name = "all" if split == OVERALL else split
        if not g.scored:
            rows.append((name, str(g.all_samples), "0", *[DASH] * 6))
            continue
        rows.append((
            name, str(g.all_samples), str(g.supports), _f1(g.node_micro().f1),
            _f1(g.node_macro().f1), _f1(g.links.prf().f1), _f1(g.arg_names.prf().f1),
            _f1(g.arg_values.prf().f1), f"{g.edit_distance:.4f}",
        ))  # fmt: skip
    lines += _table(head, rows)
    if summary.no_plan:
        lines.append(
            f"Scored as a plan with no task: {_requests(summary.no_plan)} whose last answer "
            "did not parse or never came"
        )
    merged = summary.taskbench_requests - overall.all_samples
    if merged:
        lines.append(
            f"Not scored: {_requests(merged)} with the id of a later line (TaskBench keeps the last)"
        )
    left_out = summary.taskbench_left_out()
    if left_out:
        first_id, why = left_out[0]
        lines.append(
            f"Left out by evaluate.py: {_requests(len(left_out))} (the first, {first_id}: {why})"
        )
    lines.append(f"TaskBench's published GPT-4 (Hugging Face tools): {PUBLISHED}")
    return lines


def _our_view_lines(summary: EvalSummary, n: int) -> list[str]:
    """The same plans scored in our terms (docs/evaluation.md)."""
    scored = summary.gold["all"].requests
    lines = [
        f"Our view: {scored} of {_requests(n)} scored, in our task names (aliases read as ours, "
        "Image Editing as image-to-image), argument kinds from our task table, gold needing "
        "a tool we lack left out",
        "",
    ]
    head = ("shape", "scored", "node F1", "edge F1", "arg-name F1", "arg-value F1", "NED")
    rows: list[tuple[str, ...]] = [
        (
            shape,
            str(g.requests),
            _f1(g.nodes.f1),
            _f1(g.edges.f1),
            _f1(g.arg_names.f1),
            _f1(g.arg_values.f1),
            DASH if g.ned is None else f"{g.ned:.4f}",
        )
        for shape, g in summary.gold.items()
    ]
    lines += _table(head, rows)
    if summary.excluded:
        lines.append(
            f"Not scored in our view: {_requests(summary.excluded)} whose gold uses a tool we do "
            f"not have ({_counted(summary.missing_tools)})"
        )
    if summary.unreadable:
        first_id, why = summary.unreadable[0]
        lines.append(
            f"Not scored in our view: {_requests(len(summary.unreadable))} whose gold we cannot "
            f"read (the first, {first_id}: {why})"
        )
    return lines


def _requests(n: int) -> str:
    return f"{n} request{'' if n == 1 else 's'}"


def _counted(counts: Counter[str], shown: int = 8) -> str:
    """``a 3, b 1`` for the most common; ``… and N more (see --report)`` past ``shown``."""
    top = ", ".join(f"{name} {n}" for name, n in counts.most_common(shown))
    more = len(counts) - shown
    return top + (f", and {more} more (see --report)" if more > 0 else "")


def _pct(share: float | None) -> str:
    return DASH if share is None else f"{100 * share:.1f}%"


def _f1(value: float | None) -> str:
    return DASH if value is None else f"{100 * value:.2f}"


def _table(head: tuple[str, ...], rows: list[tuple[str, ...]]) -> list[str]:
    widths = [max(len(r[i]) for r in (head, *rows)) for i in range(len(head))]

    def line(cells: tuple[str, ...]) -> str:
        first = cells[0].ljust(widths[0])
        rest = (c.rjust(w) for c, w in zip(cells[1:], widths[1:], strict=True))
        return "  ".join((first, *rest)).rstrip()

    return [line(head), *(line(r) for r in rows)]
