"""``python -m bot usage``: what the bot used, per user, channel, server or model.

Prints one table from the usage the agent recorded per turn (LLM calls and
tokens, model calls and seconds, cost where something priced it), filtered
by server, user and period.  Only the standard library is imported at
start-up; the store when the command runs.
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from bot.settings import Settings
    from core.usage import GroupBy, UsageTotals

log = logging.getLogger("bot.usage")

PLATFORMS = ("discord", "slack", "cli")
DASH = "—"


def add_parser(sub: Any) -> None:
    """The ``usage`` subcommand on ``python -m bot``'s subparsers."""
    p = sub.add_parser(
        "usage",
        help="print the usage (LLM tokens, model calls, seconds, cost) as a table",
        description="Sum the usage recorded per turn by user, channel, server or model.",
    )
    p.add_argument("--server", metavar="PLATFORM:ID", help="only this server, e.g. discord:1234")
    p.add_argument("--user", metavar="[PLATFORM:]ID", help="only this user")
    p.add_argument("--since", metavar="PERIOD", help="e.g. 30m, 12h, 7d, 2w or 2026-08-01")
    p.add_argument(
        "--by",
        choices=["user", "channel", "server", "model"],
        default="server",
        help="one row per … (server)",
    )


async def run(args: argparse.Namespace, settings: Settings) -> int:
    from adapters.chat.messages import error_text
    from bot.app import open_store
    from core.errors import InputRejected
    from core.server_settings import ServerKey
    from core.store.usage import UsageStore
    from core.usage import GroupBy, UsageFilter, parse_since

    try:
        server = ServerKey.parse(args.server) if args.server else None
        since = parse_since(args.since) if args.since else None
    except InputRejected as e:
        return _refused(error_text(e))
    platform, user = _user(args.user)
    if server is not None and platform is not None and platform != server.platform:
        return _refused(f"--user {args.user} is not on {server.platform}")
    where = UsageFilter(
        platform=server.platform if server else platform,
        server=server.server if server else None,
        user_id=user,
        since=since,
    )
    by = GroupBy(args.by)
    async with open_store(settings) as (db, _repo, _media):
        rows = await UsageStore(db).totals(by, where)
    print(_title(by, args, since))
    if not rows:
        print("no usage recorded for this selection")
        return 0
    for line in table(by, rows):
        print(line)
    if any(r.unpriced_calls for r in rows):
        print(
            "cost: only what a provider priced is counted; Hugging Face's router and "
            "Inference Providers report no price per call (see hf.co/settings/billing)"
        )
    return 0


def _refused(problem: str) -> int:
    log.info("usage refused: %s", problem)
    print(f"error: {problem}", file=sys.stderr)
    return 2


def _user(text: str | None) -> tuple[str | None, str | None]:
    """``discord:123`` → (discord, 123); ``123`` → (None, 123)."""
    if not text:
        return None, None
    platform, sep, rest = text.partition(":")
    if sep and platform in PLATFORMS and rest:
        return platform, rest
    return None, text


def _title(by: GroupBy, args: argparse.Namespace, since: datetime | None) -> str:
    parts = [f"usage by {by.value}"]
    if args.server:
        parts.append(f"on {args.server}")
    if args.user:
        parts.append(f"of user {args.user}")
    parts.append(f"since {since:%Y-%m-%d %H:%M} UTC" if since else "all time")
    return ", ".join(parts)


def cost_text(t: UsageTotals) -> str:
    """``$0.0123``; ``≥ $0.0123`` when some calls were not priced; ``unknown``
    when none was; ``—`` when there was nothing to price."""
    if t.cost_usd is None:
        return "unknown" if t.unpriced_calls else DASH
    amount = f"${t.cost_usd:,.4f}"
    return f"≥ {amount}" if t.unpriced_calls else amount


def _n(value: int) -> str:
    return f"{value:,}"


def _s(value: float) -> str:
    return f"{value:,.1f}"


def table(by: GroupBy, rows: Sequence[UsageTotals]) -> list[str]:
    """The table's lines: a header, a rule, one line per row, a total."""
    from core.usage import GroupBy, grand_total

    if by is GroupBy.MODEL:
        head = ["kind", "model", "provider", "requests", "calls", "failed", "prompt tok"]
        head += ["completion tok", "seconds", "cost"]
        body = [
            [
                r.key[0],
                r.key[1],
                r.key[2] or "?",
                _n(r.requests) if r.key[0] == "llm" else DASH,
                _n(r.llm_calls if r.key[0] == "llm" else r.model_calls),
                _n(r.model_failures) if r.key[0] == "task" else DASH,
                _n(r.prompt_tokens) if r.key[0] == "llm" else DASH,
                _n(r.completion_tokens) if r.key[0] == "llm" else DASH,
                _s(r.model_seconds) if r.key[0] == "task" else DASH,
                cost_text(r),
            ]
            for r in rows
        ]
        total = grand_total(rows)
        body.append(
            [
                "total",
                "",
                "",
                _n(total.requests),
                _n(total.llm_calls + total.model_calls),
                _n(total.model_failures),
                _n(total.prompt_tokens),
                _n(total.completion_tokens),
                _s(total.model_seconds),
                cost_text(total),
            ]
        )
        return _align(head, body, numeric_from=3)
    name = {GroupBy.USER: "user", GroupBy.CHANNEL: "channel", GroupBy.SERVER: "server"}[by]
    head = [name, "requests", "errors", "llm calls", "prompt tok", "completion tok"]
    head += ["model calls", "failed", "model s", "cost"]
    body = [_row(":".join(r.key), r) for r in rows]
    body.append(_row("total", grand_total(rows)))
    return _align(head, body, numeric_from=1)


def _row(label: str, r: UsageTotals) -> list[str]:
    return [
        label,
        _n(r.requests),
        _n(r.errors),
        _n(r.llm_calls),
        _n(r.prompt_tokens),
        _n(r.completion_tokens),
        _n(r.model_calls),
        _n(r.model_failures),
        _s(r.model_seconds),
        cost_text(r),
    ]


def _align(head: list[str], body: list[list[str]], *, numeric_from: int) -> list[str]:
    """Columns padded to their widest cell: text left, numbers right; the
    total (the last row) under a rule."""
    widths = [max(len(row[i]) for row in [head, *body]) for i in range(len(head))]

    def line(cells: list[str]) -> str:
        return "  ".join(
            c.rjust(w) if i >= numeric_from else c.ljust(w)
            for i, (c, w) in enumerate(zip(cells, widths, strict=True))
        ).rstrip()

    rule = "  ".join("-" * w for w in widths)
    return [line(head), rule, *(line(r) for r in body[:-1]), rule, line(body[-1])]
