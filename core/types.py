"""Boundary types shared by the core agent and every adapter.

Adapters build a :class:`Request`, run it with ``AgentAPI.run`` and render the
typed events (:data:`Event`) and the final :class:`Reply`.  Nothing here knows a
platform: Discord and Slack translate to and from these at their edge.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Mapping
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field, replace
from datetime import datetime
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any, ClassVar, Literal, Protocol, cast

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter

# Time, for adapters too (their status pacing): one Clock protocol, one real clock.
from core.clock import SYSTEM_CLOCK as SYSTEM_CLOCK
from core.clock import Clock as Clock
from core.errors import ErrorCode, ErrorFields, InputRejected, RunFailed, TaskFailed


@dataclass(frozen=True, slots=True)
class ConversationKey:
    """Where a conversation lives: ("discord", guild, channel, thread) or
    ("slack", team, channel, thread_ts), ("cli", "local", name, None)."""

    platform: str
    scope: str
    channel: str
    thread: str | None = None

    def parent(self) -> ConversationKey | None:
        """The channel a thread belongs to, so a thread can see its channel's files."""
        if self.thread is None:
            return None
        return ConversationKey(self.platform, self.scope, self.channel, None)

    def __str__(self) -> str:
        tail = f"/{self.thread}" if self.thread else ""
        return f"{self.platform}:{self.scope}/{self.channel}{tail}"


# The largest file accepted from a user unless MAX_ATTACHMENT_BYTES says otherwise
# (the agent's check, and each adapter's before it downloads).
MAX_ATTACHMENT_BYTES = 25 * 1024 * 1024


@dataclass(frozen=True, slots=True)
class Attachment:
    """A file an adapter received from the user (already downloaded, size-capped)."""

    name: str
    mime: str
    data: bytes


def new_request_id() -> str:
    return uuid.uuid4().hex[:12]


@dataclass(frozen=True, slots=True)
class Request:
    conversation: ConversationKey
    user_id: str
    text: str
    attachments: tuple[Attachment, ...] = ()
    request_id: str = field(default_factory=new_request_id)
    user_name: str | None = None
    # Set by the adapter for the platform's admins (Discord Manage Server or
    # Administrator, Slack's admin list) and the CLI's operator: no quotas.
    is_admin: bool = False
    # An approved plan (``/plan`` → Run, "run again on other models"): these
    # steps run as they are, without the planning call; a step's ``model``
    # runs first (no selection call), the task's other candidates after it.
    # Checked like a planned plan: one that no longer fits (a file gone, a
    # task no longer offered) is refused with the reason.
    plan: tuple[PlannedStep, ...] | None = None


class Stage(StrEnum):
    QUEUED = "queued"  # accepted, waiting for its turn (or for the bot to restart)
    PLANNING = "planning"
    SELECTING = "selecting"
    RUNNING = "running"
    ANSWERING = "answering"
    DONE = "done"


class TaskStatus(StrEnum):
    PENDING = "pending"
    RUNNING = "running"
    DONE = "done"
    FAILED = "failed"
    SKIPPED = "skipped"


@dataclass(frozen=True, slots=True)
class TaskError:
    """Why a task, or one attempt at it, failed or did not run: a
    :class:`~core.errors.TaskCode` value and its fields, which the adapters
    word (``str()``: the terse form, for logs and the language model)."""

    code: str
    fields: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def of(cls, err: TaskFailed) -> TaskError:
        return cls(str(err.code), dict(err.fields))

    def __str__(self) -> str:
        return " ".join([self.code, *(f"{k}={v!r}" for k, v in self.fields.items())])


def terse_errors(errors: tuple[TaskError, ...]) -> str | None:
    """A task's errors in their terse form, ``; ``-separated (None: none)."""
    return "; ".join(map(str, errors)) or None


@dataclass(frozen=True, slots=True)
class TaskState:
    """One task's live state, as shown in a status message.  ``errors``: why
    it failed or was skipped (each model tried), as data; ``error`` the same
    in the terse form (a checkpoint of an older version: its sentence)."""

    id: int
    task: str
    model: str | None
    status: TaskStatus
    error: str | None = None
    errors: tuple[TaskError, ...] = ()


