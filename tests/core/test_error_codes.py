"""Errors carry data: every RunFailed / InputRejected the code builds (and
their subclasses QuotaExceeded, SettingError, BudgetExhausted) names a code
(``ErrorCode.X`` in the core, ``ChatCode.X`` or ``ErrorCode.X`` in the
adapters), and every TaskFailed a ``TaskCode.X``; none is built from a
sentence any more, so each sentence is in one table
(adapters/chat/error_words.py, adapters/chat/messages.py)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from adapters.chat.messages import error_text
from core.errors import ErrorCode, InputRejected, RunFailed, TaskCode
from core.llm import LLM
from core.ratelimit import QuotaExceeded
from core.server_settings import ServerKey, ServerSettings, SettingError
from core.types import REPLY_ADAPTER, Reply, ReplyStatus, Usage
from tests.fakes.loopback import free_port

ROOT = Path(__file__).parents[2]
BUILT = {
    "InputRejected",
    "RunFailed",
    "BudgetExhausted",
    "QuotaExceeded",
    "SettingError",
    "TaskFailed",
}
CODES = {"ErrorCode", "ChatCode", "TaskCode"}


def is_code(node: ast.expr | None) -> bool:
    """``ErrorCode.X``, ``ChatCode.X``, or ``A if … else B`` of those."""
    if isinstance(node, ast.IfExp):
        return is_code(node.body) and is_code(node.orelse)
    return (
        isinstance(node, ast.Attribute)
        and isinstance(node.value, ast.Name)
        and node.value.id in CODES
    )


def own_nodes(scope: ast.AST) -> list[ast.AST]:
    """The nodes of ``scope`` outside the functions defined in it."""
    found: list[ast.AST] = []
    todo = list(ast.iter_child_nodes(scope))
    while todo:
        node = todo.pop()
        found.append(node)
        if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
            todo.extend(ast.iter_child_nodes(node))
    return found


def assigned(nodes: list[ast.AST]) -> dict[str, list[ast.expr]]:
    """The values given to each plain name (``a = …``, ``a, b = …, …``;
    a name unpacked from anything else gets an unknown value)."""
    values: dict[str, list[ast.expr]] = {}
    for node in nodes:
        if not isinstance(node, ast.Assign | ast.AnnAssign) or node.value is None:
            continue
        targets = node.targets if isinstance(node, ast.Assign) else [node.target]
        for target in targets:
            if isinstance(target, ast.Name):
                values.setdefault(target.id, []).append(node.value)
            elif isinstance(target, ast.Tuple) and isinstance(node.value, ast.Tuple):
                for t, v in zip(target.elts, node.value.elts, strict=False):
                    if isinstance(t, ast.Name):
                        values.setdefault(t.id, []).append(v)
            else:
                for inner in ast.walk(target):
                    if isinstance(inner, ast.Name):
                        values.setdefault(inner.id, []).append(target)
    return values


def uncoded_lines(source: str) -> list[int]:
    """The lines of ``source`` that build an error whose first argument is
    not a code (a sentence, an f-string, a variable given anything but
    codes in its function)."""
    tree = ast.parse(source)
    scopes = [
        tree,
        *(
            n
            for n in ast.walk(tree)
            if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda)
        ),
    ]
    lines = []
    for scope in scopes:
        nodes = own_nodes(scope)
        values = assigned(nodes)
        for node in nodes:
            if not isinstance(node, ast.Call):
                continue
            func = node.func
            name = func.id if isinstance(func, ast.Name) else getattr(func, "attr", None)
            if name not in BUILT:
                continue
            first = node.args[0] if node.args else None
            coded = is_code(first) or (
                isinstance(first, ast.Name)
                and bool(values.get(first.id))
                and all(is_code(v) for v in values[first.id])
            )
            if not coded:
                lines.append(node.lineno)
    return sorted(lines)


def uncoded(folder: str) -> list[str]:
    return [
        f"{path.relative_to(ROOT)}:{line}"
        for path in sorted((ROOT / folder).rglob("*.py"))
        for line in uncoded_lines(path.read_text())
    ]


def test_the_core_builds_no_error_from_a_sentence() -> None:
    assert uncoded("core") == []


def test_the_adapters_build_no_error_from_a_sentence() -> None:
    assert uncoded("adapters") == []


def test_the_check_finds_sentences_and_passes_codes() -> None:
    source = (
        'raise InputRejected(f"{name} is empty")\n'
        'raise RunFailed("no plan")\n'
        "raise errors.RunFailed(message)\n"
        "raise InputRejected(ErrorCode.FILE_EMPTY, file=name)\n"
        "raise InputRejected(ChatCode.FILE_MISSING, file=name)\n"
        'raise SettingError(f"unknown setting {key!r}")\n'
        "return QuotaExceeded(text, float(wait))\n"
        "raise SettingError(ErrorCode.SETTING_NOT_PINNED, task=pin)\n"
        "return QuotaExceeded(ErrorCode.QUOTA_TOKENS, **fields)\n"
        'raise TaskFailed(f"model {m} returned no text", retryable=False)\n'
        "raise TaskFailed(TaskCode.OUTPUT_MISSING, model=m, part='text')\n"
        "def f(x):\n"
        "    code = ErrorCode.LLM_FAILED\n"
        "    if x:\n"
        "        code, n = ErrorCode.LLM_HTTP, 3\n"
        "    return RunFailed(code, host=x)\n"
        "def g(x):\n"
        "    code = ErrorCode.LLM_FAILED if x else f'{x} failed'\n"
        "    raise RunFailed(code)\n"
    )
    assert uncoded_lines(source) == [1, 2, 3, 6, 7, 10, 19]


def test_every_subclass_of_the_coded_errors_is_checked() -> None:
    """A new subclass of InputRejected or RunFailed joins BUILT (or the check
    above would let it take a sentence)."""
    found: set[str] = set()
    for path in [*(ROOT / "core").rglob("*.py"), *(ROOT / "adapters").rglob("*.py")]:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef) and any(
                getattr(b, "id", getattr(b, "attr", None)) in BUILT for b in node.bases
            ):
                found.add(node.name)
    assert found <= BUILT, found - BUILT


def test_a_quota_refusal_carries_its_wait() -> None:
    err = QuotaExceeded(ErrorCode.QUOTA_REQUESTS, limit=2, period="minute", seconds=40)
    assert isinstance(err, InputRejected)
    assert err.retry_after == 40.0
    assert error_text(err) == "You have used your 2 requests this minute; try again in 40 s."
    assert str(err) == "quota_requests limit=2 period='minute' seconds=40"  # logs: no words


def test_a_setting_refused_names_its_code_and_what_is_accepted() -> None:
    with pytest.raises(SettingError) as info:
        ServerSettings().with_value("colour", "red")
    assert info.value.code is ErrorCode.SETTING_UNKNOWN
    assert info.value.fields["key"] == "colour"
    assert "llm_model" in info.value.fields["choices"]
    with pytest.raises(SettingError) as info:
        ServerSettings().with_value("pinned_model.nope", "m")
    assert (info.value.code, info.value.fields["value"]) == (ErrorCode.UNKNOWN_TASK, "nope")
    with pytest.raises(SettingError) as info:
        ServerKey.parse("guild")
    assert (info.value.code, info.value.fields) == (
        ErrorCode.SETTING_NOT_SERVER,
        {"value": "guild"},
    )


async def test_a_language_model_failure_carries_where_the_server_is() -> None:
    port = free_port()
    llm = LLM(
        api_key="sk-test",
        model="m",
        max_retries=0,
        timeout=10,
        base_url=f"http://127.0.0.1:{port}/v1",
    )
    try:
        with pytest.raises(RunFailed) as info:
            await llm.complete([{"role": "user", "content": "hi"}], usage=Usage())
    finally:
        await llm.aclose()
    assert info.value.code is ErrorCode.LLM_UNREACHABLE
    assert info.value.fields == {
        "host": f"127.0.0.1:{port}",
        "setting": "OPENAI_BASE_URL",
        "address": f"http://127.0.0.1:{port}/v1",
        "hostname": "127.0.0.1",
        "reach": "local",
    }


def test_a_refused_reply_keeps_its_error_as_data_through_json() -> None:
    err = QuotaExceeded(ErrorCode.QUOTA_TOKENS, place="server", limit=100, seconds=90)
    reply = Reply("", status=ReplyStatus.REFUSED).with_error(err)
    assert (reply.text, reply.error_code, reply.error_fields) == (
        str(err),
        "quota_tokens",
        {"place": "server", "limit": 100, "seconds": 90},
    )
    again = REPLY_ADAPTER.validate_json(REPLY_ADAPTER.dump_json(reply))
    assert again == reply
    failure = again.failure
    assert isinstance(failure, InputRejected)
    assert (failure.code, failure.fields, error_text(failure)) == (
        err.code,
        err.fields,
        "This server has used its daily budget of 100 LLM tokens; it resets at 00:00 UTC "
        "(in 2 min).",
    )


def test_a_failed_reply_rebuilds_a_run_failure_and_tuples_come_back_as_lists() -> None:
    err = RunFailed(ErrorCode.UNKNOWN_TASK, value="x", choices=("a", "b"))
    reply = REPLY_ADAPTER.validate_python(
        REPLY_ADAPTER.dump_python(Reply("", status=ReplyStatus.FAILED).with_error(err), mode="json")
    )
    assert isinstance(reply.failure, RunFailed)
    assert error_text(reply.failure) == error_text(err)
    assert reply.text == str(err)  # the terse form, kept as it was written


def test_replies_without_an_error_code_read_as_before() -> None:
    old = REPLY_ADAPTER.validate_json(b'{"text": "Over the quota.", "status": "refused"}')
    assert (old.error_code, old.error_fields, old.failure) == ("", {}, None)
    answered = Reply("hello").with_error(RunFailed(ErrorCode.STORE_DOWN))
    assert answered.failure is None  # not refused or failed: no error to show
    unknown = Reply("x", status=ReplyStatus.FAILED, error_code="from_a_newer_version")
    assert unknown.failure is None


# ------------------------------------------------ the words live in the adapters

# Where every sentence a person reads about an error, a note or a fallback
# answer's reason is written (the core says codes and data).
WORDED_IN = ("adapters/chat/error_words.py", "adapters/chat/messages.py")
PHRASE_CHARS = 16  # a fixed piece of a sentence this long is worth finding


def phrases(source: str) -> set[str]:
    """The fixed pieces of the sentences in ``source``: its string constants
    and the literal parts of its f-strings, of :data:`PHRASE_CHARS` or more
    (docstrings left out), stripped of the punctuation around them."""
    found: set[str] = set()
    for text in strings(source):
        piece = text.strip(" .;:,()'\"\n")
        if len(piece) >= PHRASE_CHARS:
            found.add(piece)
    return found


def strings(source: str) -> list[str]:
    """Every string constant of ``source`` but its docstrings (an f-string
    gives its literal parts)."""
    tree = ast.parse(source)
    docstrings = {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
        and node.body
        and isinstance(node.body[0], ast.Expr)
        and isinstance(node.body[0].value, ast.Constant)
    }
    return [
        node.value
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant)
        and isinstance(node.value, str)
        and id(node) not in docstrings
    ]


def worded_in_core(folder: Path, words: set[str]) -> list[str]:
    """The strings of ``folder``'s modules that hold one of ``words``."""
    return [
        f"{path.relative_to(folder.parent)}: {phrase!r}"
        for path in sorted(folder.rglob("*.py"))
        for text in strings(path.read_text())
        for phrase in sorted(words)
        if phrase in text
    ]


