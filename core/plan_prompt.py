"""The planning prompt: the task list, the demonstrations most like the
request, the request with its files and chat log, and the re-ask.

The demonstrations (``planning_demos.json``) are picked per request by
:func:`pick_demos`; :func:`copied_demo` tells an answer that copies one (its
request's words or its files, which the user's request does not have) from
a plan of the user's own.
"""

from __future__ import annotations

import json
import math
import re
from collections import Counter
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from functools import cache, lru_cache
from string import Template
from typing import Any

from core import prompts
from core.tasks import MODALITIES, TASKS, TEXT, canonical_task

CHAT_LOG_BUDGET = 3000  # characters of earlier turns shown to the planner
ANSWER_CHARS = 300  # an earlier answer as the planner sees it (its files are always kept)
DEMOS_SHOWN = 2  # demonstrations per planning prompt at most: the ones most like the request
DEMO_MIN_SHARE = 0.3  # a next demonstration scores at least this share of the best one's
_WORD = re.compile(r"[^\W_]+")
_STOPWORDS = frozenset((
    "a", "about", "after", "all", "also", "an", "and", "any", "are", "as", "at", "be", "but",
    "by", "can", "could", "do", "does", "for", "from", "get", "had", "has", "have", "her", "his",
    "how", "i", "if", "in", "into", "is", "it", "its", "just", "me", "my", "new", "no", "not",
    "now", "of", "on", "one", "or", "our", "out", "please", "she", "so", "some", "than", "that",
    "the", "their", "them", "then", "there", "these", "they", "this", "to", "too", "up", "us",
    "was", "we", "were", "what", "when", "where", "which", "who", "will", "with", "would", "you",
    "your",
))  # fmt: skip


@dataclass(frozen=True, slots=True)
class Demo:
    """One demonstration of ``planning_demos.json``: a request and its plan."""

    request: str
    plan: list[dict[str, Any]]
    files: tuple[tuple[str, str], ...]
    chat_log: tuple[tuple[str, str], ...]
    signals: frozenset[str]  # stems of its keywords and task names: what it teaches
    words: frozenset[str]  # the signals and the stems of its request
    tasks: frozenset[str]
    # as the planner is shown it: the user message, and the plan as the
    # assistant's answer (in the shape the structured output asks for: a small
    # model given a list here and made to open an object writes indented
    # JSON, twice the tokens)
    shown: tuple[str, str]
    kinds: frozenset[str]  # the kinds of its files (scored on every request: kept)


def _stems(text: str) -> set[str]:
    """The words of ``text``, lowercased, without stop words, crudely stemmed
    (``draws``/``drawing`` → ``draw``, ``summarise``/``summary`` → ``summar``)."""
    out = set()
    for word in _WORD.findall(text.casefold()):
        if word in _STOPWORDS:
            continue
        for suffix in ("ing", "ed", "es", "s", "e"):
            if word.endswith(suffix) and len(word) - len(suffix) >= 3:
                word = word[: -len(suffix)]
                break
        out.add(word[:6])
    return out


@cache
def _demos() -> tuple[Demo, ...]:
    data: list[dict[str, Any]] = json.loads(prompts.load("planning_demos.json"))
    demos = []
    for d in data:
        tasks = frozenset(t["task"] for t in d["plan"])
        signals = frozenset(_stems(" ".join([d.get("keywords", ""), *tasks])))
        files = tuple((h, k) for h, k in d.get("files", []))
        chat_log = tuple((r, t) for r, t in d.get("chat_log", []))
        demos.append(
            Demo(
                request=d["request"],
                plan=d["plan"],
                files=files,
                chat_log=chat_log,
                signals=signals,
                words=signals | _stems(d["request"]),
                tasks=tasks,
                shown=(
                    _user_message(d["request"], chat_log, files),
                    json.dumps({"tasks": d["plan"]}, ensure_ascii=False, separators=(",", ":")),
                ),
                kinds=frozenset(k for _, k in files),
            )
        )
    return tuple(demos)


@lru_cache(maxsize=16)
def _pool(runnable: frozenset[str]) -> tuple[tuple[Demo, ...], Counter[str]]:
    """The demonstrations using only ``runnable`` tasks, and in how many of
    them each word occurs (a process meets few runnable sets: one per set of
    configured experts)."""
    pool = tuple(d for d in _demos() if d.tasks <= runnable)
    return pool, Counter(w for d in pool for w in d.words)


