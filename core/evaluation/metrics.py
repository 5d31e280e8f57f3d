"""Our view of TaskBench's plan metrics, on :class:`TaskGraph` pairs in our
task names.  (TaskBench's own figures, exactly as its ``evaluate.py``
computes them, are :mod:`core.evaluation.taskbench_exact`'s; this view is
printed after them, where it differs.)

The metrics are TaskBench's, read in our terms.  Per request, each compares
two **sets** built from the gold plan and the predicted one; the true
positives, false positives and false negatives are summed over the requests
(micro average) and F1 = 2TP / (2TP + FP + FN):

* **node F1** – the set of task names (names outside our task table count on
  neither side);
* **edge F1** – the set of ``(source task, target task)`` pairs, an edge
  being an argument that refers to another task's output (a ``dep`` with no
  such argument is not an edge: TaskBench's "resource" dependencies);
* **argument-name F1** – ``task-kind`` strings: a reference's kind is the
  output kind of the task it refers to (from our task table), any other
  value's the kind its file extension says (TaskBench's
  :func:`~core.evaluation.taskbench_exact.content_type`), else ``text``;
* **argument-value F1** – ``task-kind-value`` strings, a reference's value
  being the name of the task it refers to;
* **normalised edit distance** – 1 − the mean over requests of the indel
  similarity of the two task-name sequences (``Levenshtein.ratio``:
  2·LCS / (len + len), 1 for two empty plans).

Where this view departs from TaskBench's (docs/evaluation.md): names are our
canonical task names (aliases, and TaskBench's tools mapped by
:mod:`core.evaluation.taskbench`, ``Image Editing`` as ``image-to-image``);
kinds come from our task table; a reference to itself or past the end is no
argument; the sequences for the edit distance are in a canonical topological
order (a task after those it needs, ties by name), so the same graph written
in another order is not an error; and an F1 none of whose requests has
anything to count is ``None`` (TaskBench prints 0).
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field

from core.evaluation.graphs import NODE_REF, TaskGraph
from core.evaluation.taskbench_exact import content_type
from core.tasks import TASKS

UNKNOWN_KIND = "other"  # TaskBench's output kind of a tool not in its list
_UNKNOWN_TASK = "\x00unknown"  # every name outside the table, in the edit distance


def output_kind(task: str) -> str:
    """A task's output kind from our task table."""
    spec = TASKS.get(task)
    return spec.output if spec is not None else UNKNOWN_KIND


@dataclass(slots=True)
class Counts:
    """True positives, false positives and false negatives of one metric."""

    tp: int = 0
    fp: int = 0
    fn: int = 0

    def add(self, gold: Collection[object], predicted: Collection[object]) -> None:
        g, p = set(gold), set(predicted)
        self.tp += len(g & p)
        self.fp += len(p - g)
        self.fn += len(g - p)

    def merge(self, other: Counts) -> None:
        self.tp += other.tp
        self.fp += other.fp
        self.fn += other.fn

    @property
    def f1(self) -> float | None:
        """2TP / (2TP + FP + FN); None when there was nothing to count."""
        total = 2 * self.tp + self.fp + self.fn
        return None if total == 0 else 2 * self.tp / total

    def to_json(self) -> dict[str, int | float | None]:
        return {"tp": self.tp, "fp": self.fp, "fn": self.fn, "f1": self.f1}


@dataclass(frozen=True, slots=True)
class Features:
    """What the metrics compare of one graph."""

    names: frozenset[str]
    sequence: tuple[str, ...]
    links: frozenset[tuple[str, str]]
    arg_names: frozenset[str]
    arg_values: frozenset[str]


def features(graph: TaskGraph, kind_of: Callable[[str], str] = output_kind) -> Features:
    """The sets TaskBench compares, and the task sequence in canonical order."""
    names = [n.task for n in graph.nodes]
    links: set[tuple[str, str]] = set()
    arg_names: set[str] = set()
    arg_values: set[str] = set()
    for i, node in enumerate(graph.nodes):
        for value in node.args:
            m = NODE_REF.search(value)
            if m is not None:
                k = int(m.group(1))
                if k == i or k >= len(names):
                    continue  # TaskBench skips a node's reference to itself
                links.add((names[k], node.task))
                name, shown = kind_of(names[k]), names[k]
            else:
                name, shown = content_type(value), value
            arg_names.add(f"{node.task}-{name}")
            arg_values.add(f"{node.task}-{name}-{shown}")
    return Features(
        frozenset(names),
        canonical_order(graph),
        frozenset(links),
        frozenset(arg_names),
        frozenset(arg_values),
    )


