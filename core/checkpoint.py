"""A request's progress as JSON, so another process can finish it.

The agent checkpoints a job as it goes (:class:`Checkpoint`, stored on the
``turn_jobs`` row): the uploads once they are in the media store, the plan
and the chosen models, each task the moment it finishes (its result, with
generated files as stored handles, never bytes), and finally the reply, in
the same transaction that saves the turn.  Resuming reads it back: stored
files are named by storage path relative to the media root and read through
the media store, so a checkpoint can never point a reader outside it.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from core.catalog import ModelInfo
from core.execution import TaskOutcome
from core.planning import PlannedTask
from core.results import Answer, Blob, Box, Entity, Label, Segment, TaskResult
from core.selection import Selection
from core.store.media import MediaStore
from core.types import Reply, ReplyStatus, Resource, TaskRecord, TaskStatus, Timings, Usage

VERSION = 1


def _json(value: Any) -> Any:
    return json.loads(json.dumps(value, default=str))


def _time(value: datetime | None) -> str | None:
    return value.isoformat() if value is not None else None


def _parse_time(value: Any) -> datetime | None:
    return datetime.fromisoformat(value) if isinstance(value, str) else None


# --- files -------------------------------------------------------------------


def resource_to_json(r: Resource, media: MediaStore) -> dict[str, Any]:
    return {
        "handle": r.handle,
        "kind": r.kind,
        "mime": r.mime,
        "path": media.relative(r.path),
        "sha256": r.sha256,
        "size": r.size,
        "source": r.source,
        "task_id": r.task_id,
    }


def resource_from_json(d: dict[str, Any], media: MediaStore) -> Resource:
    return Resource(
        handle=str(d["handle"]),
        kind=str(d["kind"]),
        mime=str(d["mime"]),
        path=media.path(str(d["path"])),  # ValueError outside the media root
        sha256=str(d["sha256"]),
        size=int(d["size"]),
        source=str(d["source"]),
        task_id=d.get("task_id"),
    )


# --- task results ------------------------------------------------------------


def result_to_json(r: TaskResult) -> dict[str, Any]:
    """Everything but media bytes: a blob is kept by its stored handle."""
    return {
        "text": r.text,
        "labels": [[x.label, x.score] for x in r.labels],
        "entities": [[e.word, e.group, e.score, e.start, e.end] for e in r.entities],
        "boxes": [[b.label, b.score, b.xmin, b.ymin, b.xmax, b.ymax] for b in r.boxes],
        "answers": [[a.answer, a.score] for a in r.answers],
        "segments": [
            [s.label, s.score, base64.b64encode(s.mask).decode() if s.mask else None]
            for s in r.segments
        ],
        "media": [{"kind": b.kind, "mime": b.mime, "handle": b.handle} for b in r.media],
        "extra": _json(r.extra),
    }


def result_from_json(d: dict[str, Any], blob_data: Callable[[str | None], bytes]) -> TaskResult:
    return TaskResult(
        text=d.get("text"),
        labels=tuple(Label(str(a), float(b)) for a, b in d.get("labels", ())),
        entities=tuple(Entity(str(w), str(g), float(s), a, b) for w, g, s, a, b in d["entities"]),
        boxes=tuple(Box(str(lb), float(s), *map(float, xy)) for lb, s, *xy in d["boxes"]),
        answers=tuple(Answer(str(a), s) for a, s in d.get("answers", ())),
        segments=tuple(
            Segment(str(lb), s, base64.b64decode(m) if m else None) for lb, s, m in d["segments"]
        ),
        media=tuple(
            Blob(str(m["kind"]), str(m["mime"]), blob_data(m.get("handle")), m.get("handle"))
            for m in d.get("media", ())
        ),
        extra=dict(d.get("extra") or {}),
    )


def outcome_to_json(o: TaskOutcome) -> dict[str, Any]:
    return {
        "id": o.id,
        "task": o.task,
        "status": str(o.status),
        "model": o.model.id if o.model else None,
        "reason": o.reason,
        "backend": o.backend,
        "started": _time(o.started),
        "ended": _time(o.ended),
        "error": o.error,
        "result": result_to_json(o.result) if o.result is not None else None,
        "args": dict(o.args),
        "attempts": list(o.attempts),
    }


def outcome_from_json(
    d: dict[str, Any],
    model: Callable[[str, str], ModelInfo],
    blob_data: Callable[[str | None], bytes],
) -> TaskOutcome:
    task = str(d["task"])
    return TaskOutcome(
        id=int(d["id"]),
        task=task,
        status=TaskStatus(d["status"]),
        model=model(d["model"], task) if d.get("model") else None,
        reason=d.get("reason"),
        backend=d.get("backend"),
        started=_parse_time(d.get("started")),
        ended=_parse_time(d.get("ended")),
        error=d.get("error"),
        result=result_from_json(d["result"], blob_data) if d.get("result") else None,
        args=dict(d.get("args") or {}),
        attempts=list(d.get("attempts") or ()),
    )


# --- the reply ---------------------------------------------------------------


def record_to_json(t: TaskRecord) -> dict[str, Any]:
    return {
        "id": t.id,
        "task": t.task,
        "model": t.model,
        "status": str(t.status),
        "started": _time(t.started),
        "ended": _time(t.ended),
        "error": t.error,
        "args": dict(t.args),
        "dep": list(t.dep),
        "reason": t.reason,
        "result": _json(t.result),
        "files": list(t.files),
        "backend": t.backend,
    }


def record_from_json(d: dict[str, Any]) -> TaskRecord:
    return TaskRecord(
        id=int(d["id"]),
        task=str(d["task"]),
        model=d.get("model"),
        status=TaskStatus(d["status"]),
        started=_parse_time(d.get("started")),
        ended=_parse_time(d.get("ended")),
        error=d.get("error"),
        args=dict(d.get("args") or {}),
        dep=tuple(d.get("dep") or ()),
        reason=d.get("reason"),
        result=d.get("result"),
        files=tuple(d.get("files") or ()),
        backend=d.get("backend"),
    )


def usage_to_json(u: Usage) -> dict[str, int]:
    return {
        "llm_calls": u.llm_calls,
        "prompt_tokens": u.prompt_tokens,
        "completion_tokens": u.completion_tokens,
    }


def usage_from_json(d: dict[str, Any] | None) -> Usage:
    d = d or {}
    return Usage(
        int(d.get("llm_calls", 0)),
        int(d.get("prompt_tokens", 0)),
        int(d.get("completion_tokens", 0)),
    )


def reply_to_json(r: Reply, media: MediaStore) -> dict[str, Any]:
    return {
        "text": r.text,
        "files": [resource_to_json(f, media) for f in r.files],
        "tasks": [record_to_json(t) for t in r.tasks],
        "timings": dict(r.timings),
        "usage": usage_to_json(r.usage),
        "request_id": r.request_id,
        "status": r.status.value,
    }


def reply_from_json(d: dict[str, Any], media: MediaStore) -> Reply:
    return Reply(
        text=str(d["text"]),
        files=tuple(resource_from_json(f, media) for f in d.get("files", ())),
        tasks=tuple(record_from_json(t) for t in d.get("tasks", ())),
        timings=Timings.of(d.get("timings") or {}),
        usage=usage_from_json(d.get("usage")),
        request_id=str(d.get("request_id") or ""),
        status=_reply_status(d),
    )


def _reply_status(d: dict[str, Any]) -> ReplyStatus:
    """The reply's status (checkpoints written before it existed had two flags)."""
    if "status" in d:
        return ReplyStatus(d["status"])
    if d.get("error"):
        return ReplyStatus.FAILED
    return ReplyStatus.FALLBACK if d.get("fallback") else ReplyStatus.ANSWERED


