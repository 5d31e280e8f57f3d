"""Model results reused within a conversation: the same model on the same
inputs is not run twice.

A result is keyed by the conversation (the scope), the task, the model id
and the inputs exactly as the model gets them once ``<resource>-N`` is
resolved: the text, and each image, audio or video by the SHA-256 of its
bytes and its type.  So a photo asked about again, by its handle or
uploaded again under another name, gets the earlier answer without a model
call; a different conversation never sees it.

The cache lives in this process's memory, least recently used out first,
bounded by entries and by bytes (media, masks and text counted).  Nothing is
persisted: a restart or another replica starts empty, which only costs the
model call.  Tasks that sample (drawing, video, free text generation) are
never cached: asking for one again means wanting another take.
"""

from __future__ import annotations

import hashlib
import json
from collections import OrderedDict
from dataclasses import dataclass

from core.results import Blob, TaskInputs, TaskResult
from core.threads import work

# Each run of these gives a new picture, clip or text: asking again means "another one".
FRESH_EACH_TIME = frozenset(
    {
        "text-to-image",
        "image-to-image",
        "controlnet-sd",
        "text-to-video",
        "text-generation",
        "conversational",
    }
)
ENTRY_OVERHEAD = 512  # bytes counted per entry besides its payload
_HASH_OFF_LOOP = 1 << 20  # hash inputs larger than this in a worker thread


@dataclass(frozen=True, slots=True)
class Cached:
    """A finished model call: its result (media not yet stored) and where it ran."""

    result: TaskResult
    model: str
    backend: str


@dataclass(frozen=True, slots=True)
class CacheStats:
    hits: int
    misses: int
    entries: int
    bytes: int

    @property
    def hit_rate(self) -> float:
        asked = self.hits + self.misses
        return self.hits / asked if asked else 0.0


class ResultCache:
    """A bounded, content-addressed LRU of task results (see the module doc).
    ``max_entries`` or ``max_bytes`` of 0 turns it off."""

    def __init__(self, *, max_entries: int = 256, max_bytes: int = 64 * 1024 * 1024) -> None:
        self.max_entries = max(0, max_entries)
        self.max_bytes = max(0, max_bytes)
        self._items: OrderedDict[str, tuple[Cached, int]] = OrderedDict()
        self._bytes = 0
        self.hits = 0
        self.misses = 0

    @property
    def enabled(self) -> bool:
        return self.max_entries > 0 and self.max_bytes > 0

    def stats(self) -> CacheStats:
        return CacheStats(self.hits, self.misses, len(self._items), self._bytes)

    async def key(self, scope: str, task: str, model: str, inputs: TaskInputs) -> str | None:
        """The key of ``model`` running ``task`` on ``inputs`` in ``scope``
        (None: not cached, because the cache is off or the task samples)."""
        if not self.enabled or task in FRESH_EACH_TIME:
            return None
        media: dict[str, list[str]] = {}
        for name, blob in (
            ("image", inputs.image),
            ("audio", inputs.audio),
            ("video", inputs.video),
        ):
            if blob is not None:
                media[name] = [blob.mime, await _digest(blob)]
        canonical = json.dumps(
            {"scope": scope, "task": task, "model": model, "text": inputs.text, "media": media},
            sort_keys=True,
            ensure_ascii=False,
            separators=(",", ":"),
        )
        return hashlib.sha256(canonical.encode("utf-8")).hexdigest()

    def get(self, key: str | None) -> Cached | None:
        if key is None:
            return None
        item = self._items.get(key)
        if item is None:
            self.misses += 1
            return None
        self._items.move_to_end(key)
        self.hits += 1
        return item[0]

    def put(self, key: str | None, cached: Cached) -> None:
        if key is None:
            return
        size = result_size(cached.result) + ENTRY_OVERHEAD
        if size > self.max_bytes:
            return  # larger than the whole cache: keep the others instead
        old = self._items.pop(key, None)
        if old is not None:
            self._bytes -= old[1]
        self._items[key] = (cached, size)
        self._bytes += size
        while len(self._items) > self.max_entries or self._bytes > self.max_bytes:
            _, (_, freed) = self._items.popitem(last=False)
            self._bytes -= freed


async def _digest(blob: Blob) -> str:
    if len(blob.data) > _HASH_OFF_LOOP:
        return await work(lambda: hashlib.sha256(blob.data).hexdigest())
    return hashlib.sha256(blob.data).hexdigest()


def result_size(r: TaskResult) -> int:
    """Roughly the memory a result holds: its bytes and its text."""
    size = sum(len(b.data) for b in r.media)
    size += sum(len(s.mask or b"") + len(s.label) for s in r.segments)
    size += len(r.text or "")
    size += sum(len(x.label) + 16 for x in r.labels) + sum(len(e.word) + 32 for e in r.entities)
    size += sum(len(b.label) + 48 for b in r.boxes) + sum(len(a.answer) + 16 for a in r.answers)
    if r.extra:
        size += len(json.dumps(r.extra, default=str))
    return size