# --------------------------------------------------------------- run events
# What ``AgentAPI.run`` yields while a request runs, in order, ending with
# :class:`Finished`.  Events carry data, never wording: each adapter's
# renderer decides what a person reads.


@dataclass(frozen=True, slots=True)
class StageStarted:
    """A stage began (``resumed``: planning picked up where a stopped
    process left the request).  ``planned``: on SELECTING, how many tasks."""

    stage: Stage
    resumed: bool = False
    planned: int | None = None
    tasks: tuple[TaskState, ...] = ()
    kind: Literal["stage_started"] = field(default="stage_started", init=False, repr=False)


@dataclass(frozen=True, slots=True)
class StillWaiting:
    """The stage's language-model call is still running (at most one such
    event per ``llm_wait_notice`` seconds): ``waited`` seconds so far, in
    ``attempt`` requests."""

    stage: Stage
    waited: float
    attempt: int = 1
    tasks: tuple[TaskState, ...] = ()
    kind: Literal["still_waiting"] = field(default="still_waiting", init=False, repr=False)


@dataclass(frozen=True, slots=True)
class QueuePosition:
    """The request waits: ``ahead`` requests start before it; ``conversation_busy``
    when the one before it is an earlier request of the same conversation."""

    ahead: int
    conversation_busy: bool = False
    kind: Literal["queue_position"] = field(default="queue_position", init=False, repr=False)


@dataclass(frozen=True, slots=True)
class TasksChanged:
    """A task started, finished, failed or was skipped: every task's state."""

    tasks: tuple[TaskState, ...]
    kind: Literal["tasks_changed"] = field(default="tasks_changed", init=False, repr=False)

    @property
    def finished(self) -> int:
        ended = (TaskStatus.DONE, TaskStatus.FAILED, TaskStatus.SKIPPED)
        return sum(t.status in ended for t in self.tasks)


@dataclass(frozen=True, slots=True)
class AnswerDelta:
    """The next words of the answer, as the language model writes them."""

    text: str
    kind: Literal["answer_delta"] = field(default="answer_delta", init=False, repr=False)


class DiscardReason(StrEnum):
    """Why the words streamed so far were void."""

    BROKE_OFF = "broke_off"  # the call failed midway
    ECHOED = "echoed"  # the model echoed its prompt's markup


@dataclass(frozen=True, slots=True)
class AnswerDiscarded:
    """What :class:`AnswerDelta` events said so far is void (``reason``): the
    reply's text (the answer built from the results) replaces it."""

    reason: DiscardReason = DiscardReason.BROKE_OFF
    kind: Literal["answer_discarded"] = field(default="answer_discarded", init=False, repr=False)


@dataclass(frozen=True, slots=True)
class Restarting:
    """The bot is restarting; the request is kept and finished after."""

    kind: Literal["restarting"] = field(default="restarting", init=False, repr=False)


@dataclass(frozen=True, slots=True)
class Finished:
    """The last event of a run."""

    reply: Reply
    kind: Literal["finished"] = field(default="finished", init=False, repr=False)


Event = (
    StageStarted
    | StillWaiting
    | QueuePosition
    | TasksChanged
    | AnswerDelta
    | AnswerDiscarded
    | Restarting
    | Finished
)
EventSink = Callable[[Event], Awaitable[None]]
# What a job runner is told while its request waits or when the bot restarts.
Notice = QueuePosition | Restarting


@dataclass(frozen=True, slots=True)
class Resource:
    """A stored file.  ``handle`` is the short name the user and the LLM see
    (``photo.png``, ``image-1.png``); bytes are read only through the store."""

    handle: str
    kind: str  # image | audio | video | text | file
    mime: str
    path: Path
    sha256: str
    size: int
    source: str  # "upload" | "generated"
    task_id: int | None = None

    @property
    def is_image(self) -> bool:
        return self.kind == "image" or self.mime.startswith("image/")


