"""The structured output a plan is asked in, and the planning call's token cap.

Where the server enforces ``response_format=json_schema`` (llama.cpp turns it
into a grammar, vLLM into xgrammar/guidance, OpenAI's strict mode into its
own), the schema is the plan's shape exactly, so a small model cannot write
a task we do not offer, an input a task does not take, a file the
conversation does not hold, or more tasks than the cap.  It comes in three
forms, most constraining first; :class:`~core.llm.LLM` sends the first and
steps to the next when a server refuses one (and remembers it):

``full``
    ``{"tasks": [...]}`` with ``maxItems`` = the plan cap; each item is one
    of the ``anyOf`` variants, one per group of offered tasks that take the
    same inputs: ``task`` an ``enum`` of those names (``const`` for one),
    ``args`` exactly those inputs.  A media input is an ``enum`` of the
    conversation's files of that kind and ``<resource>-0`` … ``<resource>-N``;
    a text input a string with ``maxLength`` (a looping model cannot write
    forever); ids and deps integers, ``dep`` at most the plan cap long.  An
    optional input
    (image-to-image's text) may be left out.
``strict``
    What OpenAI's strict mode documents: the same without ``const`` (a
    one-value ``enum``) and ``maxLength``, every property required (the
    optional input nullable).
``plain``
    For a server that takes ``enum`` but not ``anyOf``: one task object,
    ``task`` an ``enum`` of every offered name, ``args`` every input kind
    the offered tasks take, none required.  Parsing and repair
    (:mod:`core.plan_repair`) do the rest.

docs/planning.md says which form which server takes.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from functools import lru_cache
from typing import Any

from core.llm import JSONSchema
from core.plan_prompt import inputs_taken
from core.tasks import MODALITIES, TASKS, TEXT, canonical_task

FULL, STRICT, PLAIN = "full", "strict", "plain"
FORMS = (FULL, STRICT, PLAIN)
# The planning call's completion cap, when not set: a task of the paper's
# format is 30-50 tokens (its text argument aside), so this many per task of
# the plan cap, a margin, and room to quote the request (about 3 characters a
# token in the worst case).  10 tasks and a short request: ~830 tokens, a
# minute at 15 tokens/s; a model that loops is cut far sooner (core.planner).
TOKENS_PER_TASK = 70
TOKEN_MARGIN = 100
CHARS_PER_TOKEN = 3
# Room added for a model that thinks before it answers (its reasoning counts
# against the cap): hosted APIs, and any server whose model was seen to.
REASONING_ROOM = 3072
# A text argument holds at most the request (and what of the chat log the
# planner was shown) and this much more: a looping model cannot fill it forever.
TEXT_MARGIN = 300


def planning_token_cap(max_tasks: int, request_chars: int = 0, *, reasoning: bool = False) -> int:
    """The completion cap for one planning call: a plan of ``max_tasks``
    tasks that quotes a request of ``request_chars`` characters, plus
    :data:`REASONING_ROOM` for a model that reasons first."""
    cap = TOKENS_PER_TASK * max(max_tasks, 1) + TOKEN_MARGIN + request_chars // CHARS_PER_TOKEN
    return cap + (REASONING_ROOM if reasoning else 0)


def text_limit(request_chars: int, chat_log_chars: int = 0) -> int:
    """The ``maxLength`` of a text argument for a request of this size."""
    return request_chars + chat_log_chars + TEXT_MARGIN


def plan_schema(
    runnable: Collection[str],
    *,
    max_tasks: int = 10,
    files: Sequence[tuple[str, str]] = (),
    text_chars: int | None = None,
) -> JSONSchema:
    """The plan's structured output in its three forms (``full`` first, the
    others as :attr:`~core.llm.JSONSchema.fallbacks`).

    ``files``: (handle, kind) of the conversation's files, the only files a
    media input may name; ``text_chars``: the ``maxLength`` of a text input
    (None: none)."""
    wanted = {canonical_task(r) or r for r in runnable}
    offered = tuple(t for t in TASKS if t in wanted)
    refs = _refs(max_tasks)
    full = _variants(offered, max_tasks, files, refs, text_chars, strict=False)
    return JSONSchema(
        "plan", full, fallbacks=_fallbacks(offered, max_tasks, tuple((h, k) for h, k in files))
    )


@lru_cache(maxsize=8)
def _refs(max_tasks: int) -> tuple[str, ...]:
    return tuple(f"<resource>-{i}" for i in range(max(max_tasks, 1)))


@lru_cache(maxsize=256)
def _fallbacks(
    offered: tuple[str, ...], max_tasks: int, files: tuple[tuple[str, str], ...]
) -> tuple[Mapping[str, Any], Mapping[str, Any]]:
    """The ``strict`` and ``plain`` forms: unlike ``full`` they do not bound
    a text input by the request's length, so a conversation's requests share
    them (sent only to a server that refused ``full``; never changed once
    built, as none of the forms is)."""
    strict = _variants(offered, max_tasks, files, _refs(max_tasks), None, strict=True)
    return strict, _plain(offered, max_tasks)


def _root(items: Mapping[str, Any], max_tasks: int, defs: Mapping[str, Any]) -> dict[str, Any]:
    root: dict[str, Any] = {
        "type": "object",
        "properties": {
            "tasks": {"type": "array", "items": dict(items), "maxItems": max(max_tasks, 0)}
        },
        "required": ["tasks"],
        "additionalProperties": False,
    }
    if defs:
        root["$defs"] = dict(defs)
    return root


def _task_object(
    name: Mapping[str, Any], args: Mapping[str, Any], max_tasks: int
) -> dict[str, Any]:
    # a task depends on at most every other one: a model counting 1, 2, 3…
    # in its dep (SmolLM2 does) stops there
    dep = {"type": "array", "items": {"type": "integer"}, "maxItems": max(max_tasks, 0)}
    return {
        "type": "object",
        "properties": {
            "task": dict(name),
            "id": {"type": "integer"},
            "dep": dep,
            "args": dict(args),
        },
        "required": ["task", "id", "dep", "args"],
        "additionalProperties": False,
    }


def _variants(
    offered: Sequence[str],
    max_tasks: int,
    files: Sequence[tuple[str, str]],
    refs: Sequence[str],
    text_chars: int | None,
    *,
    strict: bool,
) -> dict[str, Any]:
    """The ``full`` (``strict=False``) or ``strict`` form."""
    groups: dict[tuple[frozenset[str], frozenset[str]], list[str]] = {}
    for name in offered:
        spec = TASKS[name]
        groups.setdefault((frozenset(spec.args), frozenset(spec.optional)), []).append(name)
    defs: dict[str, Any] = {}
    variants = []
    for (needed, optional), names in groups.items():
        props: dict[str, Any] = {}
        for m in MODALITIES:
            if m in needed or m in optional:
                defs.setdefault(m, _input(m, files, refs, text_chars))
                ref = {"$ref": f"#/$defs/{m}"}
                props[m] = {"anyOf": [ref, {"type": "null"}]} if strict and m in optional else ref
        required = [m for m in props if m in needed or strict]
        task: dict[str, Any] = (
            {"const": names[0]}
            if len(names) == 1 and not strict
            else {"type": "string", "enum": names}
        )
        args = {
            "type": "object",
            "properties": props,
            "required": required,
            "additionalProperties": False,
        }
        variants.append(_task_object(task, args, max_tasks))
    items: dict[str, Any] = {"anyOf": variants} if variants else {"type": "object"}
    return _root(items, max_tasks if variants else 0, defs)


def _input(
    modality: str, files: Sequence[tuple[str, str]], refs: Sequence[str], text_chars: int | None
) -> dict[str, Any]:
    """One input kind: text a bounded string; a media kind one of the
    conversation's files of that kind or a task's output."""
    if modality == TEXT:
        bound = {} if text_chars is None else {"maxLength": text_chars}
        return {"type": "string", **bound}
    handles = [h for h, kind in files if kind == modality]
    return {"type": "string", "enum": [*dict.fromkeys(handles), *refs]}


def _plain(offered: Sequence[str], max_tasks: int) -> dict[str, Any]:
    """The ``plain`` form: no ``anyOf``, ``const`` or ``$ref``."""
    if not offered:
        return _root({"type": "object"}, 0, {})
    inputs = inputs_taken(offered)
    args = {
        "type": "object",
        "properties": {m: {"type": "string"} for m in inputs},
        "additionalProperties": False,
    }
    task = _task_object({"type": "string", "enum": list(offered)}, args, max_tasks)
    return _root(task, max_tasks, {})
