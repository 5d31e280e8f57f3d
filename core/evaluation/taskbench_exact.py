"""TaskBench's figures exactly as its ``evaluate.py`` computes them.

``taskbench/evaluate.py`` (microsoft/JARVIS), resource dependencies
(``--dependency_type resource``), metrics ``f1``, ``ed``, ``link`` and
``argument``, re-implemented here from its definitions, quirks included, so
that the same predictions give the same figures.  (Its step metrics, ROUGE
and BERTScore, compare the plan's step texts: our planner writes none and the
dev file's gold has none.)

A request is its gold line (``task_nodes``, and ``type`` for the split) and
the prediction's ``result`` (``{"task_nodes": [{"task", "arguments"}]}``).
What ``evaluate.py`` does with them, and so this module:

* **Names.** A node's ``task`` with ``_`` read as a space.  Only the tools of
  TaskBench's list count in node F1 (a name it does not know counts on
  neither side) and in the edit distance every unknown name is the same
  tool, 0.
* **Arguments.** Each argument of a node: a dict's first value, a list's
  items joined by spaces.  One holding ``<node-`` refers to node *j*, *j*
  read from after ``<node-`` up to the argument's first ``>`` (Python's
  ``int``: ``-1`` is the last node); a node's reference to itself is dropped.
  A reference becomes the argument ``(output type of the tool referred to,
  its name)`` and the link ``(its name, this node's task as written)``; any
  other argument ``(content type, the argument)``, the content type image,
  audio or video when the text holds ``.ext`` of one (:func:`content_type`),
  else text.  An argument that cannot be read so (a reference past the end,
  no ``>``, a number, ``null``) is the last argument read before it, in this
  request or an earlier one (``evaluate.py`` keeps the variable); when none
  was read yet the request is left out.  A request is left out too when a
  node has no ``task`` or the gold a node without ``arguments`` ("Parsing
  Error" in ``evaluate.py``'s log).
* **Sets.** Per request, node names, links, ``task-type`` and
  ``task-type-value`` strings are sets: a repeated one counts once.
* **Figures.** Node precision, recall, F1 micro- and macro-averaged over the
  tools of the list (scikit-learn's ``precision_recall_fscore_support``:
  a tool with nothing to count scores 0 and still counts in the macro
  average), per tool; binary F1 of the links and of the two argument sets,
  over all requests' items; the edit distance 1 − the mean over requests of
  ``Levenshtein.ratio`` of the two sequences of tool numbers.  A ratio with
  nothing to count is 0.
* **Groups.** ``--splits all --n_tools all --mode add``: every request, each
  ``type`` (single, chain, dag), each gold size 1–10; each group read afresh.
* **Duplicates.** Gold and predictions are keyed by ``id``: of lines with
  the same id, the last is scored.

One thing ``evaluate.py`` leaves to chance, this module fixes: it reads the
requests in the order of a Python ``set`` of ids (it changes from run to
run), which matters only for an argument it cannot read with none read
before it in the same request.  Here the order is the dataset's.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

NEGATIVE = 0  # evaluate.py's number for a name not in the tool list
PAD = "<PAD>"  # … and its -1
UNKNOWN_OUTPUT = "other"  # the output type of a tool not in the list
SPLITS = ("single", "chain", "dag")
OVERALL = "overall"
SIZES = tuple(str(n) for n in range(1, 11))

# TaskBench's get_content_type: the first list with ".ext" in the text wins.
_EXTENSIONS = (
    ("image", ("jpg", "png", "jpeg", "gif", "bmp", "tiff", "svg", "ico")),
    ("audio", ("mp3", "wav", "wma", "ogg", "aac", "flac", "aiff", "au")),
    ("video", ("mp4", "avi", "mov", "flv", "wmv", "mkv", "webm", "m4v", "mpg", "mpeg")),
)


def content_type(value: str) -> str:
    """The type TaskBench gives an argument's text: image, audio or video
    when it contains ``.<extension>`` of one (quotes around it aside), else text."""
    content = value.strip("'")
    for kind, extensions in _EXTENSIONS:
        if any(f".{ext}" in content for ext in extensions):
            return kind
    return "text"


@dataclass(frozen=True, slots=True)
class Sample:
    """One request: the gold line as given and the prediction's ``result``."""

    id: str
    gold: Mapping[str, Any]  # task_nodes, as in the dataset
    result: Any  # {"task_nodes": [...]}; anything else is a prediction evaluate.py cannot read
    split: object = None  # the gold's type (single, chain, dag) as given


class Unreadable(Exception):
    """A request ``evaluate.py`` leaves out ("Parsing Error"); the message says why."""


