"""Stage 2, model selection: one model per task, in at most one LLM call.

Candidates arrive ranked by downloads.  A task with a single candidate, or
any task in ``downloads`` mode, gets the top candidate without asking the
LLM.  In ``llm`` mode every task with two or more candidates is put to the
LLM in ONE call (the paper asks once per task; batching keeps the latency and
cost of a plan flat).  Whatever the LLM answers, each task ends up with a
candidate: an unknown or missing choice falls back to the top candidate, and
a failed call falls back to downloads for all, so selection never fails a
request.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from core import prompts
from core.catalog import ModelInfo
from core.errors import RunFailed
from core.jsonish import JSONishError, find_values
from core.llm import LLM, JSONSchema
from core.planning import PlannedTask
from core.types import Usage

log = logging.getLogger(__name__)

DESCRIPTION_CHARS = 100
ARG_CHARS = 200
MOST_DOWNLOADED = "most downloaded"
ONLY_CANDIDATE = "only candidate"
# A task runs on its top candidate while the LLM chooses; a run that finished first stands.
FINISHED_FIRST = "most downloaded candidate; finished before the choice"
_MODEL_KEYS = ("model_id", "model", "id", "name")
_TASK_KEYS = ("task_id", "task", "tid")
_INT = re.compile(r"-?\d+")


@dataclass(frozen=True, slots=True)
class Selection:
    model: ModelInfo
    reason: str
    by_llm: bool  # True when the LLM chose this model


async def select_models(
    llm: LLM | None,
    plan: Sequence[PlannedTask],
    candidates: Mapping[int, Sequence[ModelInfo]],
    *,
    request_text: str,
    usage: Usage,
    mode: Literal["llm", "downloads"],
    max_tokens: int | None = None,
) -> dict[int, Selection]:
    """A model for every task of ``plan`` that has candidates (others are absent).

    The LLM call (at most ``max_tokens`` completion tokens) asks for
    structured output (:func:`selection_schema`); the answer is still parsed
    tolerantly, since many servers ignore the schema.
    """
    chosen: dict[int, Selection] = {}
    ask: list[PlannedTask] = []
    for task in plan:
        cands = candidates.get(task.id) or ()
        if not cands:
            continue
        if len(cands) == 1:
            chosen[task.id] = Selection(cands[0], ONLY_CANDIDATE, by_llm=False)
        elif mode == "downloads" or llm is None:
            chosen[task.id] = Selection(cands[0], MOST_DOWNLOADED, by_llm=False)
        else:
            ask.append(task)
    if not ask:
        return chosen
    assert llm is not None
    messages = build_selection_messages(request_text=request_text, tasks=ask, candidates=candidates)
    try:
        answer = await llm.complete(
            messages,
            usage=usage,
            json_mode=True,
            schema=selection_schema(ask, candidates),
            max_tokens=max_tokens,
        )
    except RunFailed as e:
        log.warning("selection: LLM call failed, using most downloaded models: %s", e)
        for task in ask:
            chosen[task.id] = Selection(
                candidates[task.id][0], f"{MOST_DOWNLOADED} (model selection failed)", False
            )
        return chosen
    picks = parse_selection(answer, {t.id: candidates[t.id] for t in ask})
    for task in ask:
        chosen[task.id] = _resolve(task.id, picks.get(task.id), candidates[task.id])
    log.info(
        "selection: %d task(s) asked, %d chosen by the LLM",
        len(ask),
        sum(1 for t in ask if chosen[t.id].by_llm),
    )
    return chosen


def first_guesses(
    plan: Sequence[PlannedTask], candidates: Mapping[int, Sequence[ModelInfo]]
) -> dict[int, Selection]:
    """What each task with candidates runs on while the choice is made (its
    top candidate), with the reason it keeps if it finishes first."""
    return {
        t.id: Selection(cands[0], ONLY_CANDIDATE if len(cands) == 1 else FINISHED_FIRST, False)
        for t in plan
        if (cands := candidates.get(t.id))
    }


def _resolve(task_id: int, pick: tuple[str, str] | None, cands: Sequence[ModelInfo]) -> Selection:
    if pick is None:
        return Selection(cands[0], "fallback: the selector chose no model for this task", False)
    model_id, reason = pick
    wanted = model_id.strip().casefold()
    for m in cands:
        if m.id.casefold() == wanted:
            return Selection(m, reason.strip() or "chosen by the selector", by_llm=True)
    shown = prompts.trim(model_id, 80)
    return Selection(cands[0], f"fallback: {shown!r} is not a candidate for this task", False)


# --------------------------------------------------------------------- prompt


def build_selection_messages(
    *,
    request_text: str,
    tasks: Sequence[PlannedTask],
    candidates: Mapping[int, Sequence[ModelInfo]],
) -> list[dict[str, str]]:
    """The system prompt and one user message: the request, then each list of
    candidates once, under the tasks that share it (tasks of one kind do),
    each task with its inputs; a candidate is its id, downloads (when known)
    and a short description."""
    blocks = []
    for group, cands in _groups(tasks, candidates):
        lines = [f"task {t.id} ({t.task}): {_args_json(t)}" for t in group]
        lines.append(
            "candidates (downloads):" if len(group) == 1 else "their candidates (downloads):"
        )
        lines += [f"- {_candidate(m)}" for m in cands]
        blocks.append("\n".join(lines))
    ids = ", ".join(str(t.id) for t in tasks)
    user = (
        f"<request>\n{prompts.quote(request_text.strip())}\n</request>\n\n"
        + prompts.quote("\n\n".join(blocks))
        + f"\n\nAnswer with a choice for task{'s' if len(tasks) > 1 else ''} {ids}."
    )
    return [
        {"role": "system", "content": prompts.load("selection_system.md")},
        {"role": "user", "content": user},
    ]


def _groups(
    tasks: Sequence[PlannedTask], candidates: Mapping[int, Sequence[ModelInfo]]
) -> list[tuple[list[PlannedTask], Sequence[ModelInfo]]]:
    """The tasks grouped by identical candidate lists, in order of first appearance."""
    groups: dict[tuple[str, ...], tuple[list[PlannedTask], Sequence[ModelInfo]]] = {}
    for t in tasks:
        cands = candidates.get(t.id, ())
        groups.setdefault(tuple(m.id for m in cands), ([], cands))[0].append(t)
    return list(groups.values())


def _args_json(t: PlannedTask) -> str:
    args = {k: prompts.trim(v, ARG_CHARS) for k, v in t.args.items()}
    return json.dumps(args, ensure_ascii=False, separators=(",", ":"))


def _candidate(m: ModelInfo) -> str:
    """``id (1.2M): description`` (downloads left out when unknown)."""
    out = m.id
    if m.downloads > 0:
        out += f" ({_count(m.downloads)})"
    description = " ".join(m.description.split())
    if len(description) > DESCRIPTION_CHARS:  # cut at a word, marked by an ellipsis
        description = description[:DESCRIPTION_CHARS].rsplit(" ", 1)[0].rstrip(",;:") + "…"
    return f"{out}: {description}" if description else out


def _count(n: int) -> str:
    """``948467`` → ``948k``, ``1562512`` → ``1.6M``, ``9494`` → ``9.5k``."""
    for size, unit in ((1_000_000_000, "B"), (1_000_000, "M"), (1_000, "k")):
        if n >= size:
            value = n / size
            text = f"{value:.1f}" if value < 10 else f"{value:.0f}"
            return text.removesuffix(".0") + unit
    return str(n)


def selection_schema(
    tasks: Sequence[PlannedTask], candidates: Mapping[int, Sequence[ModelInfo]]
) -> JSONSchema:
    """Structured output for the selection (strict mode):
    ``{"choices": [{"task_id", "id", "reason"}]}``, the same few tokens
    whatever the plan.

    Model ids are not an ``enum`` per task, nor is each task a required key:
    those cost ~50–120 tokens a task, and :func:`select_models` already
    gives a task with no choice, or a choice that is not one of its
    candidates, its most downloaded candidate."""
    del tasks, candidates  # the shape is the same for every plan
    choice = {
        "type": "object",
        "properties": {
            "task_id": {"type": "integer"},
            "id": {"type": "string"},
            "reason": {"type": "string"},
        },
        "required": ["task_id", "id", "reason"],
        "additionalProperties": False,
    }
    return JSONSchema(
        "model_selection",
        {
            "type": "object",
            "properties": {"choices": {"type": "array", "items": choice}},
            "required": ["choices"],
            "additionalProperties": False,
        },
    )


# -------------------------------------------------------------------- parsing


def parse_selection(
    text: str, candidates: Mapping[int, Sequence[ModelInfo]]
) -> dict[int, tuple[str, str]]:
    """``{task id: (model id, reason)}`` from an LLM answer, for tasks in
    ``candidates``; anything unreadable is left out (never raises).

    Accepts ``{"0": {"id", "reason"}}``, ``{"0": "model"}``, a list of
    ``{"task_id", "id", "reason"}``, a wrapper object around either, and a
    bare ``{"id", "reason"}`` when there is only one task.
    """
    try:
        found = [vs[0] if len(vs) == 1 else vs for vs in find_values(text)]
    except JSONishError:
        return {}
    for value in found:
        picks = _picks(value, candidates)
        if picks:
            return picks
    return {}


def _picks(value: Any, candidates: Mapping[int, Sequence[ModelInfo]]) -> dict[int, tuple[str, str]]:
    out: dict[int, tuple[str, str]] = {}
    if isinstance(value, list):
        for item in value:
            if isinstance(item, dict):
                tid = next((_as_id(item[k]) for k in _TASK_KEYS if k in item), None)
                if tid is None and ("model" in item or "model_id" in item):
                    tid = _as_id(item.get("id"))  # [{"id": <task id>, "model": ...}]
                pick = _pick(item)
                if tid is not None and tid in candidates and pick:
                    out[tid] = pick
        return out
    if not isinstance(value, dict):
        return out
    bare = _pick(value)
    if bare and len(candidates) == 1 and all(_as_id(k) is None for k in value):
        return {next(iter(candidates)): bare}  # {"id": ..., "reason": ...} for the one task
    for key, item in value.items():
        tid = _as_id(key)
        pick = _pick(item)
        if tid is not None and tid in candidates and pick:
            out[tid] = pick
    if not out:  # {"selections": {...}} or {"choices": [...]}
        for item in value.values():
            if isinstance(item, dict | list):
                out = _picks(item, candidates)
                if out:
                    break
    return out


def _as_id(value: Any) -> int | None:
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if isinstance(value, str):
        m = _INT.search(value)
        if m and len(m.group()) < 12:
            return int(m.group())
    return None


def _pick(item: Any) -> tuple[str, str] | None:
    if isinstance(item, str) and item.strip():
        return item.strip(), ""
    if not isinstance(item, dict):
        return None
    model = next((item[k] for k in _MODEL_KEYS if isinstance(item.get(k), str)), None)
    if not model:
        return None
    reason = item.get("reason")
    return model, reason if isinstance(reason, str) else ""