@dataclass(frozen=True, slots=True)
class TaskRecord:
    """What happened to one planned task, for the reply, the store and --json."""

    id: int
    task: str
    model: str | None
    status: TaskStatus
    started: datetime | None = None
    ended: datetime | None = None
    error: str | None = None  # the terse form of errors (older records: a sentence)
    args: dict[str, str] = field(default_factory=dict)
    dep: tuple[int, ...] = ()
    reason: str | None = None
    result: dict[str, Any] | None = None
    files: tuple[str, ...] = ()  # handles of the resources it produced
    backend: str | None = None  # "remote" | "local": which side served it
    errors: tuple[TaskError, ...] = ()  # why it failed or was skipped, as data

    def line(self, why: str, cut: Callable[[str], str]) -> str:
        """This task on one line of a fallback answer: ``- task 0,
        image-to-text on m: done. Result: a cat. Files: a.png``, or, failed or
        skipped, ``why`` in brackets.  ``cut`` shortens the result's reading
        (the core's chat log and the adapters cut text each their own way)."""
        where = f" on {self.model}" if self.model else ""
        head = f"- task {self.id}, {self.task}{where}: {self.status}"
        if self.status in (TaskStatus.FAILED, TaskStatus.SKIPPED):
            return f"{head} ({why or 'no reason given'})"
        found = _result_reading(self.result, cut) if self.result else None
        if found:
            head += f". Result: {found}"
        if self.files:
            head += f". Files: {', '.join(self.files)}"
        return head


def _result_reading(result: Mapping[str, Any], cut: Callable[[str], str]) -> str:
    """A one-line reading of a task's result (``TaskResult.summary()``): its
    text, its best answers or labels with their scores, what it found, or
    its data as JSON."""
    text = result.get("text")
    if isinstance(text, str) and text.strip():
        return cut(" ".join(text.split()))
    for key, name in (("answers", "answer"), ("labels", "label")):
        items = result.get(key)
        if isinstance(items, list) and items and isinstance(items[0], dict):
            return ", ".join(_scored(i.get(name), i.get("score")) for i in items[:3])
    for key, name in (("boxes", "label"), ("segments", "label"), ("entities", "word")):
        items = result.get(key)
        if isinstance(items, list) and items:
            found = ", ".join(str(i.get(name)) for i in items if isinstance(i, dict))
            return cut(f"{len(items)} found: {found}")
    return cut(json.dumps(result, ensure_ascii=False, default=str))


def _scored(label: Any, score: Any) -> str:
    return f"{label} ({score:.2f})" if isinstance(score, int | float) else str(label)


@dataclass(slots=True)
class Usage:
    """LLM use of one request: every request sent counts, failed ones too
    (with 0 tokens when the server reported none)."""

    llm_calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0

    def add(self, prompt_tokens: int, completion_tokens: int) -> None:
        self.llm_calls += 1
        self.prompt_tokens += prompt_tokens
        self.completion_tokens += completion_tokens


class ReplyStatus(StrEnum):
    """How a request ended."""

    ANSWERED = "answered"  # the language model's answer
    # Built from the results without the language model (the answer stage
    # failed or answered nothing usable): the results are there, the prose is not.
    FALLBACK = "fallback"
    REFUSED = "refused"  # not run: bad input, over a quota, the bot restarting
    FAILED = "failed"  # could not be completed (language model, plan, store, a bug)


class ReplyNote(StrEnum):
    """Something the person is told after a reply (the words are the adapters')."""

    HISTORY_DOWN = "history_down"  # the store was unavailable: the turn was not saved
    NOT_SAVED = "not_saved"  # the store refused the turn (the details are in the log)


_TIMED = ("planning", "selection", "execution", "response", "total")


@dataclass(frozen=True, slots=True)
class Timings(Mapping[str, float]):
    """Seconds each stage took (None: it did not run); a read-only mapping of
    the stages that ran, for JSON and logs."""

    planning: float | None = None
    selection: float | None = None
    execution: float | None = None
    response: float | None = None
    total: float | None = None

    @classmethod
    def of(cls, seconds: Mapping[str, float]) -> Timings:
        return cls(**{k: float(v) for k, v in seconds.items() if k in _TIMED})

    def __getitem__(self, key: str) -> float:
        value = getattr(self, key, None) if key in _TIMED else None
        if value is None:
            raise KeyError(key)
        return float(value)

    def __iter__(self) -> Iterator[str]:
        return (k for k in _TIMED if getattr(self, k) is not None)

    def __len__(self) -> int:
        return sum(1 for _ in self)


