"""TaskBench's Hugging Face tools (microsoft/JARVIS ``taskbench``,
``data_huggingface/tool_desc.json``), in two views.

TaskBench's own (:data:`TOOL_OUTPUTS`, :func:`taskbench_name`,
:func:`plan_nodes`): the tool list as ``evaluate.py`` reads it, and our plans
written as TaskBench nodes (``{"task", "arguments"}``, ``<node-j>`` for node
j's output) under the name TaskBench gives the same task, for
:mod:`core.evaluation.taskbench_exact`.

Ours (:data:`TOOLS`, :func:`gold_of`): TaskBench's tools mapped onto our task
table and its gold samples read as :class:`TaskGraph`.  There a gold plan that
uses a tool we do not have cannot be planned by our bot: such a request is
left out and counted with the tools it needs (``missing``); a gold sample
whose arguments are not a list is left out too, with the reason
(``problem``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from core.evaluation.graphs import GraphNode, TaskGraph, graph_of_plan
from core.planning import PlannedTask
from core.tasks import TASKS, canonical_task

# TaskBench's tool list as evaluate.py reads it: each tool's id, in the list's
# order, and the first of its output types ("none" when it lists none).
# Checked against tests/data/taskbench_hf_tools.json (MIT, microsoft/JARVIS).
TOOL_OUTPUTS: dict[str, str] = {
    "Token Classification": "text",
    "Translation": "text",
    "Summarization": "text",
    "Question Answering": "text",
    "Conversational": "text",
    "Text Generation": "text",
    "Sentence Similarity": "none",
    "Tabular Classification": "text",
    "Object Detection": "text",
    "Image Classification": "text",
    "Image-to-Image": "image",
    "Image-to-Text": "text",
    "Text-to-Image": "image",
    "Text-to-Video": "video",
    "Visual Question Answering": "text",
    "Document Question Answering": "text",
    "Image Segmentation": "image",
    "Depth Estimation": "image",
    "Text-to-Speech": "audio",
    "Automatic Speech Recognition": "text",
    "Audio-to-Audio": "audio",
    "Audio Classification": "text",
    "Image Editing": "image",
}


def _spelling(name: str) -> str:
    return re.sub(r"[\s_\-]+", "", name).casefold()


# Our task -> the TaskBench tool of the same name (case, spaces, "-" and "_" aside).
_TASKBENCH_NAMES = {
    task: tool for task in TASKS for tool in TOOL_OUTPUTS if _spelling(task) == _spelling(tool)
}


def taskbench_name(task: str) -> str:
    """The name TaskBench gives our task: the tool of the same name
    (``image-to-image`` is ``Image-to-Image``, never ``Image Editing``), else
    our name, which TaskBench does not know."""
    return _TASKBENCH_NAMES.get(task, task)


def graph_nodes(graph: TaskGraph) -> list[dict[str, Any]]:
    """A graph as TaskBench nodes: ``{"task", "arguments"}``, TaskBench's names."""
    return [{"task": taskbench_name(n.task), "arguments": list(n.args)} for n in graph.nodes]


def plan_nodes(plan: Sequence[PlannedTask]) -> list[dict[str, Any]]:
    """Our plan as TaskBench nodes, as a TaskBench prediction writes them: a
    ``<resource>-ID`` becomes ``<node-POSITION>`` (a reference to an id the
    plan does not have stays as written, a text), a question-answering text
    ``question\\ncontext`` its two arguments (:func:`graph_of_plan`)."""
    return graph_nodes(graph_of_plan(plan))


# Our view: TaskBench tool → our task.  Tools we do not have map to None (the reason in a comment).
TOOLS: dict[str, str | None] = {
    "Token Classification": "token-classification",
    "Translation": "translation",
    "Summarization": "summarization",
    "Question Answering": "question-answering",
    "Conversational": "conversational",
    "Text Generation": "text-generation",
    "Sentence Similarity": None,  # we have no sentence-similarity task
    # TaskBench's classifies a table *image*; ours a CSV row given as text.
    "Tabular Classification": None,
    "Object Detection": "object-detection",
    "Image Classification": "image-classification",
    "Image-to-Image": "image-to-image",
    "Image-to-Text": "image-to-text",
    "Text-to-Image": "text-to-image",
    "Text-to-Video": "text-to-video",
    "Visual Question Answering": "visual-question-answering",
    "Document Question Answering": "document-question-answering",
    "Image Segmentation": "image-segmentation",
    "Depth Estimation": "depth-estimation",
    "Text-to-Speech": "text-to-speech",
    "Automatic Speech Recognition": "automatic-speech-recognition",
    "Audio-to-Audio": "audio-to-audio",
    "Audio Classification": "audio-classification",
    # text + image -> image: our image-to-image with its optional text instruction
    "Image Editing": "image-to-image",
}


def task_for_tool(name: str) -> str | None:
    """Our task for a TaskBench tool name: its entry in :data:`TOOLS`, else
    the task the name is one of our names or aliases for (TaskBench reads
    ``_`` as a space), else None."""
    if name in TOOLS:
        return TOOLS[name]
    return canonical_task(name.replace("_", " "))


@dataclass(frozen=True, slots=True)
class TaskBenchGold:
    graph: TaskGraph | None  # None: missing tools or a problem
    missing: tuple[str, ...] = ()  # tools of the gold we do not have
    problem: str | None = None  # why the gold cannot be read


def gold_of(row: Mapping[str, Any]) -> TaskBenchGold:
    """The gold graph of one TaskBench sample (``task_nodes``), in our names."""
    raw_nodes = row.get("task_nodes")
    if not isinstance(raw_nodes, list):
        return TaskBenchGold(None, problem="task_nodes is not a list")
    nodes: list[GraphNode] = []
    missing: list[str] = []
    for pos, node in enumerate(raw_nodes):
        if not isinstance(node, dict) or not isinstance(node.get("task"), str):
            return TaskBenchGold(None, problem=f"node {pos} has no task name")
        tool = node["task"]
        arguments = node.get("arguments")
        if not isinstance(arguments, list):
            return TaskBenchGold(None, problem=f"node {pos} ({tool}) has no arguments list")
        task = task_for_tool(tool)
        if task is None:
            if tool not in missing:
                missing.append(tool)
            continue
        nodes.append(GraphNode(task, tuple(_argument(a) for a in arguments)))
    if missing:
        return TaskBenchGold(None, missing=tuple(missing))
    return TaskBenchGold(TaskGraph(tuple(nodes)))


def _argument(value: Any) -> str:
    """One argument as TaskBench reads it: a dict's first value, a list's
    items joined by spaces, anything else as text."""
    if isinstance(value, dict):
        value = next(iter(value.values()), "")
    if isinstance(value, list):
        value = " ".join(str(v) for v in value)
    return value if isinstance(value, str) else str(value)
