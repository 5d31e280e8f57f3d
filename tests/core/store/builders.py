"""Small builders for store tests: a stored upload, a generated file, a turn,
running jobs."""

from __future__ import annotations

from datetime import UTC, datetime

from core.store import MediaStore, TurnRecord
from core.store.jobs import JobStore
from core.store.models import utcnow
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


LEASE = 60.0


async def running(jobs: JobStore, n: int, owner: str = "p1") -> list[int]:
    """``n`` jobs (conversations c0, c1…) accepted and claimed by ``owner``."""
    ids = []
    for i in range(n):
        accepted = await jobs.accept(
            kind="test",
            conversation=f"c{i}",
            payload={},
            request_id=f"r{i}",
            dedup_key=None,
            owner=owner,
            now=utcnow(),
            lease=LEASE,
        )
        ids.append(accepted.job.id)
    started = await jobs.claim(owner=owner, kinds=["test"], now=utcnow(), lease=LEASE, limit=n)
    assert sorted(r.id for r in started) == ids
    return ids
