"""The real-LLM benchmark's own logic: the files it attaches and how it judges a plan."""

from __future__ import annotations

from pathlib import Path

import pytest

from benchmarks.real_llm import AskRun, f1_figures, judge_fit
from benchmarks.sample_media import named_files, write_sample
from core.mediatypes import inspect_attachment


@pytest.mark.parametrize(
    ("name", "kind"),
    [
        ("example.jpg", "image"),
        ("example.png", "image"),
        ("example.wav", "audio"),
        ("example.flac", "audio"),
        ("example.mp3", "audio"),
        ("example.mp4", "video"),
        ("notes.txt", "text"),
    ],
)
def test_samples_are_accepted_by_the_bot_as_their_kind(
    tmp_path: Path, name: str, kind: str
) -> None:
    path = tmp_path / name
    assert write_sample(path) == kind
    found = inspect_attachment(
        name, None, path.read_bytes(), max_bytes=10_000_000, max_pixels=10_000_000
    )
    assert found.kind == kind


def test_named_files_finds_each_name_once_and_no_abbreviations() -> None:
    text = (
        "I have an example.wav audio and 'example.jpg' image, e.g. a photo from "
        "www.example.com; classify example.jpg and write report.TXT."
    )
    assert named_files(text) == ["example.wav", "example.jpg", "report.TXT"]


def _run(files: list[str], tasks_ok: int = 1) -> AskRun:
    run = AskRun(0, "1", "text", files)
    run.tasks_ok = tasks_ok
    return run


def _row(**args: object) -> dict[str, object]:
    return {"id": 0, "task": "t", "model": None, "status": "done", "args": args}


def test_a_plan_fits_when_it_uses_every_named_file_and_no_other() -> None:
    run = _run(["example.wav", "example.jpg"])
    rows = [
        _row(audio="example.wav"),
        _row(text="<resource>-0", image="example.JPG"),
    ]
    judge_fit(run, rows)
    assert run.fits
    assert run.files_used == ["example.wav", "example.jpg"]


def test_a_plan_does_not_fit_with_an_unused_or_invented_file_or_nothing_run() -> None:
    unused = _run(["example.wav", "example.jpg"])
    judge_fit(unused, [_row(image="example.jpg")])
    assert not unused.fits and unused.files_unused == ["example.wav"]

    invented = _run(["example.jpg"])
    judge_fit(invented, [_row(image="example.jpg"), _row(audio="question.wav", text="hi")])
    assert not invented.fits and invented.foreign_files == ["question.wav"]

    nothing_ran = _run([], tasks_ok=0)
    judge_fit(nothing_ran, [])
    assert not nothing_ran.fits

    text_only = _run([])
    judge_fit(text_only, [_row(text="George Washington was born in 1732.")])
    assert text_only.fits


def test_f1_figures_read_taskbench_exact_and_our_view_as_percentages() -> None:
    before = {"gold": {"by_shape": {"all": {"requests": 7, "node_f1": 0.5, "edge_f1": 0.25}}}}
    assert f1_figures(before) == (None, (50.0, 25.0, 7))
    overall = {"samples": 10, "requests": 9, "node_f1": 0.125, "edge_f1": 0.0}
    after = {**before, "taskbench": {"overall": overall, "single": {"requests": 0}}}
    assert f1_figures(after) == ((12.5, 0.0, 9), (50.0, 25.0, 7))
    nothing_scored = {"taskbench": {"overall": {"samples": 3, "requests": 0}}}
    assert f1_figures(nothing_scored) == ((None, None, 0), None)