def pick_demos(
    request_text: str,
    *,
    files: Sequence[tuple[str, str]] = (),
    chat_log: Sequence[tuple[str, str]] = (),
    runnable: Collection[str],
    n: int = DEMOS_SHOWN,
) -> list[Demo]:
    """Up to ``n`` demonstrations (of those using only runnable tasks) most
    like the request, the most alike last.

    The score is lexical and cheap: the words the request shares with a
    demonstration's keywords and task names (what it teaches), and at half
    weight with its request, each weighted by how rare it is among the
    demonstrations; plus a little for the kinds of file the request names
    (or the conversation holds) that the demonstration uses too, and for an
    earlier-turn demonstration when the conversation has earlier turns.  The
    best one is taken first; each next one is scored on the words the ones
    taken do not share yet, and left out under ``DEMO_MIN_SHARE`` of the
    best score (a loosely alike example teaches less than it costs).  Ties,
    and a request sharing nothing, keep the file's order, whose first
    entries are the most general.
    """
    pool, df = _pool(frozenset(runnable))
    query = _stems(request_text)
    weight = {w: math.log((len(pool) + 1) / df[w]) for w in query if w in df}
    lowered = request_text.casefold()
    named = {k for h, k in files if h.casefold() in lowered}
    held = {k for _, k in files}

    def score(d: Demo, words: set[str], kinds: set[str]) -> float:
        s = sum(weight[w] * (1.0 if w in d.signals else 0.5) for w in words & d.words)
        if kinds:  # the request names or the conversation holds files
            s += len(named & kinds & d.kinds) + 0.5 * len(held & kinds & d.kinds)
        return s + (0.5 if chat_log and d.chat_log else 0.0)

    left, words, kinds = list(range(len(pool))), set(weight), named | held
    taken: list[int] = []
    best = 0.0
    while left and len(taken) < n:
        scores = {i: score(pool[i], words, kinds) for i in left}
        top = min(left, key=lambda i: (-scores[i], i))
        if taken and scores[top] < DEMO_MIN_SHARE * best:
            break
        best = best or scores[top]
        taken.append(top)
        left.remove(top)
        words -= pool[top].words
        kinds -= pool[top].kinds
    return [pool[i] for i in reversed(taken)]


@cache
def _hints() -> dict[str, str]:
    """Each task's hint for the planner (``planning_tasks.json``): the few
    words its name does not say; empty when the name says it all."""
    data: dict[str, str] = json.loads(prompts.load("planning_tasks.json"))
    return data


def task_spec(runnable: Collection[str]) -> str:
    """The runnable tasks, one line per ``inputs -> output``: each task's name
    with its hint in brackets (a task without a hint entry: its summary)."""
    hints = _hints()
    groups: dict[str, list[str]] = {}
    for spec in TASKS.values():
        if spec.name not in runnable:
            continue
        ins = " + ".join(spec.args) + "".join(f" (+ {o})" for o in spec.optional)
        hint = hints.get(spec.name, spec.summary)
        groups.setdefault(f"{ins} -> {spec.output}", []).append(
            f"{spec.name} ({hint})" if hint else spec.name
        )
    return "\n".join(f"{head}: {', '.join(names)}" for head, names in groups.items()) or (
        "(none: answer [] to every request)"
    )


def inputs_taken(runnable: Collection[str]) -> list[str]:
    """The modalities runnable tasks take, in MODALITIES order (text always)."""
    used = {TEXT} | {m for s in TASKS.values() if s.name in runnable for m in s.args + s.optional}
    return [m for m in MODALITIES if m in used]


@lru_cache(maxsize=16)
def _system_prompt(runnable: frozenset[str]) -> str:
    """The planner's system prompt for this set of runnable tasks (a process
    meets few: one per set of configured experts)."""
    inputs = inputs_taken(runnable)
    media = [m for m in inputs if m != TEXT]
    kinds = ", ".join(media[:-1]) + (" or " if len(media) > 1 else "") + media[-1] if media else ""
    article = "An" if kinds[:1] in ("a", "i") else "A"
    media_rule = (
        f"{article} {kinds} input takes a file or task output of that kind; " if media else ""
    )
    return Template(prompts.load("planning_system.md")).substitute(
        args=",".join(f'"{m}":…' for m in inputs),
        media_rule=media_rule,
        tasks=task_spec(runnable),
    )


def _user_message(
    request_text: str, chat_log: Sequence[tuple[str, str]], files: Sequence[tuple[str, str]]
) -> str:
    listed = ", ".join(f"{h} ({k})" for h, k in files) or "none"
    parts = [f"Files: {listed}"]
    log = prompts.render_chat_log(chat_log, CHAT_LOG_BUDGET, assistant_limit=ANSWER_CHARS)
    if log:
        parts.append(f"<chat_log>\n{log}\n</chat_log>")
    parts.append(f"<request>\n{prompts.quote(request_text.strip())}\n</request>")
    return "\n".join(parts)


