"""How the answer's language model reads failed tasks: A/B against a real LLM.  Not CI.

    python -m benchmarks.answer_errors [--reps N] [--variants terse,words,plain]
                                       [--cases timeout,provider,…] [--temperature T]
                                       [--json out.json] [--quiet] | --table out.json

Needs an OpenAI-compatible server (``../shared/real-llm/start.sh qwen``):
``OPENAI_BASE_URL`` (default ``http://127.0.0.1:8080/v1``) and ``LLM_MODEL``
(default: the first model the server lists).

Each case is one realistic turn whose tasks failed (a model timed out, the
provider does not serve the model, an upload was refused as too large, one of
two tasks failed, all failed, a dependent task skipped).  It is answered by the
bot's own answer stage, :func:`core.response.generate_response` (the prompt the
bot builds, streamed through :class:`core.llm.LLM` with the answer's cap), once
per variant of how a failure is written for the model:

* ``terse`` – the terse form alone (``timed_out model='m' seconds=30.0``), what
  the prompt carried before each code had a meaning;
* ``words`` – the same with the code's name in words, nothing added
  (``timed out: model='m' seconds=30.0``);
* ``plain`` – what the prompt carries now (:func:`core.response.failure_text`):
  the code's plain meaning for the model before the terse form (``the model
  took too long to answer (timed_out model='m' seconds=30.0)``,
  :attr:`core.errors.TaskCode.meaning`).

The variant is the only difference.  ``plain`` gives the records as the
executor writes them (their ``errors`` data); ``terse`` and ``words`` write
each record's ``error`` text their way and leave ``errors`` empty, so the same
prompt code shows that text as it is (as it shows an older record's).  The
chat log's refused turn (the upload case) is written the same three ways; its
``plain`` is this script's own phrase (:data:`REFUSED_MEANING`): the chat log
keeps a refused turn's terse form.

Each answer is judged by fixed checks (regular expressions, case by case; the
patterns are in :data:`CASES`), never by taste:

* ``refuses`` – a refusal ("I'm sorry, but I can't assist …");
* ``failed`` – it says something did not work (fail, error, could not, unable,
  timed out, skipped, too large, not served …);
* ``what`` – it names what failed (the task, in any words, or the model);
* ``why`` – it names the cause (took too long, the provider, the file size …);
* ``invents`` – it states a result no task produced (a caption, a transcript,
  a picture, a file name not listed);
* ``raw`` – it copies a code or a field verbatim (``timed_out``, ``status=503``);
* ``ok`` – failed, what, and neither refuses nor invents.

Variants alternate within each repetition (ABBA order).  The temperature is
the bot's (none sent: llama.cpp's default, read from ``/props``) unless
``--temperature`` is given; the server samples, so each case runs ``--reps``
times per variant.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import sys
import time
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from core.config import AgentConfig  # noqa: E402
from core.errors import Code, ErrorCode, RunFailed, TaskCode  # noqa: E402
from core.llm import LLM  # noqa: E402
from core.response import answer_cap, generate_response  # noqa: E402
from core.types import (  # noqa: E402
    Resource,
    TaskError,
    TaskRecord,
    TaskStatus,
    Usage,
    terse_errors,
)

VARIANTS = ("terse", "words", "plain")

# (the upload case's plain variant) a refused upload's meaning, for the model
REFUSED_MEANING = {ErrorCode.FILE_TOO_LARGE: "the uploaded file was too large; it was refused"}


def written(variant: str, code: str, fields: dict[str, Any]) -> str:
    """One failure as the ``variant`` writes it."""
    form = " ".join([code, *(f"{k}={v!r}" for k, v in fields.items())])
    if variant == "words":
        return " ".join([f"{code.replace('_', ' ')}:", *(f"{k}={v!r}" for k, v in fields.items())])
    if variant == "plain":
        return f"{REFUSED_MEANING[ErrorCode(code)]} ({form})"
    return form


def _err(code: TaskCode, **fields: Any) -> TaskError:
    return TaskError(str(code), fields)


def _failed(
    id: int,
    task: str,
    model: str | None,
    errors: Sequence[TaskError],
    *,
    status: TaskStatus = TaskStatus.FAILED,
    args: dict[str, str] | None = None,
    dep: tuple[int, ...] = (),
    reason: str | None = None,
) -> TaskRecord:
    """A failed or skipped task's record as the executor writes it."""
    return TaskRecord(
        id=id, task=task, model=model, status=status, error=terse_errors(tuple(errors)),
        args=args or {}, dep=dep, reason=reason, errors=tuple(errors),
    )  # fmt: skip


