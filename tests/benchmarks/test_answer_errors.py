"""The answer-errors benchmark's own logic: its variants differ only in the
error's words, and its checks find what they say they find."""

from __future__ import annotations

import pytest

from benchmarks.answer_errors import CASES, VARIANTS, judge, variant_chat_log, variant_records
from core.errors import TaskCode
from core.response import build_response_messages

BY_NAME = {c.name: c for c in CASES}


def test_the_variants_differ_only_in_the_errors_words() -> None:
    for case in CASES:
        prompts = {
            v: build_response_messages(
                request_text=case.request,
                chat_log=variant_chat_log(case, v),
                records=variant_records(case, v),
                files=case.files,
            )
            for v in VARIANTS
        }
        terse = prompts["terse"][1]["content"]
        for v in VARIANTS:
            records = variant_records(case, v)
            assert [r.status for r in records] == [r.status for r in case.records]
            if v != "plain":  # the text is shown as written
                assert all(not r.errors for r in records)
            assert prompts[v][0] == prompts["terse"][0]  # the same system prompt
        codes = [e.code for r in case.records for e in r.errors]
        codes += [str(case.refused[0])] if case.refused else []
        assert codes and all(code in terse for code in codes)
        plain = prompts["plain"][1]["content"]
        assert plain != terse
        assert all(TaskCode(code).meaning in plain for code in codes if code in set(TaskCode))
        assert prompts["words"][1]["content"] != terse


@pytest.mark.parametrize(
    ("case", "answer", "expected"),
    [
        ("timeout", "I'm sorry, but I can't assist with that.", {"refuses": True, "ok": False}),
        (
            "timeout",
            "The image-to-text task failed: both models timed out after 30 seconds.",
            {"failed": True, "what": True, "why": True, "invents": False, "ok": True},
        ),
        ("timeout", "Describe photo.png in one sentence.", {"what": False, "ok": False}),
        (
            "timeout",
            "The image shows a cat on a sofa, described by nlpconnect/vit-gpt2.",
            {"invents": True, "ok": False},
        ),
        (
            "skipped",
            "Speech recognition ended in timed_out, so the summary was skipped.",
            {"failed": True, "what": True, "why": True, "raw": True, "ok": True},
        ),
        (
            "one_of_two",
            "street.jpg has a car, a person and a traffic light. The scene description "
            "failed: the captioning server answered HTTP 503.",
            {"kept": True, "what": True, "why": True, "ok": True},
        ),
        (
            "upload",
            "IMG_2041.png was too large (30 MB; the limit is 25 MB), so I could not look at it.",
            {"failed": True, "what": True, "why": True, "ok": True},
        ),
    ],
)
def test_the_checks(case: str, answer: str, expected: dict[str, bool]) -> None:
    checks = judge(BY_NAME[case], answer)
    assert {k: checks[k] for k in expected} == expected