class PlanChange(StrEnum):
    """A repair of the language model's plan that changed what it means."""

    TASK = "task"  # a task name we do not know, read as one we offer
    FILE = "file"  # a file the conversation does not hold: its one file of that kind
    REQUEST = "request"  # a text input with nothing to name: the person's message
    BRIDGED = "bridged"  # a task put in to turn an input into the kind a task takes


@dataclass(frozen=True, slots=True)
class PlanNote:
    """What the person is told of a :class:`PlanChange` (the words are the renderer's)."""

    change: PlanChange
    task_id: int
    written: str  # what the language model wrote (BRIDGED: what the added task is fed)
    used: str  # what the plan uses instead (BRIDGED: the added task's name)
    kind: str = ""  # FILE, BRIDGED: the input's kind (image, audio, video, text)


@dataclass(frozen=True, slots=True)
class Reply:
    __pydantic_config__: ClassVar[ConfigDict] = ConfigDict(defer_build=True)  # REPLY_ADAPTER

    text: str
    files: tuple[Resource, ...] = ()
    tasks: tuple[TaskRecord, ...] = ()
    timings: Timings = field(default_factory=Timings)
    usage: Usage = field(default_factory=Usage)
    request_id: str = ""
    status: ReplyStatus = ReplyStatus.ANSWERED
    plan_notes: tuple[PlanNote, ...] = ()  # repairs of the plan that changed its meaning
    # Refused or failed: the error's code (a core.errors.ErrorCode value) and
    # fields, which the adapters word (the text is the error's terse form,
    # for logs and the chat log; empty in replies saved before: their text
    # is the English).
    error_code: str = ""
    error_fields: dict[str, Any] = field(default_factory=dict)
    notes: tuple[ReplyNote, ...] = ()  # said after the text (the turn was not saved)

    @property
    def error(self) -> bool:
        """The request was refused or failed (:attr:`failure` says why)."""
        return self.status in (ReplyStatus.REFUSED, ReplyStatus.FAILED)

    @property
    def fallback(self) -> bool:
        return self.status is ReplyStatus.FALLBACK

    def with_error(self, err: InputRejected | RunFailed) -> Reply:
        """This reply saying ``err``: its terse form as the text, its code and fields kept."""
        return replace(self, text=str(err), error_code=str(err.code), error_fields=dict(err.fields))

    @property
    def failure(self) -> InputRejected | RunFailed | None:
        """The error this refused or failed reply says (or why a fallback
        answer is one), rebuilt from its code and fields; None when it has
        none (the text is all there is)."""
        if not (self.error or self.fallback):
            return None
        return rebuilt(self.status, self.error_code, self.error_fields)


def rebuilt(
    status: ReplyStatus, code: str, fields: Mapping[str, Any]
) -> InputRejected | RunFailed | None:
    """The error a refused (:class:`InputRejected`) or failed
    (:class:`RunFailed`) result names by ``code`` and ``fields``; None for
    no code, or one this version does not know."""
    try:
        known = ErrorCode(code) if code else None
    except ValueError:
        known = None
    if known is None:
        return None
    kind = InputRejected if status is ReplyStatus.REFUSED else RunFailed
    return kind(known, **cast(ErrorFields, dict(fields)))


@dataclass(frozen=True, slots=True)
class PlannedStep:
    """One task of a plan preview (``/plan``): what would run, on which model, why."""

    id: int
    task: str
    dep: tuple[int, ...]
    args: dict[str, str]
    model: str | None
    reason: str | None
    # How long the step usually takes and at most (one model call, its
    # task's timeout), in seconds; its price where the provider publishes
    # one (None: not published).
    typical_seconds: float | None = None
    max_seconds: float | None = None
    cost_usd: float | None = None