# Words for the operator, not a person in the chat (a ConfigError, a log
# line, the doctor's reason a task is not served), that share a few words
# with a task failure's by chance.
OPERATOR_WORDS = {
    "core/catalog_refresh.py: 'refused the credentials (HTTP'",
    "core/experts/providers.py: 'no provider serves'",
    "core/experts/remote.py: 'no inference provider serves'",
}


def tables_of_codes(source: str) -> list[int]:
    """The lines of dict literals keyed by codes (``{ErrorCode.X: …}``): a
    table from codes to words, or to anything worded per code."""
    return [
        node.lineno
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.Dict) and any(is_code(k) for k in node.keys if k is not None)
    ]


def test_the_core_words_no_error() -> None:
    """No sentence of the adapters' tables (error codes, notes, the fallback
    answer's first line, the fixed messages) is written in the core too, and
    the core keeps no table keyed by codes."""
    words = set().union(*(phrases((ROOT / p).read_text()) for p in WORDED_IN))
    assert len(words) > 80  # the tables were read
    assert set(worded_in_core(ROOT / "core", words)) - OPERATOR_WORDS == set()
    tables = {
        str(path.relative_to(ROOT)): tables_of_codes(path.read_text())
        for path in sorted((ROOT / "core").rglob("*.py"))
    }
    assert {path: lines for path, lines in tables.items() if lines} == {}