@dataclass(frozen=True)
class Case:
    """One turn and the checks its answer is judged by (regexes, case-blind)."""

    name: str
    request: str
    records: tuple[TaskRecord, ...]
    what: str  # names what failed: the task in any words, or the model
    why: str  # names the cause
    invents: str  # states a result no task produced
    chat_log: tuple[tuple[str, str], ...] = ()
    refused: tuple[Code, dict[str, Any]] | None = None  # the chat log's refused turn
    files: tuple[Resource, ...] = ()
    kept: str | None = None  # (a task succeeded) reports its result
    note: str = ""


BLIP = "Salesforce/blip-image-captioning-large"
VIT = "nlpconnect/vit-gpt2-image-captioning"
DETR = "facebook/detr-resnet-50"
FLUX = "black-forest-labs/FLUX.1-dev"
WHISPER = "openai/whisper-large-v3"
BART = "facebook/bart-large-cnn"

# Words that make up a result no task produced, by what the request asked for.
SEEN = (
    r"(image|photo|picture|it) (shows|depicts|features|contains|displays)|"
    r"there (is|are) (a|an|two|three|several|some) |in the (image|photo|picture),? (there|we|you|a)"
)
# Said of a task that did not succeed: that its result was made.
MADE = (
    r"|\b(was|were|has been|have been) (successfully )?(generated|produced|created|transcribed|"
    r"summari[sz]ed|detected|captioned)|successfully|here (is|are) (the|your)"
)
HEARD = (
    r"the (meeting|speaker|recording|audio) (was|is|discuss|talk|cover|mention|focus)|"
    r"(discussed|covered|talked about|the main points|key points|transcript:|summary:)"
)

