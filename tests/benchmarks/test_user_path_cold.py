"""The user's-path benchmark's cold-ask rows: without a worker, the first ask
(which starts one) and the asks handed to it, each against the 0.8 s target."""

from __future__ import annotations

from benchmarks.cold_ask import cold_rows
from benchmarks.harness import Result
from benchmarks.user_path import side_by_side


def cold() -> dict[str, object]:
    return {
        "errors": [],
        "no_worker": [1.2, 1.0, 1.1],
        "first": [1.05],
        "worker_ready_after": 1.3,
        "later": [0.12, 0.1, 0.11],
        "python": [0.03],
    }


def test_each_kind_of_cold_ask_is_a_row_against_the_target() -> None:
    res = Result()
    cold_rows(res, cold())
    rows = {r.case: r for r in res.rows}
    assert rows["ask, no worker"].figure == "1.10 s" and rows["ask, no worker"].status == "FAIL"
    later = rows["ask, worker started on first use"]
    assert later.figure == "0.11 s" and later.status == "PASS"
    assert "listened 1.30 s after" in rows["ask, first (starts the worker)"].note


def test_a_cold_ask_that_failed_is_said_not_hidden() -> None:
    res = Result()
    cold_rows(res, {"errors": ["first ask: exit 2"], "no_worker": [1.0]})
    by_case = {r.case: r for r in res.rows}
    assert by_case["ask, no worker"].status == "FAIL"  # measured, but something failed
    assert by_case["ask, worker started on first use"].figure == "error"


def test_the_side_by_side_table_ends_with_the_cold_asks() -> None:
    user = {"userpath": {"details": {"user_path": {"reps": 3, "cold_ask": cold()}}}}
    lines = [line for line in side_by_side(user).splitlines() if line.startswith("cold ask s")]
    wanted = [("ask, no worker", "1.10"), ("1st (starts worker)", "1.05"), ("later", "0.11")]
    assert len(lines) == 3
    for line, (where, figure) in zip(lines, wanted, strict=True):
        assert where in line and f" {figure} " in line and line.endswith("≤ 0.8")
