"""Turning a task's free text into the arguments a hosted-inference call takes.

The planner hands every task one text; some hosted tasks want it in parts: a
question and its context, a column table, a text to translate with the
languages (in the spelling the model family expects).  Pure functions with
no I/O; text that cannot be split raises :class:`core.errors.TaskFailed`
(not retryable: the input is at fault).
"""

from __future__ import annotations

import csv
import io
import re
from dataclasses import dataclass

from core.errors import TaskCode, TaskFailed

_QA_Q_FIRST = re.compile(r"^\s*question\s*:\s*(?P<q>.+?)\s+context\s*:\s*(?P<c>.+)$", re.I | re.S)
_QA_C_FIRST = re.compile(r"^\s*context\s*:\s*(?P<c>.+?)\s+question\s*:\s*(?P<q>.+)$", re.I | re.S)


def split_question(text: str) -> tuple[str, str]:
    """(question, context) from "question: … context: …", "question\\ncontext"
    or "Question? Context…"."""
    m = _QA_Q_FIRST.match(text) or _QA_C_FIRST.match(text)
    if m:
        question, context = m["q"], m["c"]
    elif "\n" in text.strip():
        question, _, context = text.strip().partition("\n")
    elif "?" in text:
        question, _, context = text.partition("?")
        question += "?"
    else:
        question, context = text, ""
    question, context = question.strip(), context.strip()
    if not question or not context:
        raise TaskFailed(TaskCode.QA_NEEDS_CONTEXT, retryable=False, final=True)
    return question, context


def csv_table(text: str) -> dict[str, list[str]]:
    """A CSV text (header row first; comma, semicolon or tab) as the column
    dict the tabular API takes."""
    first = text.strip().splitlines()[0] if text.strip() else ""
    delimiter = next((d for d in (",", ";", "\t") if d in first), ",")
    rows = [
        [cell.strip() for cell in row]
        for row in csv.reader(io.StringIO(text.strip()), delimiter=delimiter)
        if any(cell.strip() for cell in row)
    ]
    if len(rows) < 2 or any(len(r) != len(rows[0]) for r in rows):
        raise TaskFailed(TaskCode.TABLE_NEEDED, retryable=False, final=True)
    return {name: [r[i] for r in rows[1:]] for i, name in enumerate(rows[0])}


# Language name → (ISO 639-1 for M2M100, NLLB code, mBART-50 code).
_LANGS: dict[str, tuple[str, str, str]] = {
    "english": ("en", "eng_Latn", "en_XX"),
    "french": ("fr", "fra_Latn", "fr_XX"),
    "german": ("de", "deu_Latn", "de_DE"),
    "spanish": ("es", "spa_Latn", "es_XX"),
    "italian": ("it", "ita_Latn", "it_IT"),
    "portuguese": ("pt", "por_Latn", "pt_XX"),
    "dutch": ("nl", "nld_Latn", "nl_XX"),
    "russian": ("ru", "rus_Cyrl", "ru_RU"),
    "chinese": ("zh", "zho_Hans", "zh_CN"),
    "japanese": ("ja", "jpn_Jpan", "ja_XX"),
    "korean": ("ko", "kor_Hang", "ko_KR"),
    "arabic": ("ar", "arb_Arab", "ar_AR"),
    "hindi": ("hi", "hin_Deva", "hi_IN"),
}
_INSTRUCTION = re.compile(r"^\s*translate\b(?P<instr>[^:\n]*)[:\n]\s*(?P<body>.+)$", re.I | re.S)
_INLINE = re.compile(
    r"^\s*translate\s+(?P<body>.+?)\s+(?P<instr>(?:from\s+\w+\s+)?(?:to|into)\s+\w+)\s*[.!]?\s*$",
    re.I | re.S,
)


@dataclass(frozen=True, slots=True)
class TranslationRequest:
    text: str
    src: str | None = None  # language names, lower case
    tgt: str | None = None


def parse_translation(text: str) -> TranslationRequest:
    """Strip a leading "Translate (from X) to Y:" instruction and keep the languages."""
    m = _INSTRUCTION.match(text) or _INLINE.match(text)
    if not m:
        return TranslationRequest(text.strip())
    instr, body = m["instr"], m["body"].strip().strip("\"'“”")
    src = re.search(r"\bfrom\s+(\w+)", instr, re.I)
    tgt = re.search(r"\b(?:to|into)\s+(\w+)", instr, re.I)
    return TranslationRequest(
        body or text.strip(),
        src[1].lower() if src else None,
        tgt[1].lower() if tgt else None,
    )


@dataclass(frozen=True, slots=True)
class TranslationArgs:
    """What ``AsyncInferenceClient.translation`` takes besides the model."""

    text: str
    src_lang: str | None = None  # a language code in the model family's spelling
    tgt_lang: str | None = None


def translation_args(text: str, model_id: str) -> TranslationArgs:
    """The text and language codes to send ``model_id`` for a translation request.

    T5 models read the languages from a prefix in the text; many-to-many
    models (M2M100, NLLB, mBART-50) need both codes; any other model gets the
    bare text, since it translates one fixed pair.
    """
    req = parse_translation(text)
    model = model_id.lower()
    text, src_lang, tgt_lang = req.text, None, None
    src, tgt = req.src or "english", req.tgt
    if tgt in _LANGS and src in _LANGS:
        if re.search(r"(^|/)(flan-)?t5", model):
            # T5 reads the task from a prefix: "translate English to German: …".
            text = f"translate {src.title()} to {tgt.title()}: {req.text}"
        else:
            # Many-to-many models need both codes, each family in its own spelling.
            column = next(
                (i for i, k in enumerate(("m2m100", "nllb", "mbart")) if k in model), None
            )
            if column is not None:
                src_lang, tgt_lang = _LANGS[src][column], _LANGS[tgt][column]
    return TranslationArgs(text, src_lang, tgt_lang)
