"""Plans as graphs, for comparing a predicted plan with a gold one.

A :class:`TaskGraph` is TaskBench's view of a plan: a list of nodes, each a
task name and its argument values, where ``<node-K>`` in a value is the
output of the K-th node (0-based position, whatever ids the plan used).  Our
plans (:class:`~core.planning.PlannedTask`, ``<resource>-ID`` references) and
TaskBench's gold (``task_nodes``) both become one, so renumbered ids and
task aliases never count as differences.

Also here: the shape of a plan (single / chain / dag), the links that feed an
output kind to an input that cannot take it, and the task names an answer
invents.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from core.jsonish import JSONishError, find_objects
from core.planning import PlannedTask
from core.tasks import MODALITIES, TASKS, TEXT, canonical_task

SINGLE, CHAIN, DAG, NONE = "single", "chain", "dag", "none"
SHAPES = (SINGLE, CHAIN, DAG)
NODE_REF = re.compile(r"<node-(\d+)>")
_RESOURCE_REF = re.compile(r"<resource>-(\d+)")

# Tasks whose results carry words besides their main output (labelled boxes,
# labelled regions): a text input fed from them gets those labels
# (core.results.TaskResult.as_text), so such a link is not inconsistent.
TEXT_ALONGSIDE = frozenset({"object-detection", "image-segmentation"})


@dataclass(frozen=True, slots=True)
class GraphNode:
    task: str  # our canonical task name (or the name as written, when it is none of ours)
    args: tuple[str, ...]  # argument values; "<node-K>" refers to node K's output


@dataclass(frozen=True, slots=True)
class TaskGraph:
    nodes: tuple[GraphNode, ...]

    def links(self) -> list[tuple[int, int]]:
        """(source, target) positions: an argument of the target refers to the
        source's output (TaskBench's resource dependencies); self-references
        and references past the end are not links."""
        out: list[tuple[int, int]] = []
        for i, node in enumerate(self.nodes):
            for value in node.args:
                m = NODE_REF.search(value)
                if m is not None:
                    k = int(m.group(1))
                    if k != i and k < len(self.nodes) and (k, i) not in out:
                        out.append((k, i))
        return out

    def to_json(self) -> list[dict[str, object]]:
        return [{"task": n.task, "arguments": list(n.args)} for n in self.nodes]


def graph_of_plan(plan: Sequence[PlannedTask]) -> TaskGraph:
    """Our plan as a graph: ``<resource>-ID`` becomes ``<node-POSITION>``; a
    question-answering text (``question\\ncontext``) is its two arguments,
    as TaskBench writes them."""
    position = {t.id: i for i, t in enumerate(plan)}

    def renumber(m: re.Match[str]) -> str:
        pos = position.get(int(m.group(1)))
        return m.group(0) if pos is None else f"<node-{pos}>"

    nodes: list[GraphNode] = []
    for t in plan:
        values: list[str] = []
        for key in MODALITIES:
            value = t.args.get(key, "")
            if not value.strip():
                continue
            value = _RESOURCE_REF.sub(renumber, value)
            if key == TEXT and t.task == "question-answering" and "\n" in value:
                question, context = value.split("\n", 1)
                values.extend(v for v in (question, context) if v.strip())
            else:
                values.append(value)
        nodes.append(GraphNode(t.task, tuple(values)))
    return TaskGraph(tuple(nodes))


def shape_of(n_nodes: int, links: Iterable[tuple[int, int]]) -> str:
    """``none`` (no task), ``single`` (one), ``chain`` (each task but the first
    takes the output of the one before: one path) or ``dag`` (anything else)."""
    if n_nodes == 0:
        return NONE
    if n_nodes == 1:
        return SINGLE
    edges = set(links)
    ins = [0] * n_nodes
    outs = [0] * n_nodes
    for src, dst in edges:
        outs[src] += 1
        ins[dst] += 1
    path = (
        len(edges) == n_nodes - 1
        and max(ins) <= 1
        and max(outs) <= 1
        and ins.count(0) == 1  # one start: connected (n - 1 edges, no branching)
    )
    return CHAIN if path else DAG


def plan_shape(plan: Sequence[PlannedTask]) -> str:
    """The shape of our plan, its ``dep`` lists being the links."""
    position = {t.id: i for i, t in enumerate(plan)}
    links = [(position[d], i) for i, t in enumerate(plan) for d in t.dep if d in position]
    return shape_of(len(plan), links)


def inconsistent_links(plan: Sequence[PlannedTask]) -> list[str]:
    """The links that feed a task's output to an input of another kind, per
    the task table: an image made by one task given as another's audio, a
    picture given as text, … (a text input may take labelled boxes or regions,
    see :data:`TEXT_ALONGSIDE`).  One line each, for the report."""
    by_id = {t.id: t for t in plan}
    found: list[str] = []
    for t in plan:
        for key, value in t.args.items():
            for ref in _RESOURCE_REF.findall(value):
                src = by_id.get(int(ref))
                if src is None or src.id == t.id:
                    continue
                made = TASKS[src.task].output
                if made == key or (key == TEXT and src.task in TEXT_ALONGSIDE):
                    continue
                found.append(
                    f"task {src.id} ({src.task}) makes {made}, given to task {t.id} "
                    f"({t.task}) as {key}"
                )
    return found


def invented_tasks(answer: str) -> list[str]:
    """The task names in an answer's task objects that are not in our task
    table (aliases are ours), in order; the answer need not be a valid plan."""
    try:
        objects, _complete = find_objects(answer, "task")
    except JSONishError:
        return []
    names: list[str] = []
    for _start, _end, obj in objects:
        name = obj.get("task")
        if isinstance(name, str) and canonical_task(name) is not None:
            continue
        names.append(name if isinstance(name, str) else repr(name))
    return names
