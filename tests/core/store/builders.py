"""Small builders for store tests: a stored upload, a generated file, a turn."""

from __future__ import annotations

from datetime import UTC, datetime

from core.store import MediaStore, TurnRecord
from core.types import ConversationKey, Reply, Request, Resource, TaskRecord, TaskStatus

CHANNEL = ConversationKey("discord", "guild1", "chan1")
THREAD = ConversationKey("discord", "guild1", "chan1", "thread9")


async def stored(
    media: MediaStore,
    handle: str,
    data: bytes,
    *,
    kind: str = "image",
    mime: str = "image/png",
    source: str = "upload",
    task_id: int | None = None,
) -> Resource:
    ext = handle.rsplit(".", 1)[-1] if "." in handle else "bin"
    rel, sha = await media.put(data, ext)
    return Resource(
        handle=handle,
        kind=kind,
        mime=mime,
        path=media.path(rel),
        sha256=sha,
        size=len(data),
        source=source,
        task_id=task_id,
    )


def turn(
    key: ConversationKey,
    text: str,
    answer: str,
    *,
    user: str = "u1",
    uploads: tuple[Resource, ...] = (),
    files: tuple[Resource, ...] = (),
    tasks: tuple[TaskRecord, ...] = (),
) -> TurnRecord:
    request = Request(conversation=key, user_id=user, text=text)
    reply = Reply(text=answer, files=files, tasks=tasks, request_id=request.request_id)
    return TurnRecord(request=request, uploads=uploads, reply=reply)


def task(index: int, name: str = "text-to-image", files: tuple[str, ...] = ()) -> TaskRecord:
    now = datetime.now(UTC)
    return TaskRecord(
        id=index,
        task=name,
        model="org/model",
        status=TaskStatus.DONE,
        started=now,
        ended=now,
        args={"text": "a cat"},
        result={"label": "cat", "score": 0.9},
        files=files,
    )
