"""Stage 1, task planning: the plan the LLM writes back, read and checked.

Parsing is tolerant (the LLM's JSON comes in many shapes, see
:mod:`core.jsonish`); validation is strict, and every rejection is a
:class:`PlanError` whose message is written to be sent back to the LLM once,
saying what is wrong and how to fix it.  What can be repaired without
guessing is repaired after parsing, by :mod:`core.plan_repair`; the loop that
asks, repairs, checks and re-asks is :mod:`core.planner`.  The prompt is
:mod:`core.plan_prompt`, the structured output :mod:`core.plan_schema` (both
re-exported here).

Argument keys: ``text``, ``image``, ``audio`` and ``video`` are kept
(lowercased).  Text-like keys an LLM invents (``question``, ``context``,
``prompt``, ``query``, ``sentence``, ``input``…) are folded into ``text``
joined by newlines in the order given (so ``question`` + ``context`` becomes
the ``question\\ncontext`` that question-answering expects); a few media
synonyms (``img``, ``picture``, ``photo``, ``sound``, ``speech``, ``clip``…)
map to their modality; any other key is dropped.  A task without an ``id``
gets its position in the list.

A plan is never shortened silently: when stray ``}``/``]`` end the list
early or split it (the paper's own demonstrations have them), every task
object in the answer is kept; when something else separates them, or a task
object cannot be read, the answer is refused with the reason.
"""

from __future__ import annotations

import json
import re
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from core.errors import PlanError
from core.plan_prompt import (
    ANSWER_CHARS,
    CHAT_LOG_BUDGET,
    DEMOS_SHOWN,
    build_planning_messages,
    pick_demos,
    reask_messages,
    task_spec,
)
from core.plan_read import RETRY_HINT, names_tasks, short, task_items
from core.plan_schema import plan_schema
from core.tasks import AUDIO, IMAGE, MODALITIES, TASKS, TEXT, VIDEO, canonical_task

__all__ = [
    "ANSWER_CHARS",
    "CHAT_LOG_BUDGET",
    "DEMOS_SHOWN",
    "RETRY_HINT",
    "DraftTask",
    "PlanError",
    "PlannedTask",
    "build_planning_messages",
    "check_plan",
    "names_tasks",
    "parse_plan",
    "pick_demos",
    "plan_schema",
    "read_drafts",
    "reask_messages",
    "task_spec",
]

MEDIA = (IMAGE, AUDIO, VIDEO)
_REF_ANY = re.compile(
    r"<\s*(?:generated|resource)\s*>\s*-\s*(\d+)|<\s*(?:generated|resource)\s*-\s*(\d+)\s*>",
    re.IGNORECASE,
)
_REF = re.compile(r"<resource>-(\d+)")
_TEXT_KEYS = frozenset((
    "question", "context", "prompt", "query", "sentence", "input", "inputs", "content",
    "instruction", "description", "caption", "message",
))  # fmt: skip
_MEDIA_KEYS = {
    "img": IMAGE, "picture": IMAGE, "photo": IMAGE, "image_url": IMAGE, "image_path": IMAGE,
    "sound": AUDIO, "speech": AUDIO, "audio_url": AUDIO, "audio_path": AUDIO,
    "clip": VIDEO, "movie": VIDEO, "video_url": VIDEO, "video_path": VIDEO,
}  # fmt: skip
_MAX_PROBLEMS = 5
_MAX_LISTED = 30  # file handles named in one error message


@dataclass(frozen=True, slots=True)
class PlannedTask:
    id: int
    task: str  # canonical name (core.tasks)
    dep: list[int]  # ids of the tasks this one waits for; never -1
    args: dict[str, str]  # keys among text/image/audio/video


# --------------------------------------------------------------------- parsing


def parse_plan(text: str) -> list[PlannedTask]:
    """The plan in an LLM answer, normalised; raises :class:`PlanError`.

    Nothing is repaired here (:mod:`core.plan_repair` does that, and says
    so): an unknown task, a duplicate id, a dependency on itself or on no
    task is refused.  ``[]`` is a valid plan: the request needs no model.
    """
    drafts, problems = read_drafts(text)
    tasks: list[PlannedTask] = []
    unknown = False
    for d in drafts:
        task = canonical_task(d.name) if isinstance(d.name, str) else None
        if task is None:
            unknown = True
            problems.append(f"task {d.id} has unknown task {short(d.name)}")
        else:
            tasks.append(PlannedTask(d.id, task, with_references(d.dep, d.args), dict(d.args)))
    if not problems:
        check_graph(tasks, problems)
    if problems:
        raise PlanError(join_problems(problems, known_tasks_hint() if unknown else ""))
    return tasks


