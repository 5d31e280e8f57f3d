"""Slack's AI-app surface for a turn in an assistant thread.

In the app's own chat (an *assistant thread*, Slack's "Agents & AI Apps")
a turn shows natively, not as one status message edited with text:

* the thread's title is set from the request (``assistant.threads.setTitle``);
* a status line under the thread says what is happening — the stage, the
  tasks done of all — (``assistant.threads.setStatus``, cleared at the end);
* the answer is *one streamed message* (``chat.startStream`` /
  ``appendStream`` / ``stopStream`` through slack_sdk's ``chat_stream``
  helper): first the plan, one task card per task updated as it starts,
  finishes or fails, then the answer as the model writes it (Markdown), and
  at the end 👍/👎 feedback buttons;
* the files are uploaded into the thread after it, as on any Slack thread.

Where the workspace or the app lacks the feature (an older plan, the app
without ``assistant:write`` or the AI-app feature, an API that does not know
the method: Slack answers ``unknown_method``, ``missing_scope``,
``not_allowed_token_type``, ``feature_not_enabled``…) the turn falls back to
the status-message flow of every other Slack thread
(:class:`~adapters.slack.surface.SlackSurface`) at the point it failed, and
the workspace is remembered so its next turns start there.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import aiohttp
from slack_sdk.errors import SlackApiError
from slack_sdk.models.blocks import (
    ContextActionsBlock,
    FeedbackButtonObject,
    FeedbackButtonsElement,
)
from slack_sdk.models.messages.chunk import Chunk, PlanUpdateChunk, TaskUpdateChunk
from slack_sdk.web.async_chat_stream import AsyncChatStream
from slack_sdk.web.async_client import AsyncWebClient

from adapters.chat import Limits
from adapters.chat.board import Board
from adapters.chat.messages import RESTARTING_STATUS, task_error_text
from adapters.chat.render import (
    ERROR_ICON,
    OPENING,
    Renderer,
    plural,
    queue_words,
    seconds,
    stage_words,
)
from adapters.chat.text import shorten
from adapters.slack.config import SlackConfig
from adapters.slack.mrkdwn import MARKUP, MESSAGE_LIMIT, to_mrkdwn
from adapters.slack.posted import PostLookup
from adapters.slack.surface import FILES_PER_MESSAGE, SlackSurface
from core.types import AgentAPI, Job, Notice, Posted, Resource, Stage, TaskState, TaskStatus

log = logging.getLogger(__name__)

# What Slack answers where the AI-app surface is not available to this app
# in this workspace: remembered, so the workspace's next turns skip it.
UNSUPPORTED = frozenset(
    {
        "unknown_method",
        "missing_scope",
        "not_allowed_token_type",
        "feature_not_enabled",
        "not_allowed",
        "access_denied",
        "method_not_supported_for_channel_type",
        "team_not_allowed",
    }
)
STREAM_PIECE = 11_000  # Markdown per append (Slack takes at most 12,000 characters)
FEEDBACK_ACTION = "feedback"
GOOD, BAD = "good", "bad"
CARD_STATES = {
    TaskStatus.PENDING: "pending",
    TaskStatus.RUNNING: "in_progress",
    TaskStatus.DONE: "complete",
    TaskStatus.FAILED: "error",
    TaskStatus.SKIPPED: "error",
}
SUGGESTED_PROMPTS_TITLE = "Try one of these"
SUGGESTED_PROMPTS: tuple[dict[str, str], ...] = (
    {
        "title": "Draw it, then describe it",
        "message": "Draw a lighthouse at dusk as a watercolour, then describe the picture "
        "in one sentence.",
    },
    {
        "title": "Write it, then say it",
        "message": "Write a two-line poem about the sea and read it aloud.",
    },
    {
        "title": "Summarise and translate",
        "message": "Summarise the plot of Hamlet in three sentences, then translate the "
        "summary into French.",
    },
    {
        "title": "Look at a photo",
        "message": "I'll attach a photo: tell me what objects are in it and how many of each.",
    },
)

# The answer streams as Markdown (Slack renders it in a streamed message);
# the status texts stay mrkdwn, for the fallback's status message.
RENDERER = Renderer(replace(MARKUP, answer=lambda text: text))


class Features:
    """The workspaces where this app lacks the AI-app surface, as Slack's
    answers showed (this process's memory: a restart tries again)."""

    def __init__(self) -> None:
        self._lacking: dict[str, str] = {}

    def lacking(self, team: str) -> bool:
        return team in self._lacking

    def lack(self, team: str, error: str) -> None:
        if team not in self._lacking:
            log.warning(
                "slack: workspace %s has no AI-app surface for this app (%s): assistant "
                "threads are answered with a status message; add the assistant_view "
                "feature and the assistant:write scope (adapters/slack_manifest.yaml) "
                "and reinstall the app to use it",
                team,
                error,
            )
        self._lacking[team] = error


def status_line(board: Board) -> str:
    """The assistant status for ``board`` (Slack shows it after the app's
    name: "HuggingGPT is running tasks (1/3 finished)…"); empty when done."""
    if board.restarting:
        return f"{RESTARTING_STATUS}…"
    if board.stage is Stage.DONE:
        return ""
    if board.stage is None:
        queue = board.queue
        words = (
            queue_words(queue.ahead, queue.conversation_busy)
            if queue is not None
            else OPENING[board.opening][1]
        )
    elif board.waiting is not None and board.waiting.stage is board.stage:
        words = f"Still waiting for the language model ({seconds(board.waiting.waited)})"
    else:
        words = stage_words(board)
    return f"is {words[:1].lower()}{words[1:]}…"


Card = tuple[str, str, str | None]  # title, state, details


def card_of(task: TaskState) -> Card:
    """A task card: ``0. text-to-image · model``, its state, why it failed."""
    title = f"{task.id}. {task.task}" + (f" · {task.model}" if task.model else "")
    details = None
    if task.status in (TaskStatus.FAILED, TaskStatus.SKIPPED):
        why = " ".join(task_error_text(task).split())
        skipped = task.status is TaskStatus.SKIPPED
        details = shorten(f"skipped: {why}" if skipped else why, 200) or None
    return shorten(title, 150), CARD_STATES[task.status], details


def plan_title(tasks: Sequence[TaskState]) -> str:
    ended = (TaskStatus.DONE, TaskStatus.FAILED, TaskStatus.SKIPPED)
    if not all(t.status in ended for t in tasks):
        return f"Plan: {plural(len(tasks), 'task')}"
    failed = sum(t.status is not TaskStatus.DONE for t in tasks)
    return f"Ran {plural(len(tasks), 'task')}" + (f", {failed} did not finish" if failed else "")


def feedback_blocks(request_id: str) -> list[ContextActionsBlock]:
    """👍/👎 under an answer; the value names the request, so a click is
    stored with its turn."""
    buttons = FeedbackButtonsElement(
        action_id=FEEDBACK_ACTION,
        positive_button=FeedbackButtonObject(
            text="👍", accessibility_label="This answer was useful", value=f"{GOOD}:{request_id}"
        ),
        negative_button=FeedbackButtonObject(
            text="👎", accessibility_label="This answer was not useful", value=f"{BAD}:{request_id}"
        ),
    )
    return [ContextActionsBlock(elements=[buttons], block_id=f"feedback-{request_id}")]


def _error(e: SlackApiError) -> str:
    return str(e.response.get("error"))


class AssistantSurface:
    """A :class:`~adapters.chat.surface.StreamingSurface` (and
    :class:`~adapters.chat.surface.BoardSurface`) for one assistant thread.

    The status texts the turn shows are kept for the fallback; the native
    status line and the task cards are read from the turn's board whenever
    the status is shown (paced by the turn).  A turn's end arrives as the
    status's last text: the renderer's failure text (❌ …) is posted in the
    thread, anything after the answer clears the status line.  Every native
    call is made under one lock (the status pacing runs beside the stream),
    and so is every call to the fallback's status message: a progress edit
    that comes while a failed native call is replaced by the fallback's
    status message waits for that post and edits it (it posted a second one).
    """

    def __init__(
        self,
        agent: AgentAPI,
        client: AsyncWebClient,
        config: SlackConfig,
        *,
        team: str,
        channel: str,
        thread_ts: str,
        user: str,
        features: Features,
        job: Job | None = None,
        request_id: str = "",
        title: str | None = None,
        lookup: PostLookup | None = None,
    ) -> None:
        self._client = client
        self._config = config
        self._team, self._channel, self._thread_ts, self._user = team, channel, thread_ts, user
        self._features = features
        self._job = job
        self._rid = request_id or (job.request_id if job is not None else "")
        self._title = title
        self._fallback = SlackSurface(
            agent,
            client,
            config,
            channel=channel,
            thread_ts=thread_ts,
            user=user,
            job=job,
            request_id=self._rid,
            lookup=lookup,  # the runner's: a missing scope is logged once per process
        )
        posted = Posted.of(job)
        self.native = posted.ts is None  # a status message exists: it goes on there
        # The answer's words are out (a resumed job: only its files are left),
        # and everything is posted (the status line goes).
        self._said = posted.answered
        self._done = False
        self._board = Board()
        self._stream: AsyncChatStream | None = None
        self._cards: dict[int, Card] = {}
        self._plan: str | None = None
        self._line: str | None = None  # the status line last set
        self._text = ""  # the status text last given (what the fallback shows)
        self._streamed = ""  # this turn's answer so far (Markdown)
        self._lock = asyncio.Lock()
        self._limits = Limits(
            MESSAGE_LIMIT,
            config.max_upload_bytes,
            FILES_PER_MESSAGE,
            config.status_interval,
            answer_in_status=False,
        )

    @property
    def limits(self) -> Limits:
        return self._limits

    def follow(self, board: Board) -> None:
        self._board = board

    # -- the status ---------------------------------------------------------

    async def post_status(self, text: str) -> None:
        self._text = text
        if self.native:
            async with self._lock:
                try:
                    await self._open()
                    return
                except SlackApiError as e:
                    await self._degrade(e, "opening the assistant thread's status")
                    return
        async with self._lock:  # after a fallback post under way (_degrade): not a second one
            await self._fallback.post_status(text)

    async def edit_status(self, text: str) -> None:
        self._text = text
        failed = text.startswith(ERROR_ICON)
        if self.native:
            async with self._lock:
                try:
                    if failed:  # the cards end as they are; the reason follows
                        if self._stream is not None:
                            await self._cards_to_date()
                            await self._close_stream(blocks=None)
                        await self._set_line("")
                    else:
                        await self._progress()
                        return
                except SlackApiError as e:
                    await self._degrade(e, "showing the progress")
                    return
        async with self._lock:  # a fallback post under way (_degrade) is edited, not doubled
            await self._fallback.edit_status(text)  # a failure: the reason, in the thread

    async def notice(self, notice: Notice, text: str) -> None:
        """A queue or restart notice for a job not running yet (``text``: as
        the status message would say it)."""
        self._text = text
        if self.native:
            async with self._lock:
                try:
                    await self._set_line(status_line(Board.of_notice(notice)))
                    return
                except SlackApiError as e:
                    await self._degrade(e, "showing the queue")
                    return
        async with self._lock:
            await self._fallback.edit_status(text)

    async def tell_privately(self, text: str) -> None:
        await self._fallback.tell_privately(text)

    # -- the answer ---------------------------------------------------------

    async def stream_text(self, delta: str) -> None:
        self._streamed += delta
        if not self.native:
            return  # posted whole with the rest of the answer
        async with self._lock:
            if not self.native:
                return
            try:
                await self._cards_to_date()
                stream = await self._opened_stream()
                await stream.append(markdown_text=delta)
                await self._remember()
            except SlackApiError as e:
                await self._degrade(e, "streaming the answer")

    async def discard_stream(self) -> None:
        self._streamed = ""
        if not self.native:
            return
        async with self._lock:
            if self._stream is not None and self._stream.ts:
                # The words shown are void: the message goes (its task cards
                # are shown again in the next one).
                await self._drop(self._stream.ts)
            self._stream, self._cards, self._plan = None, {}, None

    async def post_answer(self, text: str, files: Sequence[Resource]) -> None:
        if self.native and not self._said:
            async with self._lock:
                try:
                    await self._finish_stream(text)
                except SlackApiError as e:
                    await self._degrade(e, "finishing the answer")
        if not self.native:
            whole = self._streamed + text
            await self._fallback.post_answer(to_mrkdwn(whole) if whole.strip() else "", files)
            return
        if files:
            async with self._lock:
                try:
                    await self._set_line(f"is sending {plural(len(files), 'file')}…")
                except SlackApiError as e:  # the status line only: the files go anyway
                    log.info("slack request %s: status not shown (%s)", self._rid, _error(e))
            await self._fallback.post_answer("", files)  # uploaded into the thread after it
        self._done = True

    # -- native steps (called under the lock) -------------------------------

    async def _open(self) -> None:
        old = Posted.of(self._job).stream
        if old and not self._said:
            # A stopped process left a stream half written: it is redone whole.
            await self._drop(old)
            await self._posted(stream=None)
        if self._title:
            await self._client.assistant_threads_setTitle(
                channel_id=self._channel, thread_ts=self._thread_ts, title=self._title
            )
        await self._set_line(status_line(self._board))

    async def _progress(self) -> None:
        if self._done:  # the turn's last state: the status line goes
            await self._set_line("")
            return
        if self._said:  # the files are being sent
            return
        if self._board.stage is not Stage.DONE:
            # Done, the answer not out yet: the line stays until it is (a
            # paced edit reading the board after the turn's end cleared it,
            # then "is sending 1 file…" came back, then it was cleared again).
            await self._set_line(status_line(self._board))
        await self._cards_to_date()

    async def _set_line(self, line: str) -> None:
        if line == self._line or (not line and self._line is None):
            return
        await self._client.assistant_threads_setStatus(
            channel_id=self._channel, thread_ts=self._thread_ts, status=line
        )
        self._line = line

    async def _cards_to_date(self) -> None:
        """Send the plan title and each task card that changed since last time."""
        tasks = self._board.tasks
        if not tasks:
            return
        chunks: list[Chunk] = []
        title = plan_title(tasks)
        if title != self._plan:
            chunks.append(PlanUpdateChunk(title=title))
        changed: dict[int, Card] = {}
        for task in tasks:
            card = card_of(task)
            if self._cards.get(task.id) != card:
                changed[task.id] = card
                name, state, details = card
                chunks.append(
                    TaskUpdateChunk(id=str(task.id), title=name, status=state, details=details)
                )
        if not chunks:
            return
        stream = await self._opened_stream()
        await stream.append(chunks=chunks)
        self._plan = title
        self._cards.update(changed)
        await self._remember()

    async def _finish_stream(self, text: str) -> None:
        await self._cards_to_date()
        if self._stream is None and not text.strip():
            self._said = True  # nothing to say in words (files only)
            return
        stream = await self._opened_stream()
        for start in range(0, len(text), STREAM_PIECE):
            await stream.append(markdown_text=text[start : start + STREAM_PIECE])
        await self._close_stream(blocks=feedback_blocks(self._rid))
        self._said = True
        await self._posted(answered=True)

    async def _close_stream(self, blocks: list[ContextActionsBlock] | None) -> None:
        stream = self._stream
        if stream is None:
            return
        try:
            await stream.stop(blocks=blocks)
        except SlackApiError as e:
            if blocks is None or _error(e) not in ("invalid_blocks", "invalid_blocks_format"):
                raise
            log.info("slack request %s: no feedback buttons here (%s)", self._rid, _error(e))
            await stream.stop()
        await self._remember()

    async def _opened_stream(self) -> AsyncChatStream:
        if self._stream is None:
            self._stream = await self._client.chat_stream(
                channel=self._channel,
                thread_ts=self._thread_ts,
                recipient_team_id=self._team,
                recipient_user_id=self._user,
                task_display_mode="plan",
                buffer_size=self._config.stream_buffer_chars,
            )
        return self._stream

    async def _remember(self) -> None:
        """Keep the stream's ts on the job: a process that resumes the job
        removes a stream this one left half written."""
        ts = self._stream.ts if self._stream is not None else None
        if ts and Posted.of(self._job).stream != ts:
            await self._posted(stream=ts)

    async def _drop(self, ts: str) -> None:
        """Stop and delete a streamed message (best effort: it may be gone)."""
        for method, call in (
            ("chat.stopStream", self._client.chat_stopStream),
            ("chat.delete", self._client.chat_delete),
        ):
            try:
                await call(channel=self._channel, ts=ts)
            except (SlackApiError, aiohttp.ClientError, TimeoutError) as e:
                log.info("slack request %s: %s of %s: %s", self._rid, method, ts, e)

    async def _degrade(self, e: SlackApiError, doing: str) -> None:
        """Native failed: carry on as a status message (the words streamed so
        far are posted with the answer; a half-written stream is removed)."""
        error = _error(e)
        self.native = False
        if error in UNSUPPORTED:
            self._features.lack(self._team, error)
        log.warning(
            "slack request %s: %s failed (%s): answering with a status message instead",
            self._rid,
            doing,
            error,
        )
        if self._stream is not None and self._stream.ts and not self._said:
            await self._drop(self._stream.ts)
        self._stream = None
        await self._fallback.post_status(self._text)

    async def _posted(self, **changes: Any) -> None:
        """Record ``changes`` to what the job has posted (nothing without a job)."""
        await Posted.of(self._job).model_copy(update=changes).save(self._job)
