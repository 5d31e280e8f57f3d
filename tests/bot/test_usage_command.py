"""``python -m bot usage`` and ``python -m bot config``: the tables and
settings an admin sees at the terminal, from a real SQLite store."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from bot.__main__ import _parser, main
from bot.config_command import run as config_run
from bot.settings import Settings, get_settings
from bot.usage_command import run as usage_run
from core.server_settings import ServerKey, ServerSettingsService
from core.store import Database
from core.store.server_settings import ServerSettingsStore
from core.store.usage import UsageStore
from core.usage import ModelCall, TurnUsage

NOW = datetime.now(UTC)
DETR = ModelCall("object-detection", "facebook/detr-resnet-50", "done", 1.25, "hf-inference")
SDXL = ModelCall("text-to-image", "stabilityai/sdxl", "failed", 2.0, "fal-ai", cost_usd=0.0125)


def turn(
    rid: str, user: str, server: str, days_ago: float, calls: tuple[ModelCall, ...]
) -> TurnUsage:
    return TurnUsage(
        request_id=rid,
        at=NOW - timedelta(days=days_ago),
        platform="discord",
        server=server,
        conversation=f"discord:{server}/general",
        user_id=user,
        llm_model="openai/gpt-oss-120b",
        llm_host="router.huggingface.co",
        llm_calls=3,
        prompt_tokens=1000,
        completion_tokens=250,
        model_calls=calls,
    )


@pytest.fixture
async def settings(tmp_path: Path) -> AsyncIterator[Settings]:
    catalog = tmp_path / "catalog.jsonl"
    catalog.write_text(
        "".join(
            json.dumps({"id": m, "task": t, "downloads": d}) + "\n"
            for m, t, d in [
                ("facebook/detr-resnet-50", "object-detection", 900),
                ("hustvl/yolos-tiny", "object-detection", 500),
                ("stabilityai/sdxl", "text-to-image", 800),
            ]
        ),
        encoding="utf-8",
    )
    s = Settings(
        _env_file=None,  # type: ignore[call-arg]
        database_url=f"sqlite+aiosqlite:///{tmp_path / 'bot.db'}",
        media_dir=tmp_path / "media",
        model_catalog=catalog,
        llm_model="openai/gpt-oss-120b",
        hf_token="hf_test",
    )
    async with Database(s.store.database_url) as db:
        await db.upgrade()
        store = UsageStore(db)
        await store.record(turn("r1", "alice", "111", 0.1, (DETR, SDXL)))
        await store.record(turn("r2", "bob", "111", 1.5, (DETR,)))
        await store.record(turn("r3", "alice", "222", 10, ()))
    yield s


async def usage(settings: Settings, *argv: str) -> int:
    return await usage_run(_parser().parse_args(["usage", *argv]), settings)


async def config(settings: Settings, *argv: str) -> int:
    return await config_run(_parser().parse_args(["config", *argv]), settings)


async def test_usage_by_server(settings: Settings, capsys: pytest.CaptureFixture[str]) -> None:
    assert await usage(settings) == 0
    out = capsys.readouterr().out.splitlines()
    assert out == [
        "usage by server, all time",
        "server       requests  errors  llm calls  prompt tok  completion tok  model calls  "
        "failed  model s       cost",
        "-----------  --------  ------  ---------  ----------  --------------  -----------  "
        "------  -------  ---------",
        "discord:111         2       0          6       2,000             500            3  "
        "     1      4.5  ≥ $0.0125",
        "discord:222         1       0          3       1,000             250            0  "
        "     0      0.0    unknown",
        "-----------  --------  ------  ---------  ----------  --------------  -----------  "
        "------  -------  ---------",
        "total               3       0          9       3,000             750            3  "
        "     1      4.5  ≥ $0.0125",
        "cost: only what a provider priced is counted; Hugging Face's router and Inference "
        "Providers report no price per call (see hf.co/settings/billing)",
    ]


async def test_usage_by_user_on_one_server_over_a_period(
    settings: Settings, capsys: pytest.CaptureFixture[str]
) -> None:
    assert await usage(settings, "--server", "discord:111", "--since", "1d", "--by", "user") == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("usage by user, on discord:111, since ")
    rows = [line.split() for line in out[3:-3]]
    assert rows == [
        ["discord:alice", "1", "0", "3", "1,000", "250", "2", "1", "3.2", "≥", "$0.0125"]
    ]


async def test_usage_by_model_of_one_user(
    settings: Settings, capsys: pytest.CaptureFixture[str]
) -> None:
    assert await usage(settings, "--user", "discord:bob", "--by", "model") == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line.split() for line in lines[3:5]] == [
        [
            "llm",
            "openai/gpt-oss-120b",
            "router.huggingface.co",
            "1",
            "3",
            "—",
            "1,000",
            "250",
            "—",
            "unknown",
        ],
        [
            "task",
            "facebook/detr-resnet-50",
            "hf-inference",
            "—",
            "1",
            "0",
            "—",
            "—",
            "1.2",
            "unknown",
        ],
    ]


async def test_usage_with_nothing_recorded(
    settings: Settings, capsys: pytest.CaptureFixture[str]
) -> None:
    assert await usage(settings, "--server", "slack:T1") == 0
    assert capsys.readouterr().out.splitlines() == [
        "usage by server, on slack:T1, all time",
        "no usage recorded for this selection",
    ]


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (("--since", "last week"), "error: 'last week' is not a period: use e.g. 30m"),
        (("--server", "111"), "error: '111' is not a server: write PLATFORM:ID"),
        (
            ("--server", "slack:T1", "--user", "discord:bob"),
            "error: --user discord:bob is not on slack",
        ),
    ],
)
async def test_usage_refuses_bad_arguments(
    settings: Settings, capsys: pytest.CaptureFixture[str], argv: tuple[str, ...], message: str
) -> None:
    assert await usage(settings, *argv) == 2
    captured = capsys.readouterr()
    assert captured.err.startswith(message)
    assert captured.out == ""


async def test_config_set_show_unset(
    settings: Settings, capsys: pytest.CaptureFixture[str]
) -> None:
    assert await config(settings, "set", "discord:111", "language", "Brazilian", "Portuguese") == 0
    assert (
        await config(
            settings, "set", "discord:111", "pinned_model.object-detection", "hustvl/yolos-tiny"
        )
        == 0
    )
    assert await config(settings, "set", "discord:111", "requests_per_user_per_day", "15") == 0
    capsys.readouterr()
    assert await config(settings, "show", "discord:111") == 0
    shown = capsys.readouterr().out.splitlines()
    assert shown[0] == "settings of discord:111:"
    assert [line.split(None, 1) for line in shown[1:]] == [
        ["llm_model", "(deployment: openai/gpt-oss-120b)"],
        ["model_selection", "(deployment: llm)"],
        ["allowed_tasks", "(deployment: every task the deployment runs)"],
        ["language", "Brazilian Portuguese"],
        ["requests_per_user_per_minute", "(deployment: 20)"],
        ["requests_per_user_per_day", "15"],
        ["llm_tokens_per_user_per_day", "(deployment: 1000000)"],
        ["requests_per_server_per_minute", "(deployment: 60)"],
        ["requests_per_server_per_day", "(deployment: 2000)"],
        ["llm_tokens_per_server_per_day", "(deployment: 10000000)"],
        ["pinned_model.object-detection", "hustvl/yolos-tiny"],
    ]
    assert await config(settings, "unset", "discord:111", "language") == 0
    assert await config(settings, "show") == 0
    assert capsys.readouterr().out.splitlines()[-1] == (
        "discord:111: pinned_models=object-detection: hustvl/yolos-tiny, "
        "requests_per_user_per_day=15"
    )
    async with Database(settings.store.database_url) as db:
        stored = await ServerSettingsService(ServerSettingsStore(db)).get(
            ServerKey("discord", "111")
        )
    assert stored.stored() == {
        "pinned_models": {"object-detection": "hustvl/yolos-tiny"},
        "requests_per_user_per_day": 15,
    }


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (
            ("set", "discord:111", "allowed_tasks", "text-to-image,brew-tea"),
            "error: allowed_tasks: unknown task 'brew-tea'; the tasks are: ",
        ),
        (
            ("set", "discord:111", "pinned_model.text-to-image", "hustvl/yolos-tiny"),
            "error: hustvl/yolos-tiny does not serve text-to-image in the model catalog (its most downloaded models for text-to-image: stabilityai/sdxl)",
        ),
        (("set", "discord:111", "colour", "blue"), "error: unknown setting 'colour'"),
        (
            ("unset", "discord:111", "pinned_model.text-to-image"),
            "error: no model is pinned for text-to-image",
        ),
        (("show", "nowhere"), "error: 'nowhere' is not a server"),
    ],
)
async def test_config_refuses_clearly_and_stores_nothing(
    settings: Settings, capsys: pytest.CaptureFixture[str], argv: tuple[str, ...], message: str
) -> None:
    assert await config(settings, *argv) == 2
    assert capsys.readouterr().err.startswith(message)
    assert await config(settings, "show") == 0
    assert capsys.readouterr().out.strip() == (
        "no server has settings of its own; every server uses the deployment's"
    )


def test_both_commands_through_main(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """``python -m bot`` registers both and gives them the database."""
    monkeypatch.chdir(tmp_path)  # no .env
    monkeypatch.setenv("DATABASE_URL", f"sqlite+aiosqlite:///{tmp_path / 'main.db'}")
    monkeypatch.setenv("MEDIA_DIR", str(tmp_path / "media"))
    get_settings.cache_clear()
    try:
        assert main(["config", "set", "cli:local", "model_selection", "downloads"]) == 0
        assert "model_selection                 downloads" in capsys.readouterr().out
        assert main(["usage", "--by", "channel"]) == 0
        assert capsys.readouterr().out.splitlines() == [
            "usage by channel, all time",
            "no usage recorded for this selection",
        ]
        monkeypatch.setenv("DATABASE_URL", "mysql://nobody@nowhere/db")
        get_settings.cache_clear()
        assert main(["usage"]) == 2  # checked like every command that opens the database
        assert "DATABASE_URL" in capsys.readouterr().err
    finally:
        get_settings.cache_clear()