@dataclass(frozen=True, slots=True)
class PlanPreview:
    """What ``/plan`` shows: the steps (none: the request needs no model), or
    why no plan could be made (``status`` REFUSED or FAILED, :attr:`failure`)."""

    __pydantic_config__: ClassVar[ConfigDict] = ConfigDict(defer_build=True)  # PLAN_PREVIEW_ADAPTER

    steps: tuple[PlannedStep, ...]
    usage: Usage = field(default_factory=Usage)
    status: ReplyStatus = ReplyStatus.ANSWERED
    note: str = ""  # why no plan could be made: the error's terse form, for logs
    error_code: str = ""  # and its code and fields, which the adapters word
    error_fields: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def failed(cls, err: InputRejected | RunFailed, usage: Usage) -> PlanPreview:
        status = ReplyStatus.REFUSED if isinstance(err, InputRejected) else ReplyStatus.FAILED
        return cls((), usage, status, str(err), str(err.code), dict(err.fields))

    @property
    def error(self) -> bool:
        return self.status in (ReplyStatus.REFUSED, ReplyStatus.FAILED)

    @property
    def failure(self) -> InputRejected | RunFailed | None:
        """Why no plan could be made, rebuilt from its code and fields."""
        if not self.error:
            return None
        return rebuilt(self.status, self.error_code, self.error_fields)


# --------------------------------------------------------------------- JSON
# One pydantic TypeAdapter per shape that crosses a process or is stored
# (``dump_python(x, mode="json")`` / ``validate_python(d)``, or ``*_json``):
# the types above stay plain dataclasses, built and matched as before.
# Each is built on first use (``defer_build``, on the class for a dataclass):
# importing this module builds none.
# Every run event, told apart by its ``kind``.
EVENT_ADAPTER: TypeAdapter[Event] = TypeAdapter(
    Annotated[Event, Field(discriminator="kind")], config=ConfigDict(defer_build=True)
)
# A plan's steps (``/plan`` previews, an approved plan in a job's payload).
PLANNED_STEPS: TypeAdapter[list[PlannedStep]] = TypeAdapter(
    list[PlannedStep], config=ConfigDict(defer_build=True)
)
PLAN_PREVIEW_ADAPTER: TypeAdapter[PlanPreview] = TypeAdapter(PlanPreview)
REPLY_ADAPTER: TypeAdapter[Reply] = TypeAdapter(Reply)


@dataclass(frozen=True, slots=True)
class PastRequest:
    """A request as the store remembers it (``AgentAPI.recall``): a turn that
    ran (``reply``: its status, tasks, timings and usage), or a ``/plan``
    preview (``reply`` None, ``usage`` the planning's)."""

    request_id: str
    conversation: ConversationKey
    user_id: str
    text: str
    steps: tuple[PlannedStep, ...]  # the plan, each step on the model it ran (would run) on
    reply: Reply | None = None
    usage: Usage = field(default_factory=Usage)


@dataclass(frozen=True, slots=True)
class UsageLine:
    """One row of ``/usage``: what one model (or everything, in a total) used."""

    label: str
    llm_calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    model_calls: int = 0
    model_seconds: float = 0.0
    cost_usd: float | None = None  # None: no call was priced
    unpriced_calls: int = 0  # calls no provider put a price on


@dataclass(frozen=True, slots=True)
class UsageReport:
    """What ``/usage`` shows: the caller's own usage (``scope`` "you") or,
    for admins, their server's ("server"), per model, since ``since``."""

    scope: Literal["you", "server"]
    since: datetime | None
    lines: tuple[UsageLine, ...]
    total: UsageLine
    turns: int = 0


@dataclass(frozen=True, slots=True)
class ModelChoice:
    """A candidate model as shown by ``/models``."""

    id: str
    task: str
    downloads: int
    description: str
    backend: str | None = None


class JobState(StrEnum):
    QUEUED = "queued"
    RUNNING = "running"
    DONE = "done"


# How a job ended for ``AgentAPI.process``: answered ("done"), handled by
# another process ("elsewhere"), or handed on at shutdown ("deferred").
JobOutcome = Literal["done", "elsewhere", "deferred"]


class JobRecord(Protocol):
    """A stored job as ``AgentAPI.accept`` reports it."""

    @property
    def id(self) -> int: ...

    @property
    def state(self) -> str:
        """A :class:`JobState` value."""
        ...


