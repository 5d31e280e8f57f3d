"""The user's-path benchmark's own arithmetic: the makespan and the hop gaps it
reads from the model fake's call times, and the side-by-side table."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from benchmarks.harness import SHAPE_BY_NAME, FakeURLs, settings_env_names
from benchmarks.user_path import (
    QUOTAS,
    Env,
    Sample,
    changed_sources,
    hop_gaps,
    side_by_side,
    source_stamps,
    span,
)


def call(start: float, end: float) -> dict[str, Any]:
    return {"t_start": start, "t_end": end, "model": "m"}


def test_a_chain_with_a_late_third_call_shows_that_gap_and_no_other() -> None:
    calls = [call(10.0, 10.2), call(10.205, 10.405), call(10.51, 10.71)]
    assert span(calls) == 10.71 - 10.0
    gaps = hop_gaps(calls)
    assert [round(g, 3) for g in gaps] == [0.005, 0.105]
    sample = Sample(calls=calls)
    assert round(sample.max_gap(), 3) == 0.105
    ratio = sample.makespan_ratio(SHAPE_BY_NAME["chain 3"])
    assert ratio is not None and round(ratio, 3) == round(0.71 / 0.6, 3)


def test_a_wave_that_starts_together_has_no_hop_and_the_next_wave_is_read_from_its_last_end() -> (
    None
):
    first_wave = [call(5.0, 5.2), call(5.001, 5.25)]
    second = call(5.30, 5.5)  # after the slower of the two
    assert hop_gaps([*first_wave, second]) == [5.30 - 5.25]
    assert hop_gaps(first_wave) == []
    assert hop_gaps([]) == [] and span([]) is None


def test_the_side_by_side_table_puts_each_path_under_its_shape() -> None:
    warm = {
        "makespan": {"details": {"makespan": {"single": {"ratios": [1.01, 1.02, 1.03]}}}},
        "latency": {"details": {"selection_latency": {"single": {"walls": [1.32], "ideal": 1.2}}}},
    }
    user = {
        "userpath": {
            "details": {
                "user_path": {
                    "reps": 3,
                    "load": [2.5, 2.0, 1.0],
                    "ask": {
                        "makespan": {"single": {"makespan_ratios": [1.0], "max_hop_gaps": [0.0]}},
                        "agent": {"single": {"agent_ratios": [1.5], "second_ratios": []}},
                    },
                    "run slack": {
                        "agent": {"single": {"agent_ratios": [1.4], "second_ratios": [1.2]}}
                    },
                }
            }
        }
    }
    text = side_by_side({**warm, **user})
    lines = text.splitlines()
    assert "medians of 3; load 2.5" in lines[0]
    row = next(line for line in lines if line.startswith("makespan ÷ cp"))
    assert row.split()[-7] == "1.02"  # the warm median under "single"
    assert any("ask (1st request)" in line and "1.50" in line for line in lines)
    assert any("run slack (2nd, warm)" in line and "1.20" in line for line in lines)
    assert not any("run discord" in line for line in lines)  # not measured: no row


def test_a_source_file_edited_added_or_removed_during_the_run_is_named(tmp_path: Path) -> None:
    (tmp_path / "core").mkdir()
    (tmp_path / "adapters").mkdir()
    planner = tmp_path / "core" / "planner.py"
    planner.write_text("x = 1\n")
    gone = tmp_path / "adapters" / "old.py"
    gone.write_text("y = 2\n")
    (tmp_path / "README.md").write_text("not a source\n")
    before = source_stamps(tmp_path)
    assert changed_sources(before, tmp_path) == []
    planner.write_text("x = 1  # half an edit\n")
    gone.unlink()
    (tmp_path / "core" / "new.py").write_text("")
    (tmp_path / "README.md").write_text("changed, but the bot does not import it\n")
    assert changed_sources(before, tmp_path) == [
        os.path.join("adapters", "old.py"),
        os.path.join("core", "new.py"),
        os.path.join("core", "planner.py"),
    ]


def test_the_bots_processes_run_without_quotas_as_the_warm_measurements_do(tmp_path: Path) -> None:
    """Every request of a run is one person's, in one store: left on, the
    per-minute quota refused the 21st within a minute (a quick run's)."""
    env = Env(FakeURLs("http://c", "http://l/v1", "http://h"), tmp_path, {}, 1)
    got = env.bot_env("slack", "llm", SLACK_HTTP_PORT="3000")
    assert {name: got[name] for name in QUOTAS} == dict.fromkeys(QUOTAS, "0")
    assert set(QUOTAS) <= settings_env_names()  # settings the bot reads
    assert got["SLACK_HTTP_PORT"] == "3000"