class _Unread(Exception):
    """An argument ``evaluate.py`` cannot read (it reuses the last one read)."""


@dataclass(slots=True)
class _Carry:
    """``evaluate.py``'s ``new_argument``: the last argument read, kept
    across nodes and requests."""

    last: tuple[str, str] | None = None


Arg = tuple[str, str, str]  # (task, type, value)
Link = tuple[str, str]  # (source, target)


@dataclass(frozen=True, slots=True)
class Side:
    """One side of a request (gold or prediction) as the metrics see it."""

    names: tuple[str, ...]
    links: tuple[Link, ...]
    args: tuple[Arg, ...]

    def arg_names(self) -> set[str]:
        return {f"{task}-{kind}" for task, kind, _value in self.args}

    def arg_values(self) -> set[str]:
        return {f"{task}-{kind}-{value}" for task, kind, value in self.args}


@dataclass(frozen=True, slots=True)
class Read:
    """One request read as ``evaluate.py`` reads it."""

    gold: Side
    predicted: Side


def _elements(value: Any, what: str) -> list[Any]:
    """What ``for x in value`` gives in Python: a list's items, a dict's keys,
    a string's characters; anything else cannot be iterated."""
    if isinstance(value, list):
        return value
    if isinstance(value, dict):
        return list(value)
    if isinstance(value, str):
        return list(value)
    raise Unreadable(f"{what} is {type(value).__name__}, not a list")


def _argument(
    argument: Any,
    position: int,
    names: Sequence[str],
    task: str,
    outputs: Mapping[str, str],
    links: list[Link],
) -> tuple[str, str] | None:
    """One argument as ``(type, value)``; None: a reference to its own node
    (dropped).  Raises :class:`_Unread` where ``evaluate.py`` raises."""
    if isinstance(argument, dict):
        if not argument:
            raise _Unread
        argument = next(iter(argument.values()))
    if isinstance(argument, list):
        if not all(isinstance(item, str) for item in argument):
            raise _Unread
        argument = " ".join(argument)
    if not isinstance(argument, str):
        raise _Unread
    if "<node-" not in argument:
        return content_type(argument), argument
    start = argument.index("<node-") + len("<node-")
    end = argument.find(">")  # the argument's first ">", wherever it is
    if end < 0:
        raise _Unread
    try:
        j = int(argument[start:end])
    except ValueError:
        raise _Unread from None
    if j == position:
        return None
    try:
        source = names[j]
    except IndexError:
        raise _Unread from None
    links.append((source, task))
    return outputs.get(source, UNKNOWN_OUTPUT), source


def _side(
    nodes: Sequence[Any],
    names: Sequence[str],
    outputs: Mapping[str, str],
    carry: _Carry,
    *,
    gold: bool,
) -> Side:
    links: list[Link] = []
    args: list[Arg] = []
    for position, node in enumerate(nodes):
        if gold:
            if "arguments" not in node:
                raise Unreadable(f"gold node {position} has no arguments")
            raw = node["arguments"]
        else:
            raw = node.get("arguments", [])
        what = f"{'gold' if gold else 'predicted'} node {position}'s arguments"
        for argument in _elements(raw, what):
            try:
                read = _argument(argument, position, names, node["task"], outputs, links)
            except _Unread:
                if carry.last is None:
                    raise Unreadable(
                        f"{what}: {argument!r} cannot be read and no argument was read before"
                    ) from None
                read = carry.last
            else:
                if read is None:
                    continue
                carry.last = read
            args.append((names[position], *read))
    return Side(tuple(names), tuple(links), tuple(args))


def _names(nodes: Sequence[Any], side: str) -> list[str]:
    names: list[str] = []
    for position, node in enumerate(nodes):
        if not isinstance(node, dict) or "task" not in node:
            raise Unreadable(f"{side} node {position} has no task")
        name = node["task"]
        if not isinstance(name, str):
            raise Unreadable(f"{side} node {position}'s task is not a text")
        names.append(name.replace("_", " "))
    return names


def read_sample(sample: Sample, outputs: Mapping[str, str], carry: _Carry | None = None) -> Read:
    """One request as ``evaluate.py`` reads it; :class:`Unreadable` when it
    leaves the request out.  ``carry`` (the last argument read in earlier
    requests) is updated as it goes, also when the request is left out part
    way, as ``evaluate.py``'s variable is."""
    carry = carry if carry is not None else _Carry()
    gold_nodes = _elements(sample.gold.get("task_nodes"), "the gold's task_nodes")
    if not isinstance(sample.result, dict) or "task_nodes" not in sample.result:
        raise Unreadable("the prediction has no task_nodes")
    predicted_nodes = _elements(sample.result["task_nodes"], "the prediction's task_nodes")
    gold_names = _names(gold_nodes, "gold")
    predicted_names = _names(predicted_nodes, "predicted")
    gold = _side(gold_nodes, gold_names, outputs, carry, gold=True)
    predicted = _side(predicted_nodes, predicted_names, outputs, carry, gold=False)
    return Read(gold, predicted)


