"""What one request has done so far, as one typed value: :class:`TurnState`.

The steps of a turn (:mod:`core.turn_steps`) read and fill it: the uploads
once they are checked and stored, the plan, the models chosen, each task as it
finishes, the LLM usage, the timings, and last the reply.  A checkpoint is this
state serialised by pydantic (:func:`dump_state`) and stored on the job's row;
resuming is :func:`load_state`, then the next step (:func:`core.turn_steps.resume_at`).

Two things the JSON holds differently from memory, both in :meth:`TurnState._stored`
and :meth:`TurnState._read`: stored files are named by their path relative
to the media root (read back through :meth:`core.store.media.MediaStore.path`,
so a checkpoint can never point a reader outside it), and a finished task's
media is kept by handle, never as bytes (:func:`without_bytes`; read back from
the media store when the turn resumes).  Checkpoints of the first version
(hand-written converters, ``"v": 1``) are read by :func:`_from_v1`.
"""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    SerializationInfo,
    ValidationInfo,
    WrapSerializer,
    model_serializer,
    model_validator,
)

from core.execution import TaskOutcome
from core.planning import PlannedTask
from core.results import Blob
from core.selection import Selection
from core.store.media import MediaStore
from core.types import Reply, Resource, Usage

VERSION: Literal[2] = 2


class Chosen(BaseModel):
    """The model a task runs on (by id: the catalog describes it when resumed)."""

    model: str
    reason: str = ""
    by_llm: bool = False


def _model_by_id(o: TaskOutcome, handler: Any) -> Any:
    data = handler(o)
    if isinstance(data, dict):
        data["model"] = o.model.id if o.model else None
    return data


def _model_of_id(data: Any) -> Any:
    if isinstance(data, dict) and isinstance(data.get("model"), str):
        return {**data, "model": {"id": data["model"], "task": data["task"]}}
    return data


# A finished task, its model by id (the catalog describes it when the turn resumes).
StoredOutcome = Annotated[TaskOutcome, WrapSerializer(_model_by_id), BeforeValidator(_model_of_id)]


class TurnState(BaseModel):
    """One request's progress.  ``uploads`` is None until the request's files
    are checked and stored; ``plan`` None until planned (``[]``: answered
    without tasks); ``reply`` set only together with the saved turn."""

    model_config = ConfigDict(
        ser_json_bytes="base64", val_json_bytes="base64", validate_assignment=False
    )

    v: Literal[2] = VERSION
    uploads: list[Resource] | None = None
    plan: list[PlannedTask] | None = None
    selections: dict[int, Chosen] = Field(default_factory=dict)
    # Finished tasks (done or failed), their media by handle (see without_bytes).
    outcomes: dict[int, StoredOutcome] = Field(default_factory=dict)
    generated: list[Resource] = Field(default_factory=list)
    usage: Usage = Field(default_factory=Usage)
    timings: dict[str, float] = Field(default_factory=dict)
    reply: Reply | None = None

    @property
    def started(self) -> bool:
        """True once the request passed its checks and its files are stored."""
        return self.uploads is not None

    def files(self) -> list[Resource]:
        """Every stored file this state names."""
        reply = list(self.reply.files) if self.reply is not None else []
        return [*(self.uploads or ()), *self.generated, *reply]

    def select(self, selections: dict[int, Selection]) -> None:
        self.selections = {
            k: Chosen(model=s.model.id, reason=s.reason, by_llm=s.by_llm)
            for k, s in selections.items()
        }

    def finished(self, outcome: TaskOutcome) -> None:
        self.outcomes[outcome.id] = without_bytes(outcome)

    # --- the JSON form (files by relative path; pruning's list of them) ----------

    @model_serializer(mode="wrap")
    def _stored(self, handler: Any, info: SerializationInfo) -> dict[str, Any]:
        data: dict[str, Any] = handler(self)
        media = _media(info.context)
        if media is None:
            return data
        for f in _file_dicts(data):
            f["path"] = media.relative(f["path"])
        # every stored file this job refers to, so pruning keeps them
        data["paths"] = sorted({media.relative(r.path) for r in self.files()})
        return data

    @model_validator(mode="before")
    @classmethod
    def _read(cls, data: Any, info: ValidationInfo) -> Any:
        media = _media(info.context)
        if not isinstance(data, dict) or media is None:
            return data
        data = {k: v for k, v in data.items() if k != "paths"}
        for f in _file_dicts(data):
            f["path"] = str(media.path(str(f["path"])))  # ValueError outside the media root
        return data


def _media(context: Any) -> MediaStore | None:
    return context.get("media") if isinstance(context, dict) else None


def _file_dicts(data: dict[str, Any]) -> list[dict[str, Any]]:
    reply = data.get("reply") or {}
    return [*(data.get("uploads") or ()), *(data.get("generated") or ()), *reply.get("files", ())]


def without_bytes(o: TaskOutcome) -> TaskOutcome:
    """A finished task as its checkpoint keeps it: its media by stored handle."""
    if o.result is None or not any(b.data for b in o.result.media):
        return o
    media = tuple(Blob(b.kind, b.mime, b"", b.handle) for b in o.result.media)
    return replace(o, result=replace(o.result, media=media))


def dump_state(state: TurnState, media: MediaStore) -> dict[str, Any]:
    """The checkpoint: ``state`` as JSON (what the job's row stores)."""
    out: dict[str, Any] = state.model_dump(mode="json", context={"media": media}, fallback=str)
    return out


def load_state(data: dict[str, Any] | None, media: MediaStore) -> TurnState:
    """A checkpoint read back; a fresh state for none, or one of an unknown
    version (the request then starts over)."""
    if not data:
        return TurnState()
    if data.get("v") == 1:
        data = _from_v1(data)
    if data.get("v") != VERSION:
        return TurnState()
    # By way of JSON text: bytes (segment masks) are base64 there.
    return TurnState.model_validate_json(json.dumps(data), context={"media": media})


# --- version 1 -------------------------------------------------------------------


def _from_v1(d: dict[str, Any]) -> dict[str, Any]:
    """A first-version checkpoint in this version's form: its outcomes'
    results had their parts as lists; a reply had two flags before its status.  (An unfinished job written before the upgrade, or a
    finished one's summary, read by Details and Run again, for a day.)"""
    out = {**d, "v": VERSION}
    out["outcomes"] = {k: _outcome_v1(o) for k, o in (d.get("outcomes") or {}).items()}
    reply = d.get("reply")
    if reply is not None and "status" not in reply:
        status = "fallback" if reply.get("fallback") else "answered"
        out["reply"] = {**reply, "status": "failed" if reply.get("error") else status}
    return out


def _outcome_v1(o: dict[str, Any]) -> dict[str, Any]:
    out = dict(o)
    r = o.get("result")
    if r:
        fields = {
            "labels": ("label", "score"),
            "entities": ("word", "group", "score", "start", "end"),
            "boxes": ("label", "score", "xmin", "ymin", "xmax", "ymax"),
            "answers": ("answer", "score"),
            "segments": ("label", "score", "mask"),
        }
        result = {
            k: [dict(zip(names, x, strict=True)) for x in r.get(k, ())]
            for k, names in fields.items()
        }
        media = [{**m, "data": ""} for m in r.get("media", ())]
        out["result"] = {**r, **result, "media": media}
    return out