def test_a_task_codes_meaning_is_a_short_phrase_for_the_model() -> None:
    """The one place the core words a code: each :class:`TaskCode`'s
    ``meaning``, the few plain words the answer prompt shows the language
    model before the terse form (small models said what failed more often
    with it: docs/answer-errors.md).  It is prompt text, like the system prompt,
    not a sentence for a person: declared with its code (no table), a short
    phrase with none of the error's data (no model, number or setting: those
    stay in the fields, which the terse form carries), and, like every
    string of the core, sharing no piece of the adapters' words (above)."""
    for code in TaskCode:
        meaning = code.meaning
        assert meaning and len(meaning) <= 70 and len(meaning.split()) <= 12, code
        assert meaning == meaning.strip() and meaning[0].islower(), code
        assert not any(c.isdigit() or c in '{}=_"/' for c in meaning), code


def test_the_core_imports_no_adapter() -> None:
    imports = [
        f"{path.relative_to(ROOT)}:{node.lineno}"
        for path in sorted((ROOT / "core").rglob("*.py"))
        for node in ast.walk(ast.parse(path.read_text()))
        if (isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "adapters")
        or (
            isinstance(node, ast.Import)
            and any(a.name.split(".")[0] == "adapters" for a in node.names)
        )
    ]
    assert imports == []


def test_the_word_checks_find_what_they_look_for(tmp_path: Path) -> None:
    words = phrases(
        'X = "I\'m restarting right now; please send that again."\n'
        "def f(n):\n"
        '    """A docstring is no sentence for a person."""\n'
        '    return f"{n} is larger than the limit of {n}"\n'
    )
    assert words == {
        "I'm restarting right now; please send that again",
        "is larger than the limit of",
    }
    core = tmp_path / "core"
    core.mkdir()
    (core / "a.py").write_text(
        'def refuse():\n    return f"{name} is larger than the limit of 25 MB"\n'
    )
    (core / "b.py").write_text('"""I\'m restarting right now; please send that again."""\n')
    found = worded_in_core(core, words)
    assert [line.split(": ", 1)[1] for line in found] == ["'is larger than the limit of'"]
    assert tables_of_codes("W = {ErrorCode.FILE_EMPTY: lambda f: f['file']}\nV = {'a': 1}\n") == [1]