@dataclass(frozen=True, slots=True)
class DraftTask:
    """One task object of an answer as written: read, not yet checked.

    ``name`` is the task name as written (any JSON value); ``dep`` the ids
    listed (``-1`` left out), without the ones ``<resource>-N`` arguments
    imply; ``args`` normalised as :class:`PlannedTask`'s are.
    """

    id: int
    name: Any
    dep: tuple[int, ...]
    args: dict[str, str]


def read_drafts(text: str) -> tuple[list[DraftTask], list[str]]:
    """Every task object of an answer that can be read, and the problems of
    those that cannot (an item that is no object, an id that is no whole
    number >= 0, a ``dep`` or ``args`` of the wrong shape); raises
    :class:`PlanError` when the answer holds no readable task list at all."""
    items = task_items(text)
    problems: list[str] = []
    drafts = [d for pos, item in enumerate(items) if (d := _draft(pos, item, problems))]
    return drafts, problems


def with_references(dep: Sequence[int], args: Mapping[str, str]) -> list[int]:
    """``dep`` and, after it, every id a ``<resource>-N`` argument names."""
    out = list(dep)
    for value in args.values():
        for ref in _REF.findall(value):
            if int(ref) not in out:
                out.append(int(ref))
    return out


def references(args: Mapping[str, str]) -> set[int]:
    """The ids the ``<resource>-N`` arguments name."""
    return {int(ref) for value in args.values() for ref in _REF.findall(value)}


def known_tasks_hint() -> str:
    return f" The known tasks are: {', '.join(TASKS)}."


def _as_int(value: Any) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, str) and re.fullmatch(r"\s*[+-]?\d{1,18}\s*", value):
        return int(value)
    return None


def _draft(pos: int, item: Any, problems: list[str]) -> DraftTask | None:
    if not isinstance(item, dict):
        problems.append(f"item {pos} of the list is not a task object: {short(item)}")
        return None
    raw_id = item.get("id", pos)
    task_id = _as_int(raw_id)
    label = f"task {raw_id if task_id is None else task_id}"
    if task_id is None or task_id < 0:
        problems.append(f"task id {short(raw_id)} is not a whole number >= 0")
    before = len(problems)
    dep = _deps(item.get("dep"), label, problems)
    args = _args(item.get("args"), label, problems)
    if task_id is None or task_id < 0 or len(problems) > before:
        return None
    return DraftTask(task_id, item.get("task"), tuple(dep), args)


def _deps(raw: Any, label: str, problems: list[str]) -> list[int]:
    items = raw if isinstance(raw, list) else [raw]
    out: list[int] = []
    for item in items:
        if item is None:
            continue
        parts = [p for p in re.split(r"[,\s]+", item) if p] if isinstance(item, str) else [item]
        for part in parts:
            n = _as_int(part)
            if n is None:
                problems.append(f"{label} has dep {short(raw)}; dep must be a list of task ids")
                return out
            if n != -1 and n not in out:
                out.append(n)
    return out


def _args(raw: Any, label: str, problems: list[str]) -> dict[str, str]:
    if raw is None:
        return {}
    if isinstance(raw, str):
        raw = {TEXT: raw}
    if not isinstance(raw, dict):
        problems.append(f"{label} has args {short(raw)}; args must be an object")
        return {}
    args: dict[str, str] = {}
    extra_text: list[str] = []
    for key, value in raw.items():
        if value is None:
            continue
        k = str(key).strip().lower()
        k = _MEDIA_KEYS.get(k, k)
        text = _REF_ANY.sub(lambda m: f"<resource>-{int(m.group(1) or m.group(2))}", _str(value))
        if k in MEDIA:
            ref = _REF.search(text)
            args[k] = ref.group() if ref else text.strip()
        elif k == TEXT:
            args[TEXT] = text
        elif k in _TEXT_KEYS:
            extra_text.append(text)
    if extra_text:
        args[TEXT] = "\n".join(([args[TEXT]] if TEXT in args else []) + extra_text)
    return {k: args[k] for k in MODALITIES if k in args}


def _str(value: Any) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return str(value)
    return json.dumps(value, ensure_ascii=False)


