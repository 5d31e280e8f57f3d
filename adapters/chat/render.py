"""The words people read, for every platform: one renderer, one markup each.

The agent's events carry data; the sentences, icons, sizes and times are
here, once.  A :class:`Markup` says how a platform marks text up (Discord's
Markdown, Slack's mrkdwn, the terminal's plain text), and :class:`Renderer`
uses it for the status message, failures, plans, model lists and notes.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from adapters.chat.board import Board, Opening
from adapters.chat.error_words import format_seconds, format_size
from adapters.chat.messages import CANNOT_TAKE as CANNOT_TAKE  # read here by the platforms
from adapters.chat.messages import RESTARTING, SORRY, error_text, task_error_text
from adapters.chat.text import shorten
from core.errors import InputRejected, RunFailed
from core.types import (
    ModelChoice,
    Notice,
    PlanChange,
    PlanNote,
    PlanPreview,
    Reply,
    Stage,
    TaskRecord,
    TaskState,
    TaskStatus,
)

STAGE_ICONS: dict[Stage, str] = {
    Stage.QUEUED: "🕒",
    Stage.PLANNING: "🧠",
    Stage.SELECTING: "🔎",
    Stage.RUNNING: "⚙️",
    Stage.ANSWERING: "✍️",
    Stage.DONE: "✅",
}
TASK_ICONS: dict[TaskStatus, str] = {
    TaskStatus.PENDING: "▫️",
    TaskStatus.RUNNING: "⏳",
    TaskStatus.DONE: "✅",
    TaskStatus.FAILED: "❌",
    TaskStatus.SKIPPED: "⏭️",
}
OPENING = {
    Opening.STARTING: ("⏳", "Reading your message"),
    Opening.DOWNLOADING: ("⏳", "Downloading your files"),
    Opening.RESUMING: ("🔄", "Resuming your request after a restart"),
}
ERROR_ICON = "❌"
seconds = format_seconds  # ``45 s``, ``0.3 s``
human_size = format_size  # ``1.5 MB``, ``512 bytes``


def plural(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


def queue_words(ahead: int, conversation_busy: bool) -> str:
    if ahead == 0 and conversation_busy:
        return "Waiting for the previous request in this conversation to finish"
    if ahead == 0:
        return "Queued: you're next (I'm busy with other requests)"
    return f"Queued: {plural(ahead, 'request')} ahead of you"


def stage_words(board: Board) -> str:
    stage = board.stage
    if stage is Stage.PLANNING:
        return (
            "Resuming where I stopped" if board.resumed else "Reading the conversation and planning"
        )
    if stage is Stage.SELECTING:
        return f"Choosing models for {plural(board.planned or 0, 'task')}"
    if stage is Stage.RUNNING:
        return f"Running tasks ({board.finished_tasks}/{len(board.tasks)} finished)"
    if stage is Stage.ANSWERING:
        return "Writing the answer"
    return "Done"


def plan_note(note: PlanNote) -> str:
    """One sentence on a repair that changed the language model's plan."""
    if note.change is PlanChange.FILE:
        named = (
            f" (it named {shorten(note.written, 60)!r}, which is not here)" if note.written else ""
        )
        return f"I used {note.used} as the {note.kind} of task {note.task_id}{named}."
    if note.change is PlanChange.REQUEST:
        return (
            f"I used your message as the text of task {note.task_id} "
            f"(it named {shorten(note.written, 60)!r})."
        )
    if note.change is PlanChange.BRIDGED:
        return (
            f"I added task {note.task_id} ({note.used}) to make {note.kind} "
            f"from {shorten(note.written, 60)}."
        )
    return f"I read the task {shorten(note.written, 60)!r} as {note.used}."


def _same(text: str) -> str:
    return text


@dataclass(frozen=True, slots=True)
class Markup:
    """How a platform marks text up (plain text by default)."""

    bold: Callable[[str], str] = _same
    code: Callable[[str], str] = _same
    escape: Callable[[str], str] = _same
    # The model's Markdown as the platform shows it.
    answer: Callable[[str], str] = field(default=_same)