# --------------------------------------------------------------------- figures


@dataclass(frozen=True, slots=True)
class PRF:
    precision: float
    recall: float
    f1: float


def prf(tp: int, fp: int, fn: int) -> PRF:
    """scikit-learn's precision, recall and F1 (1.0/1.1: F1 from the two;
    0 where a ratio has nothing to count)."""
    precision = tp / (tp + fp) if tp + fp else 0.0
    recall = tp / (tp + fn) if tp + fn else 0.0
    denominator = 1.0 * precision + recall
    f1 = 2.0 * precision * recall / denominator if denominator != 0.0 else 0.0
    return PRF(precision, recall, f1)


@dataclass(slots=True)
class Tally:
    """True positives, false positives and false negatives."""

    tp: int = 0
    fp: int = 0
    fn: int = 0

    def add(self, gold: Iterable[object], predicted: Iterable[object]) -> None:
        g, p = set(gold), set(predicted)
        self.tp += len(g & p)
        self.fp += len(p - g)
        self.fn += len(g - p)

    def prf(self) -> PRF:
        return prf(self.tp, self.fp, self.fn)

    def to_json(self) -> dict[str, int]:
        return {"tp": self.tp, "fp": self.fp, "fn": self.fn}


def ratio(a: Sequence[int], b: Sequence[int]) -> float:
    """``Levenshtein.ratio``: 1 − indel distance / (len a + len b), the
    distance being len a + len b − 2·LCS; 1.0 for two empty sequences."""
    total = len(a) + len(b)
    if total == 0:
        return 1.0
    previous = [0] * (len(b) + 1)
    for x in a:
        current = [0]
        for k, y in enumerate(b):
            current.append(previous[k] + 1 if x == y else max(previous[k + 1], current[k]))
        previous = current
    return 1.0 - (total - 2 * previous[-1]) / total


@dataclass(frozen=True, slots=True)
class SampleCounts:
    """One request's share of the figures (for the report)."""

    nodes: Tally  # tools of the list only
    links: Tally
    arg_names: Tally
    arg_values: Tally
    similarity: float


def sample_counts(read: Read, tools: Sequence[str]) -> SampleCounts:
    known = set(tools)
    nodes = Tally()
    nodes.add(
        (n for n in read.gold.names if n in known), (n for n in read.predicted.names if n in known)
    )
    links, arg_names, arg_values = Tally(), Tally(), Tally()
    links.add(read.gold.links, read.predicted.links)
    arg_names.add(read.gold.arg_names(), read.predicted.arg_names())
    arg_values.add(read.gold.arg_values(), read.predicted.arg_values())
    number = tool_numbers(tools)
    similarity = ratio(
        [number.get(n, NEGATIVE) for n in read.predicted.names],
        [number.get(n, NEGATIVE) for n in read.gold.names],
    )
    return SampleCounts(nodes, links, arg_names, arg_values, similarity)


def tool_numbers(tools: Sequence[str]) -> dict[str, int]:
    """evaluate.py's ``tool_map``: 1, 2, … in the list's order; ``<PAD>`` -1."""
    return {**{t: i + 1 for i, t in enumerate(tools)}, PAD: -1}


