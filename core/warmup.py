"""Warm-ups: what a request's tasks will need, loaded before they need it.

A fresh process meets each kind of output for the first time on some
request's critical path.  The first audio a model returns loads PyAV,
libsndfile and NumPy to check it and starts the Opus encoder to re-encode
it; the first boxes to draw load NumPy and Pillow's drawing and fonts; the
first picture decoded loads Pillow's codecs; every request's first ORM
query configures SQLAlchemy's mappers and its first LLM answer builds the
SDK's response models (``clients``).  Each costs from tens to hundreds of
milliseconds, and a warm process never pays it again: a ``run`` process's
first requests and every ``python -m bot ask`` did.

:meth:`Warmups.start` runs the warm-ups for a plan's tasks (:func:`needs`)
in a thread of its own, the moment the plan is known (the executor asks
before its first task starts), so they overlap the first model calls
instead of following them; a long-running process asks for all of them at
start (``run`` and ``serve`` as the process starts, beside its imports, so
they are done before the platform connects: bot.__main__).  Each runs once per process, one after the other, never on the event
loop.  A task that needs one still running waits for it through Python's
import lock, never does the work twice.  A warm-up that fails is logged and
forgotten: the task loads what it needs itself, as it would have.
"""

from __future__ import annotations

import importlib
import logging
import queue
import threading
import time
from collections.abc import Callable, Iterable, Mapping

from core.tasks import AUDIO, IMAGE, TASKS, VIDEO

log = logging.getLogger(__name__)

CLIENTS = "clients"
HUB = "hub"
PICTURES = "pictures"
DRAWING = "drawing"
SOUND = "audio"
MOVING = "video"
# Tasks whose result is drawn on (boxes, masks) or made into a picture (depth).
DRAWN = frozenset({"object-detection", "image-segmentation", "depth-estimation"})


def _pictures() -> None:
    """Pillow's codecs, as decoding and re-encoding a model's picture use them,
    and the Hub client's check that Pillow is installed (a package look-up)."""
    import io

    from huggingface_hub.utils import _runtime  # the client's own check, cached once run
    from PIL import Image

    buf = io.BytesIO()
    Image.new("RGB", (8, 8)).save(buf, format="PNG")
    with Image.open(io.BytesIO(buf.getvalue())) as im:
        im.load()
    _runtime.is_pillow_available()


def _drawing() -> None:
    """NumPy, Pillow's drawing and its default font: boxes on a picture."""
    import io

    from PIL import Image

    from core.experts.images import draw_boxes
    from core.results import Box

    buf = io.BytesIO()
    Image.new("RGB", (16, 16)).save(buf, format="PNG")
    draw_boxes(buf.getvalue(), (Box("warm-up", 1.0, 1, 1, 8, 8),))


def _audio() -> None:
    """PyAV, libsndfile and NumPy, and the encoders a model's audio goes
    through: checked (decoded), then re-encoded to Opus for people."""
    import io

    import numpy as np
    import soundfile as sf

    from core.experts.audio import decode_audio, encode_speech, measure_audio

    buf = io.BytesIO()
    sf.write(buf, np.zeros(800, dtype=np.float32), 16000, format="FLAC")
    flac = buf.getvalue()
    measure_audio(flac)
    samples, rate = decode_audio(flac, target_sr=None, mono=False)
    encode_speech(samples, rate)


def _video() -> None:
    """PyAV's containers and NumPy: checking and re-encoding a model's video."""
    import core.experts.video  # noqa: F401


def _clients() -> None:
    """What every request's first use builds: SQLAlchemy's mapper configuration
    (the first ORM query configures every mapper: 10–15 ms), the OpenAI SDK's
    response models and a Slack or Discord job's record (``Posted``), whose
    validators are built on first use (defer_build)."""
    from openai.types.chat import ChatCompletion, ChatCompletionMessage
    from openai.types.chat.chat_completion import Choice
    from openai.types.completion_usage import CompletionUsage
    from sqlalchemy.orm import configure_mappers

    import core.store.models  # noqa: F401  (its mappers are the ones to configure)
    from core.types import Posted  # a platform job's record, read as each job starts

    configure_mappers()
    for model in (ChatCompletion, ChatCompletionMessage, Choice, CompletionUsage, Posted):
        model.model_rebuild()
    # The SDKs' httpx2 sessions close through anyio, which imports its asyncio
    # backend on first use, on the event loop (the hosted session built ahead
    # closes the SDK's own: 5-10 ms of a run process's first request); the
    # first host name is encoded with the IDNA codec, loaded on first use too.
    importlib.import_module("anyio._backends._asyncio")
    "localhost".encode("idna")


