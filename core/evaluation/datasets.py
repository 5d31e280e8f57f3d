"""Evaluation datasets: one request a line (JSON Lines), with or without a
gold plan.

Each line is a JSON object with the request under ``request``,
``user_request`` or ``instruction``, an optional ``id``, and optionally:

* ``files`` – the files the user sent, as handles (``"photo.jpg"``) or
  ``["photo.jpg", "image"]`` pairs; without it, the file names the request
  mentions (``example.jpg``, ``talk.wav``…) are its files.  Only names: no
  file is ever read.
* a gold plan in the paper's format, ``plan`` (or ``gold``): ``[{"task",
  "id", "dep", "args"}]``, read by the planner's own parser;
* or a gold plan in TaskBench's format: ``task_nodes`` (``[{"task",
  "arguments"}]``, ``<node-K>`` for node K's output) with its tool names
  (:mod:`core.evaluation.taskbench`);
* ``type`` (or ``shape``): ``single``, ``chain`` or ``dag``; without it the
  gold plan's shape.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from core.errors import BotError, PlanError
from core.evaluation import taskbench
from core.evaluation.graphs import TaskGraph, graph_of_plan, plan_shape, shape_of
from core.planning import parse_plan
from core.store.handles import allocate_handle
from core.tasks import AUDIO, IMAGE, MODALITIES, TEXT, VIDEO, canonical_task

_KIND_BY_EXT = {
    **dict.fromkeys(("jpg", "jpeg", "png", "gif", "bmp", "tif", "tiff", "webp", "svg", "ico"), IMAGE),
    **dict.fromkeys(("mp3", "wav", "flac", "ogg", "oga", "m4a", "aac", "wma", "aiff", "opus"), AUDIO),
    **dict.fromkeys(("mp4", "avi", "mov", "mkv", "webm", "flv", "wmv", "m4v", "mpg", "mpeg"), VIDEO),
    **dict.fromkeys(("txt", "csv", "tsv", "md", "json"), TEXT),
}  # fmt: skip
_FILE_NAME = re.compile(
    r"(?<![\w.-])([\w-]+(?:\.[\w-]+)*\.(" + "|".join(_KIND_BY_EXT) + r"))(?![\w-])",
    re.IGNORECASE,
)
_REQUEST_KEYS = ("request", "user_request", "instruction")
_SHAPE_NAMES = {
    "single": "single",
    "node": "single",
    "chain": "chain",
    "dag": "dag",
    "graph": "dag",
}


class DatasetError(BotError):
    """The dataset file cannot be used; the message names the line."""


@dataclass(frozen=True, slots=True)
class EvalItem:
    id: str
    request: str
    files: tuple[tuple[str, str], ...]  # (handle, kind)
    gold: TaskGraph | None = None  # None: no gold, or gold we cannot score
    shape: str | None = None  # the gold's (or the line's) shape
    missing: tuple[str, ...] = ()  # gold tools we do not have
    gold_problem: str | None = None  # why the gold cannot be read
    # The gold as the line gives it (task_nodes, or our plan format), for the report.
    gold_given: Any = field(default=None, compare=False)
    # The gold as TaskBench nodes, what evaluate.py scores: task_nodes as given,
    # or our plan format written as TaskBench would (None: no gold TaskBench can take).
    taskbench_gold: Any = field(default=None, compare=False)
    taskbench_type: object = None  # the line's type as given, else the gold's shape

    @property
    def has_gold(self) -> bool:
        return (
            self.gold is not None
            or bool(self.missing)
            or self.gold_problem is not None
            or self.taskbench_gold is not None
        )


def load_dataset(path: Path) -> list[EvalItem]:
    """Every request of a JSON Lines file; :class:`DatasetError` on a line
    that is not one (blank lines are skipped)."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        why = e.strerror if isinstance(e, OSError) and e.strerror else str(e)
        raise DatasetError(f"cannot read the dataset {path}: {why}") from None
    items: list[EvalItem] = []
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as e:
            raise DatasetError(f"{path}, line {n}: not JSON ({e.msg})") from None
        if not isinstance(row, dict):
            raise DatasetError(f"{path}, line {n}: expected a JSON object")
        try:
            items.append(item_of(row, f"line-{n}"))
        except DatasetError as e:
            raise DatasetError(f"{path}, line {n}: {e}") from None
    if not items:
        raise DatasetError(f"the dataset {path} holds no request")
    return items


