"""The task objects in an LLM's answer, however it wrote them.

The first JSON value that reads as a plan is the plan (a bare list, a
fenced block, prose around it, ``{"tasks": [...]}``…), unless the answer
holds more task objects than it: then every task object is kept when only
stray brackets, commas, comments and fences lie between them, and the
answer is refused with the reason otherwise.  A plan is never shortened
silently.
"""

from __future__ import annotations

import itertools
import json
import re
from bisect import bisect_right
from typing import Any

from core.errors import PlanError
from core.jsonish import MAX_CHARS, JSONishError, find_objects, find_values

# a "task" key: quoted, or unquoted at the start of an object
_TASK_KEY = re.compile(r"""(?:["']task["']|\{\s*task)\s*[:=]""")
# what may stand between the task objects of one plan: stray brackets, commas,
# comments, markdown fences
_JOIN = re.compile(r"(?:[\s,;\[\]{}]|//[^\n]*+|/\*.*?\*/|```[\w+-]*+)*+", re.DOTALL)
_LIST_KEYS = ("tasks", "plan", "task_list", "steps")
RETRY_HINT = "Answer again with the whole corrected JSON list only."


def task_items(text: str) -> list[Any]:
    """The list of task items in ``text``; never fewer than the text holds.

    The first JSON value that reads as a plan is the plan, unless the text
    holds more task objects (``{"task": ...}``) than it: stray ``}``/``]``
    between tasks (the paper's own demonstrations have them) end a list
    early, or split it in two.  Then every task object in the text is the
    plan when only brackets, commas, comments and fences lie between them;
    otherwise the answer is refused with the reason, as it is when a task
    object cannot be read at all.
    """
    if len(text) > MAX_CHARS:
        raise PlanError(
            f"Your answer is {len(text)} characters long; a plan must be under "
            f"{MAX_CHARS}. Plan fewer tasks with shorter args. {RETRY_HINT}"
        )
    picked: list[Any] | None = None
    found = False
    try:
        for values in find_values(text):
            found = True
            picked = _as_task_list(values)
            if picked is not None:
                break
        objects, complete = find_objects(text, "task")
    except JSONishError as e:  # pragma: no cover - length is checked above
        raise PlanError(str(e)) from e
    if not complete:
        raise PlanError(
            "Your answer has too much text that is not the plan to be sure of reading every "
            f"task in it. {RETRY_HINT}"
        )
    if picked is None and not objects:
        what = "has JSON but no task list" if found else "contains no JSON"
        raise PlanError(
            f"Your answer {what}. Answer with a JSON list of tasks such as "
            '[{"task": "image-to-text", "id": 0, "dep": [-1], "args": {"image": "photo.png"}}] '
            "and nothing else."
        )
    _check_unread_tasks(text, objects)
    if picked is not None and _holds_all(picked, [obj for _, _, obj in objects]):
        return picked
    _check_one_list(text, objects)
    return [obj for _, _, obj in objects]


def _holds_all(picked: list[Any], objects: list[dict[str, Any]]) -> bool:
    """Whether the chosen list has every task object of the text: as many of
    them, and each one, or the text is that plan written out more than once."""
    mine = [_key(i) for i in picked if isinstance(i, dict) and "task" in i]
    found = [_key(o) for o in objects]
    if not set(found) <= set(mine):
        return False
    return len(found) <= len(mine) or found == mine * (len(found) // len(mine))


def _key(item: dict[str, Any]) -> str:
    return json.dumps(item, sort_keys=True, default=str)


def _check_unread_tasks(text: str, objects: list[tuple[int, int, dict[str, Any]]]) -> None:
    """Refuse a ``"task":`` key outside every object read: a task that is cut
    off or broken would otherwise be left out of the plan without a word."""
    starts = [start for start, _, _ in objects]
    for m in _TASK_KEY.finditer(text):
        i = bisect_right(starts, m.start()) - 1
        if i >= 0 and m.start() < objects[i][1]:
            continue  # inside a task object that was read
        at = max(text.rfind("{", 0, m.start()), 0)
        raise PlanError(
            f"Your answer has a task object that is not valid JSON at character {at} "
            f"(cut off, or a quote, comma or bracket missing): {short(text[at : at + 100], 80)}. "
            f"Write every task as a complete JSON object. {RETRY_HINT}"
        )


def _check_one_list(text: str, objects: list[tuple[int, int, dict[str, Any]]]) -> None:
    """Refuse task objects that anything but stray brackets, commas, comments
    or fences separates: two plans, or a plan and an example, are not one."""
    for (_, end, before), (start, _, after) in itertools.pairwise(objects):
        gap = text[end:start]
        if not _JOIN.fullmatch(gap):
            raise PlanError(
                f"Your answer has {len(objects)} task objects, but not in one JSON list: "
                f"{short(gap.strip(), 60)} separates task {_label(before)} from task "
                f"{_label(after)}. Answer with one JSON list holding every task and nothing "
                f"else. {RETRY_HINT}"
            )


def _label(item: dict[str, Any]) -> str:
    return short(item.get("id"), 20) if "id" in item else short(item.get("task"), 40)


def _as_task_list(values: list[Any]) -> list[Any] | None:
    """The list of task objects in one find_values() result, if it is a plan."""
    if len(values) > 1:
        return values if all(isinstance(v, dict) and "task" in v for v in values) else None
    value = values[0]
    if isinstance(value, list):
        if len(value) == 1 and isinstance(value[0], list):
            value = value[0]  # [[...]]
        if not value or any(isinstance(v, dict) for v in value):
            return value
        return None
    if isinstance(value, dict):
        if "task" in value:
            return [value]
        for key in _LIST_KEYS:
            listed = value.get(key)
            if isinstance(listed, list):
                return listed
        for v in value.values():
            if isinstance(v, list) and v and all(isinstance(i, dict) and "task" in i for i in v):
                return v
    return None


def short(value: Any, limit: int = 60) -> str:
    text = json.dumps(value, ensure_ascii=False) if not isinstance(value, str) else repr(value)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def names_tasks(text: str) -> bool:
    """Whether an answer holds at least one task object (``{"task": …}``),
    even when it is not a valid plan."""
    try:
        stack: list[Any] = [v for values in find_values(text) for v in values]
    except JSONishError:
        return False
    while stack:
        value = stack.pop()
        if isinstance(value, dict):
            if "task" in value:
                return True
            stack.extend(value.values())
        elif isinstance(value, list):
            stack.extend(value)
    return False