# --- the whole checkpoint ----------------------------------------------------


@dataclass(slots=True)
class Checkpoint:
    """What a job has done so far, in core types (JSON in the store).

    ``uploads`` is None until the request's files are checked and stored;
    ``plan`` None until planned (``[]``: answered without tasks); ``reply``
    set only together with the saved turn.
    """

    uploads: list[Resource] | None = None
    plan: list[PlannedTask] | None = None
    selections: dict[int, tuple[str, str, bool]] = field(default_factory=dict)
    outcomes: dict[int, dict[str, Any]] = field(default_factory=dict)  # finished tasks, as JSON
    generated: list[Resource] = field(default_factory=list)
    usage: Usage = field(default_factory=Usage)
    timings: dict[str, float] = field(default_factory=dict)
    reply: Reply | None = None

    @property
    def started(self) -> bool:
        """True once the request passed its checks and its files are stored."""
        return self.uploads is not None

    def to_json(self, media: MediaStore) -> dict[str, Any]:
        files = [*(self.uploads or ()), *self.generated]
        if self.reply is not None:
            files += list(self.reply.files)
        return {
            "v": VERSION,
            "uploads": None
            if self.uploads is None
            else [resource_to_json(r, media) for r in self.uploads],
            "plan": None
            if self.plan is None
            else [
                {"id": t.id, "task": t.task, "dep": list(t.dep), "args": t.args} for t in self.plan
            ],
            "selections": {
                str(k): {"model": m, "reason": why, "by_llm": by_llm}
                for k, (m, why, by_llm) in self.selections.items()
            },
            "outcomes": {str(k): v for k, v in self.outcomes.items()},
            "generated": [resource_to_json(r, media) for r in self.generated],
            "usage": usage_to_json(self.usage),
            "timings": dict(self.timings),
            "reply": None if self.reply is None else reply_to_json(self.reply, media),
            # every stored file this job refers to, so pruning keeps them
            "paths": sorted({media.relative(r.path) for r in files}),
        }

    @classmethod
    def from_json(cls, d: dict[str, Any] | None, media: MediaStore) -> Checkpoint:
        if not d or d.get("v") != VERSION:
            return cls()
        uploads = d.get("uploads")
        plan = d.get("plan")
        return cls(
            uploads=None if uploads is None else [resource_from_json(r, media) for r in uploads],
            plan=None
            if plan is None
            else [
                PlannedTask(
                    int(t["id"]), str(t["task"]), [int(x) for x in t["dep"]], dict(t["args"])
                )
                for t in plan
            ],
            selections={
                int(k): (str(v["model"]), str(v.get("reason") or ""), bool(v.get("by_llm")))
                for k, v in (d.get("selections") or {}).items()
            },
            outcomes={int(k): dict(v) for k, v in (d.get("outcomes") or {}).items()},
            generated=[resource_from_json(r, media) for r in d.get("generated") or ()],
            usage=usage_from_json(d.get("usage")),
            timings=dict(d.get("timings") or {}),
            reply=None if d.get("reply") is None else reply_from_json(d["reply"], media),
        )

    def select(self, selections: dict[int, Selection]) -> None:
        self.selections = {k: (s.model.id, s.reason, s.by_llm) for k, s in selections.items()}