def item_of(row: Mapping[str, Any], default_id: str) -> EvalItem:
    request = next((row[k] for k in _REQUEST_KEYS if isinstance(row.get(k), str)), "")
    if not request.strip():
        raise DatasetError(f"no request text (one of {', '.join(_REQUEST_KEYS)})")
    item_id = str(row.get("id", default_id))
    files = _files(row.get("files"), request)
    declared = row.get("type", row.get("shape"))
    shape = _SHAPE_NAMES.get(declared.lower()) if isinstance(declared, str) else None
    if "task_nodes" in row:
        tb = taskbench.gold_of(row)
        if shape is None and tb.graph is not None:
            shape = shape_of(len(tb.graph.nodes), tb.graph.links())
        given = row["task_nodes"]
        return EvalItem(
            item_id, request, files, tb.graph, shape, tb.missing, tb.problem,
            gold_given=given, taskbench_gold=given,
            taskbench_type=row.get("type", shape),
        )  # fmt: skip
    raw = row.get("plan", row.get("gold"))
    if raw is None:
        return EvalItem(item_id, request, files, shape=shape)
    if not isinstance(raw, list):
        raise DatasetError("the gold plan must be a JSON list of tasks")
    missing = tuple(
        dict.fromkeys(
            str(t.get("task"))
            for t in raw
            if isinstance(t, dict)
            and not (isinstance(t.get("task"), str) and canonical_task(t["task"]))
        )
    )
    if missing:
        return EvalItem(item_id, request, files, shape=shape, missing=missing, gold_given=raw)
    try:
        plan = parse_plan(json.dumps(raw))
    except PlanError as e:
        return EvalItem(item_id, request, files, shape=shape, gold_problem=str(e), gold_given=raw)
    graph = graph_of_plan(plan)
    shape = shape or plan_shape(plan)
    return EvalItem(
        item_id, request, files, graph, shape,
        gold_given=raw, taskbench_gold=taskbench.graph_nodes(graph), taskbench_type=shape,
    )  # fmt: skip


def _files(raw: Any, request: str) -> tuple[tuple[str, str], ...]:
    """(handle, kind) of the files given, or of the file names in the request."""
    wanted: list[tuple[str, str]] = []
    if raw is None:
        wanted = [
            (m.group(1), _KIND_BY_EXT[m.group(2).lower()]) for m in _FILE_NAME.finditer(request)
        ]
    elif isinstance(raw, list):
        for entry in raw:
            if isinstance(entry, str):
                name, kind = entry, kind_of_name(entry)
            elif (
                isinstance(entry, list)
                and len(entry) == 2
                and all(isinstance(x, str) for x in entry)
            ):
                name, kind = entry[0], entry[1].lower()
            else:
                raise DatasetError(f"files: {entry!r} is neither a name nor a [name, kind] pair")
            if kind not in MODALITIES:
                raise DatasetError(
                    f"files: the kind of {name!r} is not one of {', '.join(MODALITIES)}"
                )
            wanted.append((name, kind))
    else:
        raise DatasetError("files must be a list")
    handles: dict[str, str] = {}
    seen: set[str] = set()
    for name, kind in wanted:
        if name not in seen:
            seen.add(name)
            handles[allocate_handle(set(handles), name)] = kind
    return tuple(handles.items())


def kind_of_name(name: str) -> str:
    """image, audio, video or text by a file name's extension (text when unknown)."""
    ext = name.rpartition(".")[2].lower() if "." in name else ""
    return _KIND_BY_EXT.get(ext, TEXT)
