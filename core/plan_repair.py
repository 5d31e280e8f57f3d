"""Repairs of a plan that was read but would be refused, made before refusing it.

A small model's plan is often right in what it asks for and wrong in its
bookkeeping.  :func:`repair_plan` fixes what has one reading, and only that,
deterministically, each fix a :class:`Repair` (logged by the planner,
counted by ``eval plans``):

* ``task_name`` – a task name we do not know, close to exactly one offered
  task: an offered name's words in it, in order, with only filler words
  (``generation``, ``model``, ``task``…) around them
  (``text-to-image-generation`` → text-to-image), or two or more words of
  it in an offered name (``speech-recognition`` →
  automatic-speech-recognition), or else a misspelling: within two letters
  of its length and :data:`NAME_CUTOFF` of it by
  :func:`difflib.get_close_matches`.
  Never a task that is not offered; never one of two.
* ``renumbered`` – ids that are not 0, 1, 2… in order (duplicates included)
  become their positions; ``dep`` and ``<resource>-N`` follow them (an id
  written twice means the nearest such task before the one referring to it,
  else the task itself).
* ``dropped_dep`` – a dependency on the task itself or on no task, when no
  argument uses it.
* ``added_dep`` – the dependency a ``<resource>-N`` argument implies.
* ``dropped_arg`` – an input the task does not take (an ASR task's image).
* ``output`` – a media input naming a file the conversation does not hold,
  in a task that depends on exactly one task making that kind: that task's
  output.
* ``file`` – otherwise, the conversation's one file of that kind (also for
  a missing input of a task that depends on nothing).

* ``request`` – a text input that is only a reference to the task itself
  or to no task, with no earlier task making text (a small model's first
  task reading ``<resource>-0``), or a question written as the very file
  the task already takes (a document question whose text is the
  document): the person's message, which is what the task was asked.
* ``bridged`` – an input of a kind nothing in the plan or the conversation
  gives it: a text task handed an image, audio or video (a text
  classification of ``example.jpg``), or a media input with no file or
  task of its kind (an image edit with no image, an audio clean-up after a
  caption; only when the conversation has no file of that kind and the
  input names no file): the one offered task that turns what there is into that kind
  (:data:`CONVERTERS`: image-to-text, automatic-speech-recognition,
  text-to-image, text-to-speech …) is put before it, fed by the file, the
  task's own text, the nearest earlier task making text, else the message.

What has no single reading (an unknown name near no task or several, an
argument using a task that is not there or itself, a cycle) is a
:class:`PlanError` for the re-ask.  ``task_name`` and ``file`` change what
the plan means: they carry a :class:`~core.types.PlanNote` for the person, as
do ``request`` and ``bridged``.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, replace
from enum import StrEnum

from core.errors import PlanError
from core.plan_read import short
from core.planning import (
    MEDIA,
    DraftTask,
    PlannedTask,
    check_graph,
    join_problems,
    references,
)
from core.tasks import AUDIO, IMAGE, TASKS, TEXT, VIDEO, canonical_task
from core.types import PlanChange, PlanNote

NAME_CUTOFF = 0.85  # difflib ratio for a misspelt task name
# Words a task name may carry around one of ours and still mean it.
FILLER = frozenset(
    {"generation", "generate", "generator", "task", "model", "pipeline", "tool", "hf"}
)
_REF = re.compile(r"<resource>-(\d+)")
_WORDS = re.compile(r"[A-Z]+(?![a-z])|[A-Z]?[a-z]+|\d+")


class RepairKind(StrEnum):
    TASK_NAME = "task_name"
    RENUMBERED = "renumbered"
    DROPPED_DEP = "dropped_dep"
    ADDED_DEP = "added_dep"
    DROPPED_ARG = "dropped_arg"
    OUTPUT = "output"
    FILE = "file"
    REFERENCE = "reference"
    MERGED = "merged"
    MOVED = "moved"
    REQUEST = "request"
    BRIDGED = "bridged"


# The one task that turns an input of one kind into another (from, to), when offered.
CONVERTERS: dict[tuple[str, str], str] = {
    (IMAGE, TEXT): "image-to-text",
    (AUDIO, TEXT): "automatic-speech-recognition",
    (VIDEO, TEXT): "video-classification",
    (TEXT, IMAGE): "text-to-image",
    (TEXT, AUDIO): "text-to-speech",
    (TEXT, VIDEO): "text-to-video",
}


@dataclass(frozen=True, slots=True)
class Repair:
    """One fix of a plan: which kind, the task (its id after the fix;
    None for the whole plan) and what changed, in words for the log."""

    kind: RepairKind
    task: int | None
    detail: str
    note: PlanNote | None = None  # said to the person: the fix changed the meaning


def repair_plan(
    drafts: Sequence[DraftTask],
    *,
    handles: Mapping[str, str],
    runnable: Collection[str],
    request_text: str = "",
) -> tuple[list[PlannedTask], list[Repair]]:
    """The plan ``drafts`` make once repaired, and the repairs; raises
    :class:`PlanError` for what cannot be repaired (the graph is checked
    too; :func:`~core.planning.check_plan` is the caller's).
    ``request_text``: the person's message (``request`` and ``bridged`` use
    it; without it they are not made)."""
    repairs: list[Repair] = []
    wanted = {canonical_task(r) or r for r in runnable}
    offered = [t for t in TASKS if t in wanted]
    names = _names(drafts, offered, repairs)
    ids = _renumber(drafts, repairs)
    problems: list[str] = []
    plan: list[PlannedTask] = []
    for pos, d in enumerate(drafts):
        name = names[pos]
        if name is None:
            problems.append(f"task {d.id} has unknown task {short(d.name)}")
            continue
        args = _args(pos, d, name, names, ids, repairs, problems, request_text)
        plan.append(PlannedTask(pos, name, _deps(pos, d, args, ids, repairs), args))
    if problems:
        hint = f" The tasks you may use are: {', '.join(offered) or 'none (answer [])'}."
        raise PlanError(join_problems(problems, hint if None in names else ""))
    plan = _merge_repeats(plan, repairs)
    plan = [_inputs(t, plan, handles, repairs) for t in plan]
    plan = [_question(t, handles, request_text, repairs) for t in plan]
    if request_text:
        plan = _bridge(plan, handles, request_text, offered, repairs)
    check_graph(plan, problems)
    if problems:
        raise PlanError(join_problems(problems))
    return plan, repairs


# ------------------------------------------------------------------- names


def near_task(name: str, offered: Collection[str]) -> str | None:
    """The one offered task ``name`` means, when it is close to exactly one."""
    words = _words(name)
    hits = set()
    for task in offered:
        for alias in (task, *TASKS[task].aliases):
            theirs = _words(alias)
            at = _find(words, theirs)
            if at is not None and set(words[:at] + words[at + len(theirs) :]) <= FILLER:
                hits.add(task)  # text-to-image-generation: text-to-image
            elif len(words) >= 2 and _find(theirs, words) is not None:
                hits.add(task)  # speech-recognition: automatic-speech-recognition
    if hits:
        return hits.pop() if len(hits) == 1 else None
    # a misspelling: as long as the name, give or take two letters (a word
    # more or less is no typo: "classification" is not text-classification)
    norm = _norm(name)
    keys = {
        k: task
        for task in offered
        for alias in (task, *TASKS[task].aliases)
        if abs(len(k := _norm(alias)) - len(norm)) <= 2
    }
    close = {keys[k] for k in difflib.get_close_matches(norm, keys, n=3, cutoff=NAME_CUTOFF)}
    return close.pop() if len(close) == 1 else None


def _names(
    drafts: Sequence[DraftTask], offered: Sequence[str], repairs: list[Repair]
) -> list[str | None]:
    out: list[str | None] = []
    for pos, d in enumerate(drafts):
        if not isinstance(d.name, str):
            out.append(None)
            continue
        known = canonical_task(d.name)
        near = None if known is not None else near_task(d.name, offered)
        if near is not None:
            note = PlanNote(PlanChange.TASK, pos, d.name, near)
            repairs.append(Repair(RepairKind.TASK_NAME, pos, f"{d.name!r} → {near}", note))
        out.append(known or near)
    return out


def _words(name: str) -> list[str]:
    return [w.casefold() for w in _WORDS.findall(name)]


def _norm(name: str) -> str:
    return "".join(_words(name))


def _find(words: Sequence[str], part: Sequence[str]) -> int | None:
    """Where ``part`` starts in ``words`` (contiguous), if it does."""
    n = len(part)
    return next(
        (i for i in range(len(words) - n + 1) if list(words[i : i + n]) == list(part)), None
    )


# --------------------------------------------------------------------- ids


class _Ids:
    """Old ids → positions: what a reference written in task ``pos`` means."""

    def __init__(self, drafts: Sequence[DraftTask]) -> None:
        self.at: dict[int, list[int]] = {}
        for pos, d in enumerate(drafts):
            self.at.setdefault(d.id, []).append(pos)

    def resolve(self, old: int, pos: int) -> int | None:
        """The position task ``pos`` means by id ``old``: the nearest task
        with that id before it, else itself (its own id), else the first
        after it; None: no task has it."""
        places = self.at.get(old, [])
        before = [p for p in places if p < pos]
        if before:
            return before[-1]
        if pos in places:
            return pos
        return places[0] if places else None


def _renumber(drafts: Sequence[DraftTask], repairs: list[Repair]) -> _Ids:
    written = [d.id for d in drafts]
    if written != list(range(len(drafts))):
        changed = ", ".join(f"{old}→{new}" for new, old in enumerate(written) if old != new)
        repairs.append(Repair(RepairKind.RENUMBERED, None, f"ids {changed}"))
    return _Ids(drafts)


def _deps(
    pos: int, d: DraftTask, args: Mapping[str, str], ids: _Ids, repairs: list[Repair]
) -> list[int]:
    used = references(args)
    dep: list[int] = []
    for old in d.dep:
        new = ids.resolve(old, pos)
        if new is None or new == pos:
            what = "itself" if new == pos else f"task {old}, which is not in the plan"
            repairs.append(Repair(RepairKind.DROPPED_DEP, pos, f"dep on {what}"))
        elif new not in dep:
            dep.append(new)
    for ref in sorted(used - set(dep) - {pos}):
        repairs.append(Repair(RepairKind.ADDED_DEP, pos, f"dep on task {ref} (<resource>-{ref})"))
        dep.append(ref)
    return dep


# -------------------------------------------------------------------- args


def _args(
    pos: int,
    d: DraftTask,
    name: str,
    names: Sequence[str | None],
    ids: _Ids,
    repairs: list[Repair],
    problems: list[str],
    request_text: str = "",
) -> dict[str, str]:
    """The task's own inputs, references renumbered.  A reference to the
    task itself or to no task (small models count ids from 1, or name the
    output they are about to make) means the nearest earlier task whose
    output is of that input's kind; with none, a media input that is only
    that reference is left for :func:`_inputs` (the one file of its kind);
    anything else is a problem."""
    spec = TASKS[name]
    out: dict[str, str] = {}
    for key, value in d.args.items():
        if key not in spec.args and key not in spec.optional:
            repairs.append(Repair(RepairKind.DROPPED_ARG, pos, f"{key}={short(value, 40)}"))
            continue
        unresolved: list[str] = []

        def renumbered(m: re.Match[str], key: str = key, unresolved: list[str] = unresolved) -> str:
            old = int(m.group(1))
            new = ids.resolve(old, pos)
            if new is not None and new != pos:
                return f"<resource>-{new}"
            what = "itself" if new == pos else "no task in the plan"
            maker = _nearest_maker(pos, key, names)
            if maker is not None:
                repairs.append(
                    Repair(
                        RepairKind.REFERENCE,
                        pos,
                        f"{key} <resource>-{old} ({what}) → <resource>-{maker}, "
                        f"the nearest earlier task that outputs {key}",
                    )
                )
                return f"<resource>-{maker}"
            unresolved.append(f"task {d.id} takes {key} <resource>-{old}, which is {what}")
            return m.group()

        written = _REF.sub(renumbered, value)
        if unresolved and key == TEXT and request_text and _REF.fullmatch(value.strip()):
            # nothing earlier makes text: the words the task was asked are the person's
            note = PlanNote(PlanChange.REQUEST, pos, value.strip(), "", TEXT)
            repairs.append(
                Repair(RepairKind.REQUEST, pos, f"text {value.strip()} → the message", note)
            )
            out[key] = request_text
            continue
        if unresolved and key != TEXT and _REF.fullmatch(value.strip()):
            # nothing earlier makes this kind: the conversation's one file of it may (_inputs)
            repairs.append(Repair(RepairKind.REFERENCE, pos, f"{key} {value.strip()} left out"))
            continue
        problems.extend(
            f"{u}; <resource>-N may only name an earlier task's output" for u in unresolved
        )
        out[key] = written
    return out


def _merge_repeats(plan: Sequence[PlannedTask], repairs: list[Repair]) -> list[PlannedTask]:
    """A task that repeats an earlier one (the same task on the same inputs,
    references read as the tasks they end up naming) would only make the
    same output again: small models write such repeats when they loop.  It
    is left out and what referred to it refers to the earlier one."""
    at: dict[int, int] = {}  # position in ``plan`` → position in the merged plan
    seen: dict[tuple[str, tuple[tuple[str, str], ...]], int] = {}
    kept: list[PlannedTask] = []
    for t in plan:

        def mapped(m: re.Match[str], pos: int = t.id) -> str:
            ref = int(m.group(1))
            return f"<resource>-{at[ref]}" if ref < pos and ref in at else f"<ref>-{ref}"

        key = (t.task, tuple(sorted((k, _REF.sub(mapped, v)) for k, v in t.args.items())))
        if key in seen:
            at[t.id] = seen[key]
            repairs.append(Repair(RepairKind.MERGED, t.id, f"the same as task {seen[key]}"))
            continue
        at[t.id] = seen[key] = len(kept)
        kept.append(t)
    if len(kept) == len(plan):
        return list(plan)

    def remapped(m: re.Match[str]) -> str:
        return f"<resource>-{at.get(int(m.group(1)), int(m.group(1)))}"

    out = []
    for t in kept:
        new = at[t.id]
        dep = list(dict.fromkeys(at.get(d, d) for d in t.dep if at.get(d, d) != new))
        args = {k: _REF.sub(remapped, v) for k, v in t.args.items()}
        out.append(PlannedTask(new, t.task, dep, args))
    return out


def _nearest_maker(pos: int, kind: str, names: Sequence[str | None]) -> int | None:
    """The nearest task before ``pos`` whose output is ``kind``."""
    for p in range(pos - 1, -1, -1):
        name = names[p]
        if name is not None and TASKS[name].output == kind:
            return p
    return None


def _inputs(
    t: PlannedTask,
    plan: Sequence[PlannedTask],
    handles: Mapping[str, str],
    repairs: list[Repair],
) -> PlannedTask:
    """A media input naming no file of the conversation, or missing: a file
    of that kind written as the task's text instead (moved), else the one
    dependency's output of that kind, else the one file of that kind."""
    spec = TASKS[t.task]
    args = dict(t.args)
    for kind in MEDIA:
        takes = kind in spec.args or kind in spec.optional
        text = args.get(TEXT, "").strip()
        if takes and kind not in args and handles.get(text) == kind:
            args[kind] = text
            del args[TEXT]
            repairs.append(Repair(RepairKind.MOVED, t.id, f"{text} from text to {kind}"))
            continue
        if kind not in spec.args and kind not in args:
            continue
        value = args.get(kind)
        if value is not None and (_REF.fullmatch(value) or value in handles):
            continue
        makers = [d for d in t.dep if TASKS[plan[d].task].output == kind]
        files = [h for h, k in handles.items() if k == kind]
        if len(makers) == 1:
            args[kind] = f"<resource>-{makers[0]}"
            repairs.append(
                Repair(RepairKind.OUTPUT, t.id, f"{kind} {value or ''!r} → <resource>-{makers[0]}")
            )
        elif len(files) == 1 and not makers:
            written = value if value is not None else ""
            note = PlanNote(PlanChange.FILE, t.id, written, files[0], kind)
            args[kind] = files[0]
            repairs.append(Repair(RepairKind.FILE, t.id, f"{kind} {written!r} → {files[0]}", note))
    return replace(t, args=args) if args != t.args else t