CASES: tuple[Case, ...] = (
    Case(
        name="timeout",
        request="Describe photo.png in one sentence.",
        records=(
            _failed(
                0,
                "image-to-text",
                VIT,
                [
                    _err(TaskCode.TIMED_OUT, model=BLIP, seconds=30.0),
                    _err(TaskCode.TIMED_OUT, model=VIT, seconds=30.0),
                ],
                args={"image": "photo.png"},
                reason="most downloaded image-to-text model",
            ),
        ),
        what=r"image[- ]to[- ]text|caption|descri|blip|vit-gpt2|the model",
        why=r"tim(e|ed)[ _-]?out|too long|took (too )?long|slow|time limit|30 ?s|respond in time",
        invents=SEEN + MADE,
        note="image-to-text timed out on both candidates",
    ),
    Case(
        name="provider",
        request="Generate an image of a red fox in the snow.",
        records=(
            _failed(
                0,
                "text-to-image",
                FLUX,
                [
                    _err(
                        TaskCode.PROVIDER_NOT_SERVING,
                        model=FLUX,
                        provider="hf-inference",
                        task="text-to-image",
                        choices=("fal-ai", "replicate"),
                    ),
                ],
                args={"text": "a red fox in the snow"},
                reason="the most liked text-to-image model",
            ),
        ),
        what=r"text[- ]to[- ]image|generat|flux|image",
        why=r"provider|not (served|serv|support|offer|availab)|unavailable|hf-inference",
        invents=r"\b\w+\.(png|jpe?g|webp)\b|!\[|https?://" + MADE,
        note="text-to-image: the provider does not serve the model",
    ),
    Case(
        name="upload",
        request="Did you look at the picture I sent? You didn't say anything about it.",
        records=(),
        chat_log=(("user", "What is in this picture?"),),
        refused=(
            ErrorCode.FILE_TOO_LARGE,
            {"file": "IMG_2041.png", "size": 31457280, "limit": 26214400},
        ),
        what=r"picture|image|photo|file|upload|IMG_2041",
        why=r"too (large|big)|size|\bMB\b|limit|31457280|30 ?MB|25 ?MB",
        invents=SEEN,
        note="the last turn was refused (file_too_large): no task ran this turn",
    ),
    Case(
        name="one_of_two",
        request="What objects are in street.jpg, and describe the scene in one sentence.",
        records=(
            TaskRecord(
                id=0,
                task="object-detection",
                model=DETR,
                status=TaskStatus.DONE,
                args={"image": "street.jpg"},
                reason="most downloaded object-detection model",
                result={
                    "boxes": [
                        {"label": "car", "score": 0.98, "box": [12, 40, 200, 160]},
                        {"label": "person", "score": 0.95, "box": [220, 30, 260, 170]},
                        {"label": "traffic light", "score": 0.91, "box": [300, 5, 320, 60]},
                    ]
                },
                files=("boxes-0.png",),
            ),
            _failed(
                1,
                "image-to-text",
                BLIP,
                [
                    _err(TaskCode.MODEL_HTTP, model=BLIP, status=503),
                ],
                args={"image": "street.jpg"},
                reason="most downloaded image-to-text model",
            ),
        ),
        files=(
            Resource(
                handle="boxes-0.png",
                kind="image",
                mime="image/png",
                path=Path("/nowhere/boxes-0.png"),
                sha256="0" * 64,
                size=10,
                source="generated",
                task_id=0,
            ),
        ),
        what=r"image[- ]to[- ]text|caption|descri|scene|blip",
        why=r"503|unavailable|server|service|http|busy|overload",
        invents=r"the scene (shows|is|depicts)|(a|the) (busy|quiet|city|urban) street (with|where|scene)",
        kept=r"\bcar\b.*\bperson\b|\bperson\b.*\bcar\b|traffic light",
        note="object-detection done; image-to-text got HTTP 503",
    ),
    Case(
        name="all_failed",
        request="Caption photo.png and list the objects in it.",
        records=(
            _failed(
                0,
                "image-to-text",
                VIT,
                [
                    _err(TaskCode.TIMED_OUT, model=BLIP, seconds=30.0),
                    _err(TaskCode.MODEL_HTTP, model=VIT, status=503),
                ],
                args={"image": "photo.png"},
                reason="most downloaded image-to-text model",
            ),
            _failed(
                1,
                "object-detection",
                DETR,
                [
                    _err(TaskCode.NO_PROVIDER, model=DETR, task="object-detection"),
                ],
                args={"image": "photo.png"},
                reason="most downloaded object-detection model",
            ),
        ),
        what=r"image[- ]to[- ]text|caption|object|detect|blip|detr|vit-gpt2",
        why=r"tim(e|ed)[ _-]?out|too long|slow|503|unavailable|provider|not (served|availab)|server",
        invents=SEEN
        + MADE
        + r"|objects (are|include|found)|\b(a|the) (cat|dog|person|car|tree)s?\b",
        note="image-to-text (timeout, then 503) and object-detection (no provider) both failed",
    ),
    Case(
        name="skipped",
        request="Transcribe meeting.wav and summarize it in two sentences.",
        records=(
            _failed(
                0,
                "automatic-speech-recognition",
                WHISPER,
                [
                    _err(TaskCode.TIMED_OUT, model=WHISPER, seconds=60.0),
                ],
                args={"audio": "meeting.wav"},
                reason="most downloaded speech recognition model",
            ),
            _failed(
                1,
                "summarization",
                None,
                [
                    _err(TaskCode.SKIPPED, dependency=0, task="automatic-speech-recognition"),
                ],
                status=TaskStatus.SKIPPED,
                args={"text": "<resource>-0"},
                dep=(0,),
            ),
        ),
        what=r"transcri|speech|recogni|whisper|summar",
        why=r"tim(e|ed)[ _-]?out|too long|took (too )?long|slow|time limit|60 ?s|depend|"
        r"skipp|because|without (a|the) transcri|not run|wasn't run|couldn't run|first",
        invents=HEARD + MADE,
        note="speech recognition timed out; the summary after it was skipped",
    ),
)

REFUSES = re.compile(
    r"\b(I'?m sorry|I am sorry|I apologi[sz]e),? but I (can(no|')t|am unable to|'m unable to) (assist|help)|"
    r"\bI can(no|')t (assist|help) with (that|this)|\bas an AI\b",
    re.IGNORECASE,
)
FAILED = re.compile(
    r"fail|error|could ?n[o']t|can(no|')t|unable|did ?n[o']t|was ?n[o']t|were ?n[o']t|"
    r"skipp|tim(e|ed)[ _-]?out|too (long|large|big)|not (available|served|supported|run)|"
    r"unavailable|refus|problem|issue|unfortunately|wasn't able|weren't able|no (result|caption)",
    re.IGNORECASE,
)
# A code or a field copied as it is: a snake_case code value, or key=value.
RAW = re.compile(
    "|".join(sorted({re.escape(c.value) for c in (*TaskCode, ErrorCode.FILE_TOO_LARGE)}))
    + r"|\b(model|seconds|status|provider|dependency|size|limit|file)=",
)


