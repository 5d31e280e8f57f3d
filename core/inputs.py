"""A task's inputs: ``<resource>-N`` and file handles resolved to what the
model gets.

A text argument gets each ``<resource>-N`` replaced by task N's text (or the
handle of the file it made); a text argument that is just the handle of an
attached text file gets its content.  An image, audio or video argument is
task N's output of that kind, or a file the conversation holds, read through
the store by its handle (never a path).
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING

from core.errors import TaskCode, TaskFailed
from core.planning import PlannedTask
from core.results import Blob, TaskInputs
from core.tasks import AUDIO, IMAGE, TEXT, VIDEO

if TYPE_CHECKING:
    from core.execution import TaskOutcome

REF = re.compile(r"<resource>-(\d+)")
# A text argument that is just the handle of a text file the user attached.
TEXT_FILE = re.compile(r"[\w.\-]+\.(?:txt|md|csv|tsv|json)", re.IGNORECASE)
MAX_TEXT_FILE_CHARS = 50_000

# Resolves a user file handle to its bytes (through the store, never a path).
HandleLoader = Callable[[str], Awaitable[Blob]]


async def resolve_inputs(
    t: PlannedTask,
    outcomes: Mapping[int, TaskOutcome],
    load_handle: HandleLoader,
) -> tuple[TaskInputs, dict[str, str]]:
    """What ``t`` is given (TaskFailed when an input is missing or of the
    wrong kind), and its arguments as text for the records."""
    resolved: dict[str, str | Blob | None] = {}
    shown: dict[str, str] = {}
    for key, value in t.args.items():
        if key == TEXT:
            text = REF.sub(lambda m: _text_of(outcomes, int(m.group(1))), value)
            if TEXT_FILE.fullmatch(value.strip()):
                text = await _text_file(value.strip(), load_handle) or text
            resolved[TEXT] = text
            shown[TEXT] = text
            continue
        if key not in (IMAGE, AUDIO, VIDEO):
            continue
        m = REF.fullmatch(value.strip())
        if m:
            dep = outcomes[int(m.group(1))]
            blob = _media_of(dep, key)
            if blob is None:
                raise TaskFailed(
                    TaskCode.INPUT_NOT_MADE,
                    retryable=False,
                    dependency=dep.id,
                    task=dep.task,
                    kind=key,
                )
        else:
            blob = await load_handle(value.strip())
            if blob.kind != key:
                raise TaskFailed(TaskCode.INPUT_WRONG_KIND, file=value, kind=key)
        resolved[key] = blob
        shown[key] = blob.handle or value
    inputs = TaskInputs(
        text=resolved.get(TEXT),  # type: ignore[arg-type]
        image=resolved.get(IMAGE),  # type: ignore[arg-type]
        audio=resolved.get(AUDIO),  # type: ignore[arg-type]
        video=resolved.get(VIDEO),  # type: ignore[arg-type]
    )
    return inputs, shown


async def _text_file(handle: str, load_handle: HandleLoader) -> str | None:
    """The content of a user's text file named by handle (None: not such a file)."""
    try:
        blob = await load_handle(handle)
    except TaskFailed:
        return None
    if blob.kind != TEXT:
        return None
    return blob.data.decode("utf-8", errors="replace")[:MAX_TEXT_FILE_CHARS]


def _text_of(outcomes: Mapping[int, TaskOutcome], n: int) -> str:
    dep = outcomes.get(n)
    if dep is None or dep.result is None:
        return f"<resource>-{n}"
    text = dep.result.as_text()
    if text:
        return text
    blob = dep.result.media[0] if dep.result.media else None
    return blob.handle if blob and blob.handle else f"(the {dep.task} output)"


def _media_of(dep: TaskOutcome, kind: str) -> Blob | None:
    if dep.result is None:
        return None
    return dep.result.media_of(kind)
