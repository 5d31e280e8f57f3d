"""One request while the agent works on it, and the files it brings and makes.

:class:`Turn` is what a turn's steps share: the request, its conversation's
history, its server's settings, and its :class:`~core.turn_state.TurnState`
(what a stopped process would resume from: uploads, generated files, usage,
timings, plan, outcomes).  Uploads are checked by their bytes and written to
the media store before planning (the planner sees their handles); every
generated file is stored the moment its task finishes, so later tasks and the
answer name it by handle.  The database rows are written once, at the end.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from core.execution import TaskOutcome
from core.mediatypes import inspect_attachment, sniff
from core.planning import PlannedTask
from core.results import Blob
from core.server_settings import AppliedSettings
from core.store.handles import allocate_handle
from core.store.media import MediaStore
from core.store.repo import History
from core.threads import work
from core.turn_state import TurnState
from core.types import PlanNote, Request, Resource, TaskRecord, TaskState, Usage

# Short handles for generated files, named for the task that made them.
OUTPUT_NAMES = {
    "text-to-image": "image",
    "image-to-image": "edited",
    "controlnet-sd": "controlnet",
    "object-detection": "detected",
    "image-segmentation": "segments",
    "depth-estimation": "depth",
    "text-to-video": "video",
    "text-to-speech": "speech",
    "audio-to-audio": "audio",
}


@dataclass(frozen=True, slots=True)
class StoredUpload:
    """An attachment checked and in the media store, before it has a handle."""

    name: str  # as the person sent it: the handle is made from it
    kind: str
    mime: str
    path: Path
    sha256: str
    size: int


@dataclass(slots=True)
class Turn:
    """One request while it runs: what its steps share."""

    request: Request
    state: TurnState = field(default_factory=TurnState)  # what a checkpoint keeps
    history: History = field(default_factory=lambda: History([], {}))
    settings: AppliedSettings | None = None  # its server's settings applied (set as it starts)
    plan_notes: list[PlanNote] = field(default_factory=list)  # repairs that changed the plan

    @property
    def uploads(self) -> list[Resource]:
        return self.state.uploads or []

    @property
    def generated(self) -> list[Resource]:
        return self.state.generated

    @property
    def usage(self) -> Usage:
        return self.state.usage

    @property
    def timings(self) -> dict[str, float]:
        return self.state.timings

    def handles(self) -> dict[str, str]:
        """Every file this turn may name: handle → kind."""
        out = {h: r.kind for h, r in self.history.resources.items()}
        out.update({r.handle: r.kind for r in (*self.uploads, *self.generated)})
        return out

    def resource(self, handle: str) -> Resource | None:
        mine = {r.handle: r for r in (*self.uploads, *self.generated)}
        return mine.get(handle) or self.history.resources.get(handle)

    async def put_uploads(
        self, media: MediaStore, *, max_bytes: int, max_pixels: int
    ) -> list[StoredUpload]:
        """Check every attachment by its bytes (InputRejected: size, type,
        decodable image/audio/video, duration), then store them: one bad file
        and nothing is stored.  Decoding runs in a worker thread.  Needs no
        history: a turn runs it while its history loads."""
        checked = []
        for a in self.request.attachments:
            mt = await work(
                inspect_attachment,
                a.name,
                a.mime,
                a.data,
                max_bytes=max_bytes,
                max_pixels=max_pixels,
            )
            checked.append((a, mt))
        stored: list[StoredUpload] = []
        for a, mt in checked:
            rel, sha = await media.put(a.data, mt.ext)
            stored.append(StoredUpload(a.name, mt.kind, mt.mime, media.path(rel), sha, len(a.data)))
        return stored

    def name_uploads(self, stored: list[StoredUpload]) -> None:
        """The stored uploads, each named by a handle no file of the
        conversation (its history, loaded by now) has."""
        taken = set(self.handles())
        named: list[Resource] = []
        for u in stored:
            handle = allocate_handle(taken, u.name)
            taken.add(handle)
            named.append(Resource(handle, u.kind, u.mime, u.path, u.sha256, u.size, "upload"))
        self.state.uploads = named

    async def store_output(
        self, media: MediaStore, blob: Blob, task: str, task_id: int
    ) -> Resource:
        mt = sniff(blob.data)
        ext = mt.ext if mt else blob.mime.rsplit("/", 1)[-1]
        if ext == "opus":
            ext = "ogg"  # the name every phone and chat app plays Ogg/Opus under
        rel, sha = await media.put(blob.data, ext)
        name = f"{OUTPUT_NAMES.get(task, blob.kind)}.{ext}"
        res = Resource(
            allocate_handle(set(self.handles()), name),
            blob.kind,
            mt.mime if mt else blob.mime,
            media.path(rel),
            sha,
            len(blob.data),
            "generated",
            task_id,
        )
        self.generated.append(res)
        return res


def chat_log(history: History) -> list[tuple[str, str]]:
    out = []
    for t in history.turns:
        text = t.text
        if t.handles:
            text += f"\n[files: {', '.join(t.handles)}]"
        out.append((t.role, text))
    return out


def states(outcomes: dict[int, TaskOutcome]) -> tuple[TaskState, ...]:
    return tuple(o.state() for o in outcomes.values())


def record(o: TaskOutcome, t: PlannedTask) -> TaskRecord:
    files = tuple(b.handle for b in (o.result.media if o.result else ()) if b.handle)
    return TaskRecord(
        id=o.id,
        task=o.task,
        model=o.model.id if o.model else None,
        status=o.status,
        started=o.started,
        ended=o.ended,
        error=o.error,
        args=o.args or dict(t.args),
        dep=tuple(t.dep),
        reason=o.reason,
        result=o.result.summary() if o.result else None,
        files=files,
        backend=o.backend if o.result is not None else None,
        errors=o.errors,
    )