def _hub() -> None:
    """The Hub client's request headers, built once a process: it looks up
    torch's version among the installed packages and fetches the Hub's list
    of agent harnesses with a blocking GET (up to 3 s; cached on disk for a
    day).  The hosted session built ahead (core.experts.remote) does it too,
    but only once the agent is open, while a ``run`` process's first request
    already runs.  Last: a slow Hub holds back no other warm-up."""
    from huggingface_hub.utils import build_hf_headers  # type: ignore[attr-defined]  # documented

    build_hf_headers()


WARMERS: dict[str, Callable[[], None]] = {
    CLIENTS: _clients,
    PICTURES: _pictures,
    DRAWING: _drawing,
    SOUND: _audio,
    MOVING: _video,
    HUB: _hub,
}


def needs(tasks: Iterable[str]) -> list[str]:
    """The warm-ups these tasks will need, in the order they are met: what
    they read and make (a picture, boxes to draw, audio, video)."""
    wanted: set[str] = set()
    for task in tasks:
        spec = TASKS.get(task)
        if spec is None:
            continue
        kinds = {*spec.args, *spec.optional, spec.output}
        if IMAGE in kinds:
            wanted.add(PICTURES)
        if task in DRAWN:
            wanted.add(DRAWING)
        if spec.output == AUDIO:
            wanted.add(SOUND)
        if spec.output == VIDEO:
            wanted.add(MOVING)
    return [name for name in WARMERS if name in wanted]


class Warmups:
    """Runs warm-ups in one daemon thread, each at most once (a process has one:
    :data:`PROCESS`).  ``warmers``: name → what it does."""

    def __init__(self, warmers: Mapping[str, Callable[[], None]] | None = None) -> None:
        self.warmers = dict(WARMERS if warmers is None else warmers)
        self._lock = threading.Lock()
        self._asked: dict[str, threading.Event] = {}
        self._queue: queue.SimpleQueue[str] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None

    def start(self, names: Iterable[str]) -> list[str]:
        """Queue the warm-ups not asked for before; returns those it queued."""
        fresh: list[str] = []
        with self._lock:
            for name in names:
                if name in self.warmers and name not in self._asked:
                    self._asked[name] = threading.Event()
                    fresh.append(name)
                    self._queue.put(name)
            if fresh and self._thread is None:
                # A daemon: a process that is done never waits for a warm-up.
                self._thread = threading.Thread(target=self._run, name="warm-up", daemon=True)
                self._thread.start()
        return fresh

    def for_tasks(self, tasks: Iterable[str]) -> list[str]:
        """:meth:`start` what ``tasks`` will need (:func:`needs`)."""
        return self.start(needs(tasks))

    def all(self) -> list[str]:
        """:meth:`start` every warm-up (a process that will run many requests)."""
        return self.start(self.warmers)

    def done(self, name: str) -> bool:
        event = self._asked.get(name)
        return event is not None and event.is_set()

    def wait(self, names: Iterable[str], timeout: float | None = None) -> bool:
        """Block until these (asked-for) warm-ups have run; False on timeout.
        For tests and tools: requests never wait for a warm-up."""
        deadline = None if timeout is None else time.monotonic() + timeout
        for name in names:
            event = self._asked.get(name)
            if event is None:
                continue
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            if not event.wait(left):
                return False
        return True

    def _run(self) -> None:
        while True:
            name = self._queue.get()
            t0 = time.perf_counter()
            try:
                self.warmers[name]()
            except Exception:  # the task will load it itself (and say what is wrong)
                log.warning(
                    "warm-up %s failed; its tasks load it when they run", name, exc_info=True
                )
            else:
                log.debug("warm-up %s took %.0f ms", name, (time.perf_counter() - t0) * 1000)
            finally:
                self._asked[name].set()


PROCESS = Warmups()  # the process's warm-ups: each runs once whoever asks