@dataclass(slots=True)
class GroupFigures:
    """The figures ``evaluate.py`` writes for one group (``split_n``)."""

    all_samples: int = 0
    supports: int = 0  # requests read (node, link and argument supports alike)
    per_tool: dict[str, Tally] = field(default_factory=dict)
    links: Tally = field(default_factory=Tally)
    arg_names: Tally = field(default_factory=Tally)
    arg_values: Tally = field(default_factory=Tally)
    similarity: float = 0.0  # summed over the requests read, in their order

    @property
    def scored(self) -> bool:
        """evaluate.py prints figures only when some request was read."""
        return self.supports > 0

    def node_micro(self) -> PRF:
        tp = sum(t.tp for t in self.per_tool.values())
        fp = sum(t.fp for t in self.per_tool.values())
        fn = sum(t.fn for t in self.per_tool.values())
        return prf(tp, fp, fn)

    def node_macro(self) -> PRF:
        each = [t.prf() for t in self.per_tool.values()]
        n = len(each)
        return PRF(
            sum(x.precision for x in each) / n,
            sum(x.recall for x in each) / n,
            sum(x.f1 for x in each) / n,
        )

    @property
    def edit_distance(self) -> float:
        return 1 - self.similarity / self.supports

    def to_json(self) -> dict[str, Any]:
        """``evaluate.py``'s metric dictionary for the group, its keys and all."""
        out: dict[str, Any] = {
            "all_samples": self.all_samples,
            "step_supports": 0,
            "node_supports": self.supports,
            "link_supports": self.supports,
            "argument_supports": self.supports,
        }
        if not self.scored:
            return out
        micro, macro = self.node_micro(), self.node_macro()
        out |= {
            "node_micro_precision_no_matching": micro.precision,
            "node_micro_recall_no_matching": micro.recall,
            "node_micro_f1_no_matching": micro.f1,
            "node_macro_precision_no_matching": macro.precision,
            "node_macro_recall_no_matching": macro.recall,
            "node_macro_f1_no_matching": macro.f1,
            "node_per_type_no_matchcing": {
                tool: {
                    "precision": (p := t.prf()).precision,
                    "recall": p.recall,
                    "f1-score": p.f1,
                    "support": t.tp + t.fn,
                }
                for tool, t in self.per_tool.items()
            },
            "argument_task_argname_binary_f1_no_matching": self.arg_names.prf().f1,
            "argument_task_argname_value_binary_f1_no_matching": self.arg_values.prf().f1,
            "edit_distance": self.edit_distance,
            "link_binary_f1": self.links.prf().f1,
        }
        return out


def groups() -> list[tuple[str, str]]:
    """(split, size) of ``--splits all --n_tools all --mode add``, in order."""
    out = [(s, OVERALL) for s in (OVERALL, *SPLITS)]
    out += [(OVERALL, n) for n in SIZES]
    return out


@dataclass(slots=True)
class ExactScores:
    """Every group's figures, and each request's reading in the first group
    (every request): its counts, or why ``evaluate.py`` leaves it out."""

    groups: dict[str, GroupFigures] = field(default_factory=dict)  # "overall_overall", …
    samples: dict[str, SampleCounts | str] = field(default_factory=dict)  # id -> counts | why

    @property
    def overall(self) -> GroupFigures:
        return self.groups[f"{OVERALL}_{OVERALL}"]

    def to_json(self) -> dict[str, Any]:
        return {name: g.to_json() for name, g in self.groups.items()}


def _size(sample: Sample) -> str | None:
    nodes = sample.gold.get("task_nodes")
    return str(len(nodes)) if isinstance(nodes, list | dict | str) else None


def evaluate(samples: Iterable[Sample], outputs: Mapping[str, str]) -> ExactScores:
    """The figures of ``evaluate.py`` for these requests; ``outputs`` is the
    tool list (tool -> its first output type), in the list's order.  Of
    samples with the same id the last is scored."""
    by_id: dict[str, Sample] = {}
    for s in samples:
        by_id[s.id] = s
    tools = list(outputs)
    number = tool_numbers(tools)
    out = ExactScores()
    for split, size in groups():
        chosen = [
            s
            for s in by_id.values()
            if (split == OVERALL or s.split == split) and (size == OVERALL or _size(s) == size)
        ]
        figures = GroupFigures(all_samples=len(chosen), per_tool={t: Tally() for t in tools})
        carry = _Carry()
        for s in chosen:
            try:
                read = read_sample(s, outputs, carry)
            except Unreadable as e:
                if split == size == OVERALL:
                    out.samples[s.id] = str(e)
                continue
            figures.supports += 1
            gold, predicted = set(read.gold.names), set(read.predicted.names)
            for name in gold | predicted:
                tally = figures.per_tool.get(name)
                if tally is not None:
                    tally.tp += name in gold and name in predicted
                    tally.fp += name in predicted and name not in gold
                    tally.fn += name in gold and name not in predicted
            figures.links.add(read.gold.links, read.predicted.links)
            figures.arg_names.add(read.gold.arg_names(), read.predicted.arg_names())
            figures.arg_values.add(read.gold.arg_values(), read.predicted.arg_values())
            figures.similarity += ratio(
                [number.get(n, NEGATIVE) for n in read.predicted.names],
                [number.get(n, NEGATIVE) for n in read.gold.names],
            )
            if split == size == OVERALL:
                out.samples[s.id] = sample_counts(read, tools)
        out.groups[f"{split}_{size}"] = figures
    return out