@dataclass(frozen=True, slots=True)
class Renderer:
    """Text for one platform.  ``terminal``: heads say ``[stage]`` and task
    lines are indented, for a log of lines rather than one edited message."""

    markup: Markup = field(default_factory=Markup)
    terminal: bool = False

    # -- the status message ----------------------------------------------------

    def status(self, board: Board, limit: int, *, with_answer: bool = True) -> str:
        """The status message for ``board``: what is happening, then each
        task, then (``with_answer``) the answer written so far."""
        head = self._head(board)
        body = self._with_tasks(head, board.tasks, limit)
        if not (with_answer and board.answer.strip()):
            return body
        room = limit - len(body) - 2
        answer = self.markup.answer(board.answer.strip())
        if room < 40:
            return body
        return f"{body}\n\n{shorten(answer, room, keep_lines=True)}"

    def notice(self, notice: Notice, limit: int) -> str:
        return self.status(Board.of_notice(notice), limit)

    def final(self, reply: Reply, elapsed: float, limit: int) -> str:
        """The status message's last state for an answered request (and what
        was changed in the language model's plan, one line each)."""
        head = self._line(STAGE_ICONS[Stage.DONE], f"Done in {seconds(elapsed)}", Stage.DONE)
        for note in reply.plan_notes:
            head += f"\n{'' if self.terminal else 'ℹ️ '}{self.markup.escape(plan_note(note))}"
        return self._with_tasks(head, reply.tasks, limit)

    def failed(
        self,
        reason: str | InputRejected | RunFailed,
        tasks: Sequence[TaskState | TaskRecord],
        limit: int,
    ) -> str:
        """The status message's last state when the request failed or was
        refused: the reason (an error: its words), then the tasks that ran."""
        if not isinstance(reason, str):
            reason = error_text(reason)
        head = f"{ERROR_ICON} {self.markup.escape(shorten(reason, min(limit // 2, 1500)))}"
        return self._with_tasks(head, tasks, limit)

    def sorry(self, request_id: str) -> str:
        return SORRY.format(rid=self.markup.code(request_id))

    def _head(self, board: Board) -> str:
        if board.restarting:
            return self._line("🔄", RESTARTING, Stage.QUEUED)
        if board.stage is None and board.queue is not None:
            queue = board.queue
            words = queue_words(queue.ahead, queue.conversation_busy)
            return self._line(STAGE_ICONS[Stage.QUEUED], words, Stage.QUEUED)
        if board.stage is None:
            icon, words = OPENING[board.opening]
            return self._line(icon, words, None, busy=True)
        waiting = board.waiting
        if waiting is not None and waiting.stage is board.stage:
            attempt = f", attempt {waiting.attempt}" if waiting.attempt > 1 else ""
            words = f"Still waiting for the language model ({seconds(waiting.waited)}{attempt})"
            return self._line(STAGE_ICONS[board.stage], words, board.stage)
        busy = board.stage is not Stage.DONE
        return self._line(STAGE_ICONS[board.stage], stage_words(board), board.stage, busy=busy)

    def _line(self, icon: str, words: str, stage: Stage | None, *, busy: bool = False) -> str:
        """A head line; ``busy``: an activity under way (an ellipsis follows)."""
        if self.terminal:
            label = stage.value if stage is not None else "starting"
            return f"[{label}] {words}"
        return f"{icon} {self.markup.bold(self.markup.escape(words))}{'…' if busy else ''}"

    def task_line(self, task: TaskState | TaskRecord) -> str:
        code, esc = self.markup.code, self.markup.escape
        model = code(task.model) if task.model else "choosing a model…"
        line = f"{TASK_ICONS[task.status]} {task.id}. {esc(task.task)} · {model}"
        why = task_error_text(task) or getattr(task, "reason", None)
        if task.status in (TaskStatus.FAILED, TaskStatus.SKIPPED) and (why or "").strip():
            line += f" — {esc(shorten(' '.join((why or '').split()), 160))}"
        return f"  {line}" if self.terminal else line

    def _with_tasks(self, head: str, tasks: Sequence[TaskState | TaskRecord], limit: int) -> str:
        lines = [head]
        size = len(head)
        for shown, task in enumerate(tasks):
            line = self.task_line(task)
            if size + len(line) + 1 > limit - 40:
                lines.append(f"… and {len(tasks) - shown} more")
                break
            lines.append(line)
            size += len(line) + 1
        return "\n".join(lines)

    # -- the answer ------------------------------------------------------------

    def answer(self, text: str) -> str:
        """The model's answer in the platform's markup."""
        return self.markup.answer(text) if text.strip() else ""

    def too_large(self, name: str, size: int, limit: int) -> str:
        return (
            f"📎 {self.markup.code(name)} ({human_size(size)}) is too large to upload here "
            f"(limit {human_size(limit)})."
        )

    # -- /plan and /models -----------------------------------------------------

    def plan(self, preview: PlanPreview) -> str:
        b, c, esc = self.markup.bold, self.markup.code, self.markup.escape
        if preview.error:
            failure = preview.failure
            return f"{ERROR_ICON} {esc(error_text(failure) if failure else preview.note)}"
        if not preview.steps:
            return "📝 No model is needed: I would answer this directly."
        lines = [f"📝 {b('Plan')} — {plural(len(preview.steps), 'task')} (nothing was run)"]
        for step in preview.steps:
            after = f" after {', '.join(map(str, step.dep))}" if step.dep else ""
            model = c(step.model) if step.model else "no model"
            lines.append(f"{c(str(step.id))} {b(esc(step.task))}{after} → {model}")
            if step.args:
                args = ", ".join(f"{k}={shorten(str(v), 80)!r}" for k, v in step.args.items())
                lines.append(f"    args: {esc(args)}")
            if step.reason:
                lines.append(f"    why: {esc(shorten(step.reason, 200))}")
        return "\n".join(lines)

    def models(self, models: Mapping[str, Sequence[ModelChoice]]) -> str:
        b, c, esc = self.markup.bold, self.markup.code, self.markup.escape
        if not models:
            return "No models found for that task."
        lines: list[str] = []
        for task, choices in models.items():
            lines.append(b(esc(task)))
            if not choices:
                lines.append("• (none)")
            for choice in choices:
                desc = f" — {esc(shorten(choice.description, 80))}" if choice.description else ""
                lines.append(f"• {c(choice.id)} ({choice.downloads:,} downloads){desc}")
        return "\n".join(lines)