def _question(
    t: PlannedTask, handles: Mapping[str, str], request_text: str, repairs: list[Repair]
) -> PlannedTask:
    """A text input that is a file of a kind the task already takes as its
    input (a document question whose question is the document): the
    person's message is the question."""
    text = t.args.get(TEXT, "").strip()
    kind = handles.get(text)
    if not request_text or kind not in MEDIA or kind not in t.args:
        return t
    note = PlanNote(PlanChange.REQUEST, t.id, text, "", TEXT)
    repairs.append(Repair(RepairKind.REQUEST, t.id, f"text {text!r} → the message", note))
    return replace(t, args={**t.args, TEXT: request_text})


def _bridge(
    plan: Sequence[PlannedTask],
    handles: Mapping[str, str],
    request_text: str,
    offered: Collection[str],
    repairs: list[Repair],
) -> list[PlannedTask]:
    """Each input that nothing gives its kind gets the converter that makes
    it, put just before its task (ids after it move up by one)."""
    out: list[PlannedTask] = []
    new_id: dict[int, int] = {}

    def moved(m: re.Match[str]) -> str:
        return f"<resource>-{new_id.get(int(m.group(1)), int(m.group(1)))}"

    for t in plan:
        args = {k: _REF.sub(moved, v) for k, v in t.args.items()}
        dep = [new_id.get(d, d) for d in t.dep]
        spec = TASKS[t.task]
        for key in (TEXT, *MEDIA):
            if key not in spec.args and key not in args:
                continue
            value = args.get(key, "").strip()
            source = _source(key, value, dep, args, out, handles, request_text)
            if source is None:
                continue
            have, given, shown = source
            converter = CONVERTERS.get((have, key))
            if converter is None or converter not in offered:
                continue
            cid = len(out)
            out.append(PlannedTask(cid, converter, _deps_of(given), {have: given}))
            note = PlanNote(PlanChange.BRIDGED, cid, shown, converter, key)
            repairs.append(
                Repair(
                    RepairKind.BRIDGED,
                    cid,
                    f"{converter} on {shown} makes the {key} of task {t.task} "
                    f"({key} was {value or 'missing'!r})",
                    note,
                )
            )
            args[key] = f"<resource>-{cid}"
            dep = [*dep, cid]
        new_id[t.id] = len(out)
        out.append(PlannedTask(len(out), t.task, list(dict.fromkeys(dep)), args))
    return out