def canonical_order(graph: TaskGraph) -> tuple[str, ...]:
    """The task names in topological order, ready tasks by name then position
    (tasks on a cycle, which no valid plan has, follow in written order)."""
    n = len(graph.nodes)
    waiting = [0] * n
    users: list[list[int]] = [[] for _ in range(n)]
    for src, dst in graph.links():
        waiting[dst] += 1
        users[src].append(dst)
    ready = [(graph.nodes[i].task, i) for i in range(n) if waiting[i] == 0]
    heapq.heapify(ready)
    order: list[int] = []
    while ready:
        _, i = heapq.heappop(ready)
        order.append(i)
        for user in users[i]:
            waiting[user] -= 1
            if waiting[user] == 0:
                heapq.heappush(ready, (graph.nodes[user].task, user))
    placed = set(order)
    order += [i for i in range(n) if i not in placed]
    return tuple(graph.nodes[i].task for i in order)


def sequence_similarity(a: Sequence[str], b: Sequence[str]) -> float:
    """``Levenshtein.ratio`` of two sequences: 1 − indel distance / (len a +
    len b) = 2·LCS / (len a + len b); 1.0 for two empty sequences."""
    if not a and not b:
        return 1.0
    previous = [0] * (len(b) + 1)
    for x in a:
        current = [0]
        for j, y in enumerate(b):
            current.append(previous[j] + 1 if x == y else max(previous[j + 1], current[j]))
        previous = current
    return 2 * previous[-1] / (len(a) + len(b))


@dataclass(slots=True)
class SampleScore:
    """One request's counts (for the report's per-request lines)."""

    nodes: Counts
    edges: Counts
    arg_names: Counts
    arg_values: Counts
    similarity: float


def score_sample(
    gold: TaskGraph,
    predicted: TaskGraph,
    *,
    known: Collection[str] = TASKS.keys(),
    kind_of: Callable[[str], str] = output_kind,
) -> SampleScore:
    """Compare one predicted graph with its gold graph."""
    g, p = features(gold, kind_of), features(predicted, kind_of)
    nodes = Counts()
    nodes.add({n for n in g.names if n in known}, {n for n in p.names if n in known})
    edges, arg_names, arg_values = Counts(), Counts(), Counts()
    edges.add(g.links, p.links)
    arg_names.add(g.arg_names, p.arg_names)
    arg_values.add(g.arg_values, p.arg_values)

    def ids(seq: tuple[str, ...]) -> list[str]:
        return [s if s in known else _UNKNOWN_TASK for s in seq]

    similarity = sequence_similarity(ids(p.sequence), ids(g.sequence))
    return SampleScore(nodes, edges, arg_names, arg_values, similarity)


@dataclass(slots=True)
class GoldScores:
    """The metrics over a set of requests (micro-averaged F1s, mean NED)."""

    requests: int = 0
    nodes: Counts = field(default_factory=Counts)
    edges: Counts = field(default_factory=Counts)
    arg_names: Counts = field(default_factory=Counts)
    arg_values: Counts = field(default_factory=Counts)
    similarity: float = 0.0  # summed over the requests

    def add(self, sample: SampleScore) -> None:
        self.requests += 1
        self.nodes.merge(sample.nodes)
        self.edges.merge(sample.edges)
        self.arg_names.merge(sample.arg_names)
        self.arg_values.merge(sample.arg_values)
        self.similarity += sample.similarity

    @property
    def ned(self) -> float | None:
        """Normalised edit distance: 1 − mean similarity (None: no request)."""
        return None if self.requests == 0 else 1 - self.similarity / self.requests

    def to_json(self) -> dict[str, object]:
        return {
            "requests": self.requests,
            "node_f1": self.nodes.f1,
            "edge_f1": self.edges.f1,
            "arg_name_f1": self.arg_names.f1,
            "arg_value_f1": self.arg_values.f1,
            "ned": self.ned,
            "counts": {
                "nodes": self.nodes.to_json(),
                "edges": self.edges.to_json(),
                "arg_names": self.arg_names.to_json(),
                "arg_values": self.arg_values.to_json(),
            },
        }
