"""Typed inputs and outputs of an expert call.

Every backend (hosted inference, local pipelines) normalises what it gets
into one :class:`TaskResult`, so the executor, the responder and the store
never look at a backend's raw payload.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from core.tasks import AUDIO, IMAGE, TEXT, VIDEO


@dataclass(frozen=True, slots=True)
class Blob:
    """Media bytes with their kind and type (image/png, audio/ogg, video/mp4…)."""

    kind: str  # image | audio | video
    mime: str
    data: bytes
    handle: str | None = None  # set when the blob came from the store


@dataclass(frozen=True, slots=True)
class TaskInputs:
    """What one task is given once ``<resource>-N`` references are resolved."""

    text: str | None = None
    image: Blob | None = None
    audio: Blob | None = None
    video: Blob | None = None

    def get(self, modality: str) -> str | Blob | None:
        return {TEXT: self.text, IMAGE: self.image, AUDIO: self.audio, VIDEO: self.video}[modality]


@dataclass(frozen=True, slots=True)
class Label:
    label: str
    score: float


@dataclass(frozen=True, slots=True)
class Entity:
    word: str
    group: str
    score: float
    start: int | None = None
    end: int | None = None


@dataclass(frozen=True, slots=True)
class Box:
    label: str
    score: float
    xmin: float
    ymin: float
    xmax: float
    ymax: float


@dataclass(frozen=True, slots=True)
class Answer:
    answer: str
    score: float | None = None


@dataclass(frozen=True, slots=True)
class Segment:
    label: str
    score: float | None
    mask: bytes | None = None  # PNG, white where the segment is


@dataclass(frozen=True, slots=True)
class TaskResult:
    """One expert's normalised output.  Fields that do not apply stay empty."""

    text: str | None = None
    labels: tuple[Label, ...] = ()
    entities: tuple[Entity, ...] = ()
    boxes: tuple[Box, ...] = ()
    answers: tuple[Answer, ...] = ()
    segments: tuple[Segment, ...] = ()
    media: tuple[Blob, ...] = ()
    extra: dict[str, Any] = field(default_factory=dict)

    def media_of(self, kind: str) -> Blob | None:
        return next((m for m in self.media if m.kind == kind), None)

    def as_text(self) -> str | None:
        """The text a later task gets for ``<resource>-N`` in a text argument."""
        if self.text:
            return self.text
        if self.answers:
            return self.answers[0].answer
        if self.labels:
            return self.labels[0].label
        if self.boxes:
            return ", ".join(sorted({b.label for b in self.boxes}))
        if self.entities:
            return ", ".join(f"{e.word} ({e.group})" for e in self.entities)
        if self.segments:
            return ", ".join(s.label for s in self.segments)
        return None

    def summary(self, max_items: int = 10) -> dict[str, Any]:
        """A compact, JSON-able view for the response prompt and the store."""
        out: dict[str, Any] = {}
        if self.text is not None:
            out["text"] = self.text
        if self.labels:
            out["labels"] = [
                {"label": x.label, "score": round(x.score, 4)} for x in self.labels[:max_items]
            ]
        if self.entities:
            out["entities"] = [
                {"word": e.word, "group": e.group, "score": round(e.score, 4)}
                for e in self.entities[:max_items]
            ]
        if self.boxes:
            out["boxes"] = [
                {
                    "label": b.label,
                    "score": round(b.score, 4),
                    "box": [round(b.xmin), round(b.ymin), round(b.xmax), round(b.ymax)],
                }
                for b in self.boxes[:max_items]
            ]
        if self.answers:
            out["answers"] = [
                {"answer": a.answer, "score": None if a.score is None else round(a.score, 4)}
                for a in self.answers[:max_items]
            ]
        if self.segments:
            out["segments"] = [
                {"label": s.label, "score": None if s.score is None else round(s.score, 4)}
                for s in self.segments[:max_items]
            ]
        if self.media:
            out["files"] = [
                {"handle": m.handle, "kind": m.kind, "mime": m.mime, "size": len(m.data)}
                for m in self.media
            ]
        if self.extra:
            out.update(self.extra)
        return out