@dataclass
class Run:
    case: str
    variant: str
    rep: int
    answer: str
    fallback: bool
    seconds: float
    prompt_tokens: int
    completion_tokens: int
    checks: dict[str, bool] = field(default_factory=dict)


def judge(case: Case, answer: str) -> dict[str, bool]:
    """The checks on ``answer`` (the request's own words, which a weak model
    repeats, taken out first: they name the task, not a failure)."""
    answer = re.sub(re.escape(case.request), " ", answer, flags=re.IGNORECASE)

    def has(pattern: str) -> bool:
        return re.search(pattern, answer, re.IGNORECASE) is not None

    out = {
        "refuses": REFUSES.search(answer) is not None,
        "failed": FAILED.search(answer) is not None,
        "what": has(case.what),
        "why": has(case.why),
        "invents": has(case.invents),
        "raw": RAW.search(answer) is not None,
    }
    if case.kept is not None:
        out["kept"] = has(case.kept)
    out["ok"] = out["failed"] and out["what"] and not out["refuses"] and not out["invents"]
    return out


def variant_records(case: Case, variant: str) -> tuple[TaskRecord, ...]:
    """``plain``: the records as the executor writes them; else each one's
    ``error`` written the ``variant``'s way (``errors`` left empty: the
    prompt shows the text as it is)."""
    if variant == "plain":
        return case.records
    return tuple(
        replace(
            r,
            error="; ".join(written(variant, e.code, e.fields) for e in r.errors) or None,
            errors=(),
        )
        for r in case.records
    )


def variant_chat_log(case: Case, variant: str) -> list[tuple[str, str]]:
    log = list(case.chat_log)
    if case.refused is not None:
        code, fields = case.refused
        log.append(("assistant", written(variant, str(code), fields)))
    return log


def server_info(base_url: str) -> dict[str, Any]:
    root = base_url.rstrip("/").removesuffix("/v1")
    try:
        with urllib.request.urlopen(f"{root}/props", timeout=10) as r:
            props: dict[str, Any] = json.load(r)
    except OSError:
        return {}
    params = props.get("default_generation_settings", {}).get("params", {})
    return {
        "model_path": props.get("model_path"),
        "n_ctx": props.get("default_generation_settings", {}).get("n_ctx"),
        "default_temperature": params.get("temperature"),
        "top_p": params.get("top_p"),
        "top_k": params.get("top_k"),
    }


async def answer_once(llm: LLM, case: Case, variant: str, rep: int) -> Run:
    usage = Usage()
    pieces: list[str] = []

    async def delta(text: str) -> None:  # the bot streams its answer
        pieces.append(text)

    started = time.perf_counter()
    try:
        written = await generate_response(
            llm,
            request_text=case.request,
            chat_log=variant_chat_log(case, variant),
            records=variant_records(case, variant),
            files=case.files,
            usage=usage,
            max_tokens=answer_cap(AgentConfig().answer_max_tokens, llm.reasons),
            on_delta=delta,
        )
        text, fallback = written.text, written.fallback
    except RunFailed as e:
        text, fallback = f"[answer call failed: {e}]", True
    run = Run(
        case.name, variant, rep, text, fallback, time.perf_counter() - started,
        usage.prompt_tokens, usage.completion_tokens,
    )  # fmt: skip
    run.checks = judge(case, text) if not fallback else {}
    return run


CHECKS = ("ok", "failed", "what", "why", "kept", "refuses", "invents", "raw")