class Accepted(Protocol):
    """A request recorded as a job; ``fresh`` is False when its dedup key was
    known (a redelivery), and then ``job`` is the existing job as it is now."""

    @property
    def job(self) -> JobRecord: ...

    @property
    def fresh(self) -> bool: ...


class Uploading(BaseModel):
    """Slack: an upload's file ids, recorded before it is completed."""

    step: int
    files: list[str] = Field(default_factory=list)


class Posted(BaseModel):
    """Where a job's status message is and which parts of its answer were
    posted: ``Job.status_ref``, typed.  Each surface records a post the
    moment the platform confirms it (``await Posted.of(job)…save(job)``), so a
    resumed job posts only the rest.  Stored as the fields that are set."""

    model_config = ConfigDict(extra="allow", defer_build=True)

    # Discord: the status message; answering in the channel (the
    # interaction's token is spent or gone); the answer's messages so far.
    message_id: int | None = None
    channel: bool = False
    answer: list[int] = Field(default_factory=list)
    # Slack: the status message; how many answer posts were made; an upload
    # under way; the AI-app chat's streamed message, and whether its words are out.
    ts: str | None = None
    posted: int = 0
    uploading: Uploading | None = None
    stream: str | None = None
    answered: bool = False

    @classmethod
    def of(cls, job: Job | None) -> Posted:
        """What ``job`` has recorded (nothing for no job)."""
        ref = job.status_ref if job is not None else None
        return cls.model_validate(ref or {})

    def stored(self) -> dict[str, Any]:
        return self.model_dump(mode="json", exclude_defaults=True)

    async def save(self, job: Job | None) -> None:
        """Record this on ``job`` (nothing without one)."""
        if job is not None:
            await job.set_status_ref(self.stored())


class Job(Protocol):
    """A durable job as its runner (and the agent) sees it: the adapter's
    payload, where its status message is (``status_ref``, read and written
    as :class:`Posted`), and the agent's checkpoint (a
    :class:`core.turn_state.TurnState`'s JSON)."""

    status_ref: dict[str, Any] | None
    checkpoint: dict[str, Any] | None

    @property
    def id(self) -> int: ...

    @property
    def kind(self) -> str: ...

    @property
    def request_id(self) -> str: ...

    @property
    def payload(self) -> dict[str, Any]: ...

    @property
    def owner(self) -> str: ...

    @property
    def resumed(self) -> bool:
        """An earlier process started this job and did not finish it."""
        ...

    @property
    def inputs_stored(self) -> bool:
        """The request's files are in the media store already (a resumed job)."""
        ...

    def now(self) -> datetime: ...

    async def set_status_ref(self, ref: dict[str, Any]) -> None:
        """Remember where the status message is (a resumed job edits it)."""
        ...

    async def save_checkpoint(self, data: dict[str, Any]) -> None: ...


class JobRunner(Protocol):
    """What an adapter registers for its kind of job."""

    async def run(self, job: Job) -> None:
        """Rebuild the request from ``job.payload``, run it through
        ``AgentAPI.run(request, job=job)``, post the answer.  Should not
        raise (tell the person instead); the job is done after."""
        ...

    async def notify(self, job: Job, notice: Notice) -> None:
        """Show ``notice`` as the request's status (its place in the queue,
        or that the bot is restarting and will finish it)."""
        ...

    async def give_up(self, job: Job, failure: RunFailed) -> None:
        """The job will not be run (again): tell the person why (``failure``'s
        code and fields, e.g. ``ErrorCode.GAVE_UP``, worded by the adapter)."""
        ...


class Run(Protocol):
    """One request running: ``async for event in run`` until :class:`Finished`,
    then ``run.reply``."""

    @property
    def request_id(self) -> str: ...

    def __aiter__(self) -> AsyncIterator[Event]: ...

    @property
    def reply(self) -> Reply:
        """The reply (after :class:`Finished`; RuntimeError before)."""
        ...


