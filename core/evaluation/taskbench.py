"""TaskBench's Hugging Face tools (microsoft/JARVIS ``taskbench``,
``data_huggingface/tool_desc.json``) mapped onto our task table, and its gold
samples (``task_nodes``/``task_links``) read as :class:`TaskGraph`.

A gold plan that uses a tool we do not have cannot be planned by our bot:
such a request is left out of the gold metrics and counted with the tools it
needs (``missing``).  A gold sample TaskBench itself could not read (a node
without ``arguments``) is left out too, with the reason (``problem``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from core.evaluation.graphs import GraphNode, TaskGraph
from core.tasks import canonical_task

# TaskBench tool → our task.  Tools we do not have map to None (the reason in a comment).
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
