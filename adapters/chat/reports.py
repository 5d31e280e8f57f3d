"""The words of the reports a person asks for, on any platform: a plan's
estimate (``/plan``), a past request's details (plan, models, timings,
usage), ``/usage`` and a server's settings.  Data in, text out, in the
platform's :class:`~adapters.chat.render.Markup`."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING

from adapters.chat.messages import task_error_text
from adapters.chat.render import TASK_ICONS, Markup, plural, seconds
from adapters.chat.text import shorten
from core.types import ReplyStatus

if TYPE_CHECKING:
    from core.types import PastRequest, PlannedStep, UsageLine, UsageReport

NO_PRICE = "cost: not published by the provider"


def duration(value: float) -> str:
    """``25 s``, ``7 min``, ``1 h 5 min``."""
    if value < 90:
        return seconds(value)
    minutes = round(value / 60)
    if minutes < 60:
        return f"{minutes} min"
    hours, rest = divmod(minutes, 60)
    return f"{hours} h" + (f" {rest} min" if rest else "")


def critical_path(
    steps: Sequence[PlannedStep], length: Callable[[PlannedStep], float | None]
) -> float | None:
    """The longest chain through the steps' dependencies (tasks that do not
    wait on each other run at once); None when a step's length is unknown."""
    by_id = {s.id: s for s in steps}
    done: dict[int, float] = {}

    def finish(step: PlannedStep, seen: frozenset[int]) -> float | None:
        if step.id in done:
            return done[step.id]
        own = length(step)
        if own is None:
            return None
        start = 0.0
        for dep in step.dep:
            before = by_id.get(dep)
            if before is None or dep in seen:
                continue
            end = finish(before, seen | {step.id})
            if end is None:
                return None
            start = max(start, end)
        done[step.id] = start + own
        return done[step.id]

    ends = [finish(s, frozenset()) for s in steps]
    if any(e is None for e in ends):
        return None
    return max((e for e in ends if e is not None), default=0.0)


def cost_words(costs: Sequence[float | None]) -> str:
    priced = [c for c in costs if c is not None]
    if not priced:
        return NO_PRICE
    total = f"${sum(priced):.4f}".rstrip("0").rstrip(".")
    if len(priced) < len(costs):
        return f"cost: at least {total} ({len(costs) - len(priced)} not priced by the provider)"
    return f"cost: about {total}"


def estimate(steps: Sequence[PlannedStep]) -> str:
    """``⏱️ About 25 s (at most 7 min) · cost: not published by the provider``."""
    if not steps:
        return "⏱️ No model to run: only the answer is written."
    typical = critical_path(steps, lambda s: s.typical_seconds)
    longest = critical_path(steps, lambda s: s.max_seconds)
    if typical is None:
        time = "time: unknown"
    else:
        time = f"About {duration(typical)} of model time"
        if longest is not None and longest > typical:
            time += f" (at most {duration(longest)} if every model runs to its time limit)"
    return f"⏱️ {time} · {cost_words([s.cost_usd for s in steps])}"


def details(past: PastRequest, markup: Markup) -> str:
    """What a past request ran: its plan on which models, how long each stage
    and task took, and what it used."""
    b, c, esc = markup.bold, markup.code, markup.escape
    lines = [f"🔎 {b('Details')} of request {c(past.request_id)}"]
    if past.text.strip():
        lines.append(f"> {esc(shorten(' '.join(past.text.split()), 300))}")
    reply = past.reply
    if reply is not None and reply.status is not ReplyStatus.ANSWERED:
        lines.append(f"Outcome: {reply.status.value}")
    records = {t.id: t for t in reply.tasks} if reply is not None else {}
    if past.steps:
        lines.append(b(f"Plan ({plural(len(past.steps), 'task')})"))
    else:
        lines.append("No model was needed: answered directly.")
    for step in past.steps:
        run = records.get(step.id)
        icon = TASK_ICONS[run.status] if run is not None else "▫️"
        after = f" after {', '.join(map(str, step.dep))}" if step.dep else ""
        model = (run.model if run is not None else None) or step.model
        line = f"{icon} {step.id}. {esc(step.task)}{after} · {c(model) if model else 'no model'}"
        if run is not None and run.started and run.ended:
            line += f" · {seconds((run.ended - run.started).total_seconds())}"
        if run is not None and run.backend:
            line += f" ({esc(run.backend)})"
        lines.append(line)
        why = task_error_text(run) if run is not None else ""
        if why:
            lines.append(f"    {esc(shorten(' '.join(why.split()), 160))}")
    if reply is not None and reply.timings:
        took = " · ".join(f"{name} {seconds(value)}" for name, value in reply.timings.items())
        lines.append(f"⏱️ {took}")
    usage = reply.usage if reply is not None else past.usage
    lines.append(
        f"🧮 Language model: {plural(usage.llm_calls, 'call')}, "
        f"{usage.prompt_tokens:,} tokens in, {usage.completion_tokens:,} out"
    )
    return "\n".join(lines)


def _used(line: UsageLine) -> str:
    parts = []
    if line.llm_calls:
        parts.append(
            f"{plural(line.llm_calls, 'call')}, {line.prompt_tokens:,} tokens in, "
            f"{line.completion_tokens:,} out"
        )
    if line.model_calls:
        parts.append(f"{plural(line.model_calls, 'call')}, {seconds(line.model_seconds)}")
    if line.cost_usd is not None:
        cost = f"${line.cost_usd:.4f}"
        parts.append(cost + (f" (+{line.unpriced_calls} unpriced)" if line.unpriced_calls else ""))
    return "; ".join(parts) or "nothing"


def usage(report: UsageReport, markup: Markup) -> str:
    """``/usage``: a line per model (the language model's and each task
    model's), then the total and what was priced."""
    b, esc = markup.bold, markup.escape
    whose = "Your usage on this server" if report.scope == "you" else "This server's usage"
    since = f" since {report.since:%Y-%m-%d %H:%M} UTC" if report.since else ""
    lines = [f"🧮 {b(whose + since)} — {plural(report.turns, 'request')}"]
    if not report.lines:
        lines.append("Nothing used yet.")
        return "\n".join(lines)
    lines.extend(f"• {esc(x.label)} — {_used(x)}" for x in report.lines)
    total = report.total
    lines.append(
        f"{b('Total')}: {plural(total.llm_calls, 'language-model call')} "
        f"({total.prompt_tokens:,} tokens in, {total.completion_tokens:,} out), "
        f"{plural(total.model_calls, 'model call')} ({seconds(total.model_seconds)})"
    )
    if total.cost_usd is None:
        lines.append(f"💲 {NO_PRICE} for any call.")
    else:
        unpriced = (
            f"; {plural(total.unpriced_calls, 'call')} not priced" if total.unpriced_calls else ""
        )
        lines.append(f"💲 ${total.cost_usd:.4f}{unpriced}")
    return "\n".join(lines)


def settings(values: Mapping[str, str], markup: Markup, *, changed: str | None = None) -> str:
    """A server's own settings (the rest inherit the deployment's)."""
    b, c, esc = markup.bold, markup.code, markup.escape
    lines = [f"⚙️ {b('Changed ' + changed) if changed else b('This server’s settings')}"]
    if not values:
        lines.append("Nothing is set here: everything follows the bot's own settings.")
    for key, value in sorted(values.items()):
        lines.append(f"{c(key)} = {esc(value)}")
    return "\n".join(lines)