class RunPort(Protocol):
    """Running requests: a turn, a ``/plan`` preview, a past request, the models."""

    def run(self, request: Request, *, job: Job | None = None) -> AbstractAsyncContextManager[Run]:
        """Run the four stages for one request::

            async with agent.run(request, job=job) as run:
                async for event in run:
                    ...  # render it
                post(run.reply)

        Never raises for user-caused or upstream failures (the reply's
        ``status`` says how it ended; its text says why).  The run counts as
        in flight, for a graceful shutdown, until the ``async with`` ends, so
        posting the answer inside it is waited for too; leaving early stops
        the request.  ``job``: the durable job the request runs as (a runner
        passes the one it was given): progress is checkpointed on it and a
        resumed job continues where it stopped."""
        ...

    async def handle(
        self, request: Request, events: EventSink | None = None, job: Job | None = None
    ) -> Reply:
        """``run`` to the end, handing each event to ``events``; the reply."""
        ...

    async def plan_only(self, request: Request) -> PlanPreview:
        """Plan and select models without running anything (``/plan``)."""
        ...

    async def recall(self, request_id: str) -> PastRequest | None:
        """A past request of this deployment (a turn, or a ``/plan`` preview)
        by its id; None when the store no longer has it."""
        ...

    def models(self, task: str | None = None) -> dict[str, list[ModelChoice]]:
        """Candidates per task (one task when named, by name or alias)."""
        ...


class JobsPort(Protocol):
    """Durable jobs: a platform's requests recorded before they are
    acknowledged, run (and resumed) by its registered runner."""

    def register_runner(self, kind: str, runner: JobRunner) -> None:
        """Run (and resume) jobs of ``kind`` with ``runner`` (see core.jobs)."""
        ...

    async def accept(
        self,
        kind: str,
        conversation: ConversationKey,
        payload: dict[str, Any],
        *,
        request_id: str,
        dedup: str | None = None,
        upload_bytes: int = 0,
    ) -> Accepted:
        """Record a request as a job before acknowledging it (a fast insert);
        a known ``dedup`` key (a redelivery) returns its job, ``fresh=False``.
        ``upload_bytes``: the sizes the platform declared for its files (0:
        none); admission lets only so many bytes of uploads run at once."""
        ...

    async def process(self, job_id: int) -> JobOutcome:
        """Run an accepted job here when its turn comes (queue order, the
        in-flight cap); returns when it is answered ("done"), handled by
        another process ("elsewhere") or handed on at shutdown ("deferred")."""
        ...

    async def claim_event(self, source: str, event_id: str) -> bool:
        """Record a platform event id; False when it was seen before (redelivery)."""
        ...


class AdminPort(Protocol):
    """What a server's people and admins ask besides requests: ``/usage``,
    ``/config``, ``/forget``."""

    async def forget(self, conversation: ConversationKey, user_id: str | None = None) -> int:
        """Delete a conversation's history (only ``user_id``'s turns when given);
        returns how many messages were removed."""
        ...

    async def usage(
        self,
        conversation: ConversationKey,
        user_id: str,
        *,
        server_wide: bool = False,
        is_admin: bool = False,
        since: str | None = None,
    ) -> UsageReport:
        """``/usage``: the caller's usage on this conversation's server (or,
        ``server_wide`` and an admin, the whole server's), per model, since
        ``since`` ("7d", "12h", a date; None: all).  InputRejected for a bad
        ``since`` or ``server_wide`` without being an admin."""
        ...

    async def settings(self, conversation: ConversationKey) -> dict[str, str]:
        """This conversation's server's settings, for display (set keys only)."""
        ...

    async def configure(
        self,
        conversation: ConversationKey,
        key: str,
        value: str | None,
        *,
        user_id: str,
        is_admin: bool,
    ) -> dict[str, str]:
        """Set (``value``) or unset (None) one of the server's settings; the
        settings after the change.  InputRejected with a message to show for
        a non-admin, an unknown key or a bad value."""
        ...


class MediaPort(Protocol):
    """Stored files' bytes (only the media store opens its files).  The media
    helpers that need no store (``fit_image``, ``sniff_mime``) are plain
    functions in ``core.media_files``, which adapters import."""

    async def read_file(self, resource: Resource) -> bytes:
        """The bytes of a stored resource (for uploading replies)."""
        ...


class AgentAPI(RunPort, JobsPort, AdminPort, MediaPort, Protocol):
    """What adapters may call: every port.  ``core.agent.Agent`` implements it;
    a caller that needs one part may ask for that port alone."""