def _source(
    key: str,
    value: str,
    dep: Sequence[int],
    args: Mapping[str, str],
    done: Sequence[PlannedTask],
    handles: Mapping[str, str],
    request_text: str,
) -> tuple[str, str, str] | None:
    """What a converter for input ``key`` would be fed — (its kind, the value,
    how the person is told of it) — or None when the input has its kind
    already or no converter can help."""
    if key == TEXT:
        kind = handles.get(value)
        return (kind, value, value) if kind in MEDIA else None
    ref = _ref_id(value)
    if ref is not None and ref < len(done):
        made = TASKS[done[ref].task].output
        return (TEXT, value, f"the {TEXT} of task {ref}") if made == TEXT else None
    if value or key in handles.values():
        # a file name (the conversation's, of the wrong kind, or one it lacks: the
        # check says so and the model is asked again), or files of this kind to
        # choose from: nothing is made in their place
        return None
    texts = [d for d in dep if d < len(done) and TASKS[done[d].task].output == TEXT]
    own = args.get(TEXT, "").strip()
    if len(texts) == 1:
        return TEXT, f"<resource>-{texts[0]}", f"the {TEXT} of task {texts[0]}"
    if own and handles.get(own) is None:
        return TEXT, own, repr(short(own, 60))
    earlier = [p.id for p in done if TASKS[p.task].output == TEXT]
    if earlier:
        return TEXT, f"<resource>-{earlier[-1]}", f"the {TEXT} of task {earlier[-1]}"
    return TEXT, request_text, "your message"


def _ref_id(value: str) -> int | None:
    m = _REF.fullmatch(value.strip())
    return int(m.group(1)) if m else None


def _deps_of(value: str) -> list[int]:
    return sorted({int(n) for n in _REF.findall(value)})


def notes(repairs: Sequence[Repair]) -> tuple[PlanNote, ...]:
    """What the person is told of these repairs."""
    return tuple(r.note for r in repairs if r.note is not None)