def check_graph(tasks: Sequence[PlannedTask], problems: list[str]) -> None:
    """Duplicate ids, dependencies on itself or on no task, cycles."""
    ids: set[int] = set()
    for t in tasks:
        if t.id in ids:
            problems.append(f"id {t.id} is used by more than one task; give each task its own id")
        ids.add(t.id)
    for t in tasks:
        if t.id in t.dep:
            problems.append(f"task {t.id} depends on itself; remove {t.id} from its dep")
        for d in t.dep:
            if d not in ids:
                problems.append(
                    f"task {t.id} depends on task {d}, which is not in the plan; "
                    "dep and <resource>-N may only name ids of tasks in the list"
                )
    if problems:
        return
    stuck = _cycle_members(tasks)
    if stuck:
        problems.append(
            f"tasks {', '.join(map(str, stuck))} depend on each other in a cycle; "
            "a task may only depend on tasks that can finish before it"
        )


def _cycle_members(tasks: Sequence[PlannedTask]) -> list[int]:
    """Ids left over by Kahn's algorithm: the tasks on or behind a cycle."""
    waiting = {t.id: len(set(t.dep)) for t in tasks}
    users: dict[int, list[int]] = {t.id: [] for t in tasks}
    for t in tasks:
        for d in set(t.dep):
            users[d].append(t.id)
    ready = [i for i, n in waiting.items() if n == 0]
    while ready:
        done = ready.pop()
        for user in users[done]:
            waiting[user] -= 1
            if waiting[user] == 0:
                ready.append(user)
    return sorted(i for i, n in waiting.items() if n > 0)


def join_problems(problems: list[str], hint: str = "") -> str:
    head = problems[:_MAX_PROBLEMS]
    more = len(problems) - len(head)
    tail = f" (and {more} more problems)" if more > 0 else ""
    return "The plan is invalid: " + "; ".join(head) + tail + "." + hint + " " + RETRY_HINT


# ------------------------------------------------------------------ validation


def check_plan(
    plan: Sequence[PlannedTask],
    *,
    handles: Mapping[str, str],
    runnable: Collection[str],
    max_tasks: int,
) -> None:
    """Check a parsed plan against this deployment and conversation.

    ``handles`` maps each file handle the user can refer to to its kind.
    Raises :class:`PlanError` with a message for the LLM.
    """
    if len(plan) > max_tasks:
        raise PlanError(
            f"The plan has {len(plan)} tasks; use at most {max_tasks}. "
            f"Combine or drop tasks. {RETRY_HINT}"
        )
    by_id = {t.id: t for t in plan}
    problems: list[str] = []
    available = ", ".join(t for t in TASKS if t in runnable) or "none"
    for t in plan:
        if t.task not in runnable:
            problems.append(f"task {t.task} cannot run in this deployment; available: {available}")
            continue
        missing = [a for a in TASKS[t.task].args if not t.args.get(a, "").strip()]
        if missing:
            problems.append(
                f"task {t.id} ({t.task}) needs args {', '.join(TASKS[t.task].args)}; "
                f"missing: {', '.join(missing)}"
            )
        for modality in MEDIA:
            if modality in t.args:
                _check_media(t, modality, by_id, handles, problems)
        kind = handles.get(t.args.get(TEXT, "").strip())
        if kind in MEDIA:
            problems.append(
                f"task {t.id} ({t.task}) takes text {t.args[TEXT].strip()!r}, which is {kind}, "
                "not text: a text input takes words, a text file or <resource>-N"
            )
    if problems:
        raise PlanError(join_problems(problems))


def _check_media(
    t: PlannedTask,
    modality: str,
    by_id: Mapping[int, PlannedTask],
    handles: Mapping[str, str],
    problems: list[str],
) -> None:
    value = t.args[modality]
    ref = _REF.fullmatch(value)
    if ref:
        source = by_id.get(int(ref.group(1)))
        if source is not None and TASKS[source.task].output != modality:
            problems.append(
                f"task {t.id} takes {modality} {value}, but task {source.id} ({source.task}) "
                f"outputs {TASKS[source.task].output}, not {modality}"
            )
        return
    shown = [f"{h} ({k})" for h, k in list(handles.items())[:_MAX_LISTED]]
    more = f" and {len(handles) - _MAX_LISTED} more" if len(handles) > _MAX_LISTED else ""
    listed = (", ".join(shown) or "none") + more
    kind = handles.get(value)
    if kind is None:
        problems.append(
            f"task {t.id} refers to {modality} {value!r}, which is not a file in this "
            f"conversation; available files: {listed}. Use a handle exactly as listed, "
            "or <resource>-N for the output of task N"
        )
    elif kind != modality:
        problems.append(
            f"task {t.id} takes {modality} {value!r}, but that file is {kind}, not {modality}"
        )