def build_planning_messages(
    *,
    request_text: str,
    chat_log: Sequence[tuple[str, str]],
    files: Sequence[tuple[str, str]],
    runnable: Sequence[str],
    demos: Sequence[Demo] | None = None,
) -> list[dict[str, str]]:
    """System prompt (the runnable tasks only), the demonstrations most like
    the request (:func:`pick_demos`; ``demos`` instead when given) as
    user/assistant pairs, the request."""
    runnable_set = frozenset(canonical_task(r) or r for r in runnable)
    messages = [{"role": "system", "content": _system_prompt(runnable_set)}]
    if demos is None:
        demos = demos_shown(request_text, chat_log=chat_log, files=files, runnable=runnable)
    for demo in demos:
        messages.append({"role": "user", "content": demo.shown[0]})
        messages.append({"role": "assistant", "content": demo.shown[1]})
    messages.append({"role": "user", "content": _user_message(request_text, chat_log, files)})
    return messages


def demos_shown(
    request_text: str,
    *,
    chat_log: Sequence[tuple[str, str]],
    files: Sequence[tuple[str, str]],
    runnable: Collection[str],
) -> list[Demo]:
    """The demonstrations :func:`build_planning_messages` shows with this request."""
    runnable_set = {canonical_task(r) or r for r in runnable}
    return pick_demos(request_text, files=files, chat_log=chat_log, runnable=runnable_set)


COPY_MIN_CHARS = 16  # a demonstration's argument shorter than this proves no copying
COPY_MIN_WORDS = 3  # nor one of fewer words
COPY_RUN = 5  # words in a row of a demonstration's request that do
_WORDS = re.compile(r"[^\W_]+")


def copied_demo(
    values: Sequence[str],
    demos: Sequence[Demo],
    *,
    own_text: str,
    handles: Collection[str],
) -> tuple[str, Demo] | None:
    """What an answer's argument ``values`` copy from the ``demos`` shown
    with the request, and the demonstration: a file of it that the
    conversation does not hold, one of its plan's text arguments whole
    (:data:`COPY_MIN_CHARS` and :data:`COPY_MIN_WORDS` or more), or
    :data:`COPY_RUN` words in a row of its request, that the person's own
    words (``own_text``: the request and chat log) do not have.  A short or
    common phrase ("what is the total") is no proof.  None: nothing copied."""
    own = own_text.casefold()
    own_words = _words(own)
    own_runs = _runs(own_words)
    held = {h.casefold() for h in handles}
    for demo in demos:
        phrases = [
            _words(v)
            for task in demo.plan
            for v in task.get("args", {}).values()
            if isinstance(v, str) and _telling(v)
        ]
        runs = _runs(_words(demo.request)) - own_runs
        names = [h.casefold() for h, _ in demo.files]
        for value in values:
            flat = value.casefold()
            for name in names:
                if _names_file(flat, name) and name not in held and not _names_file(own, name):
                    return name, demo
            words = _words(flat)
            for phrase in phrases:
                if _within(phrase, words) and not _within(phrase, own_words):
                    return " ".join(phrase), demo
            shared = sorted(_runs(words) & runs)
            if shared:
                return " ".join(shared[0]), demo
    return None


def _words(text: str) -> list[str]:
    return _WORDS.findall(text.casefold())


def _within(part: Sequence[str], words: Sequence[str]) -> bool:
    n = len(part)
    return any(list(words[i : i + n]) == list(part) for i in range(len(words) - n + 1))


def _runs(words: Sequence[str]) -> set[tuple[str, ...]]:
    """Every :data:`COPY_RUN` words in a row."""
    return {tuple(words[i : i + COPY_RUN]) for i in range(len(words) - COPY_RUN + 1)}


def _telling(phrase: str) -> bool:
    """Long enough that finding it twice is no chance (and not a reference)."""
    return (
        len(phrase) >= COPY_MIN_CHARS
        and len(phrase.split()) >= COPY_MIN_WORDS
        and not phrase.startswith("<")
    )


def _names_file(text: str, name: str) -> bool:
    return re.search(rf"(?<![\w.-]){re.escape(name)}(?![\w-])", text) is not None


def reask_messages(
    messages: Sequence[dict[str, str]], bad_output: str, error: str, *, empty_is_wrong: bool = False
) -> list[dict[str, str]]:
    """The conversation again, plus the rejected answer and what was wrong with it.

    ``empty_is_wrong`` (the rejected plan had tasks, or the user sent files):
    the re-ask says that ``[]`` is not an answer here, instead of offering it.
    """
    shown = prompts.trim(bad_output, 4000)
    if empty_is_wrong:
        tail = (
            "This request needs models: an empty list [] is wrong here. Reply with the "
            "corrected JSON task list only, with at least one task, no other text."
        )
    else:
        tail = (
            "Reply with the corrected JSON task list only (or [] if no model is needed), "
            "no other text."
        )
    return [
        *messages,
        {"role": "assistant", "content": shown},
        {"role": "user", "content": f"{error}\n{tail}"},
    ]