def table(runs: Sequence[Run], cases: Sequence[Case], variants: Sequence[str]) -> str:
    """Per case and variant: how many answers passed each check, of how many."""
    head = ["case", "variant", "n", "fallback", *CHECKS]
    rows = [head]
    for case in [*cases, None]:
        for v in variants:
            mine = [r for r in runs if r.variant == v and (case is None or r.case == case.name)]
            judged = [r for r in mine if not r.fallback]

            def count(check: str, judged: list[Run] = judged) -> str:
                having = [r for r in judged if check in r.checks]
                if not having:
                    return "-"
                return str(sum(r.checks[check] for r in having))

            rows.append([
                case.name if case else "ALL", v, str(len(mine)),
                str(len(mine) - len(judged)), *(count(c) for c in CHECKS),
            ])  # fmt: skip
    widths = [max(len(row[i]) for row in rows) for i in range(len(head))]
    return "\n".join(
        "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)) for row in rows
    )


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m benchmarks.answer_errors", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    p.add_argument("--reps", type=int, default=4, help="answers per case and variant")
    p.add_argument("--variants", default=",".join(VARIANTS))
    p.add_argument("--cases", default=",".join(c.name for c in CASES))
    p.add_argument("--temperature", type=float, default=None,
                   help="sent with each call (default: none, the server's own, as the bot)")  # fmt: skip
    p.add_argument("--timeout", type=float, default=300.0, help="seconds per answer")
    p.add_argument("--json", type=Path, help="write every answer and its checks here")
    p.add_argument("--table", type=Path,
                   help="only judge the answers of a --json file again and print the table")  # fmt: skip
    p.add_argument("--quiet", action="store_true", help="do not print the answers")
    return p.parse_args(argv)


def print_saved(path: Path) -> int:
    """The table of a run saved with ``--json`` (stopped early or not)."""
    saved = json.loads(path.read_text())
    runs = [Run(**r) for r in saved["runs"]]
    cases = [c for c in CASES if any(r.case == c.name for r in runs)]
    by_name = {c.name: c for c in cases}
    for r in runs:  # judged again: the checks as they are now
        r.checks = judge(by_name[r.case], r.answer) if not r.fallback else {}
    variants = [v for v in VARIANTS if any(r.variant == v for r in runs)]
    print(f"model {saved['model']}; temperature: {saved['temperature']}; {saved['server']}")
    print(table(runs, cases, variants))
    return 0


async def main_async(args: argparse.Namespace) -> int:
    if args.table:
        return print_saved(args.table)
    base_url = os.environ.get("OPENAI_BASE_URL", "http://127.0.0.1:8080/v1")
    variants = [v for v in args.variants.split(",") if v]
    unknown = set(variants) - set(VARIANTS)
    if unknown:
        raise SystemExit(f"unknown variants: {sorted(unknown)}")
    by_name = {c.name: c for c in CASES}
    cases = [by_name[n] for n in args.cases.split(",") if n]
    llm = LLM(
        api_key=os.environ.get("OPENAI_API_KEY", ""),
        base_url=base_url,
        model=os.environ.get("LLM_MODEL") or None,
        temperature=args.temperature,
        timeout=args.timeout,
        max_retries=1,
    )
    info = server_info(base_url)
    model = await llm.resolve_model()
    sent = "none sent (the bot's default)" if args.temperature is None else args.temperature
    print(f"model {model} at {base_url}; temperature: {sent}; server: {info}")
    print(f"load: {os.getloadavg()}")
    runs: list[Run] = []

    def save() -> None:  # after each answer: a run stopped early keeps its answers
        if args.json:
            args.json.write_text(json.dumps({
                "model": model, "base_url": base_url, "temperature": args.temperature,
                "server": info, "cases": {c.name: c.note for c in cases},
                "runs": [r.__dict__ for r in runs],
            }, indent=1, ensure_ascii=False))  # fmt: skip

    try:
        for rep in range(args.reps):
            order = variants if rep % 2 == 0 else variants[::-1]  # ABBA across reps
            for case in cases:
                for v in order:
                    run = await answer_once(llm, case, v, rep)
                    runs.append(run)
                    save()
                    flags = " ".join(k for k, on in run.checks.items() if on)
                    print(f"[{case.name} / {v} / rep {rep}] {run.seconds:.1f} s, "
                          f"{run.completion_tokens} tokens{' FALLBACK' if run.fallback else ''}; "
                          f"checks: {flags}", flush=True)  # fmt: skip
                    if not args.quiet:
                        print("    " + run.answer.replace("\n", "\n    "), flush=True)
    finally:
        await llm.aclose()
    print()
    print(table(runs, cases, variants))
    print(f"load: {os.getloadavg()}")
    return 0


def main(argv: list[str] | None = None) -> int:
    return asyncio.run(main_async(parse_args(argv)))


if __name__ == "__main__":
    raise SystemExit(main())
