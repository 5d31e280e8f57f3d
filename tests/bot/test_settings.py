"""Settings: `.env.example` mirrors them key for key; env parsing as documented;
each flat variable lands in its group."""

from __future__ import annotations

import dataclasses
import inspect
import re
from pathlib import Path
from typing import get_args

import pytest
from pydantic import ValidationError

from adapters.discord.access import AccessPolicy
from adapters.discord.config import DiscordConfig
from adapters.slack.config import SlackConfig
from bot.app import agent_config, task_timeouts
from bot.settings import (
    ENV_NAMES,
    GROUPS,
    LLMSettings,
    Settings,
    Target,
    env_name,
    env_names,
)
from core.config import AgentConfig
from core.llm import LLM
from core.tasks import TaskTimeouts
from core.types import MAX_ATTACHMENT_BYTES

ROOT = Path(__file__).resolve().parents[2]


def example_keys() -> set[str]:
    text = (ROOT / ".env.example").read_text(encoding="utf-8")
    return set(re.findall(r"^([A-Z][A-Z0-9_]*)=", text, flags=re.MULTILINE))


def setting_keys() -> set[str]:
    return set(env_names(legacy=False))


def test_env_example_mirrors_settings() -> None:
    assert example_keys() == setting_keys()


def test_env_example_shows_every_group() -> None:
    shown = example_keys()
    for group, model in GROUPS.items():
        names = {env for env, (g, _) in ENV_NAMES.items() if g == group}
        assert len(names) >= len(model.model_fields), group
        missing = {env for env in names if env != "DISCORD_TOKEN"} - shown
        assert not missing, (group, missing)


def test_lists_tokens_and_empty_values_from_the_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("DISCORD_TOKEN", "secret-token")
    monkeypatch.setenv("DISCORD_DEV_GUILD_IDS", "1, 2")
    monkeypatch.setenv("LOCAL_MODELS_DIR", "")  # empty means unset, not "."
    monkeypatch.setenv("INFERENCE_MODE", "hybrid")
    s = Settings(_env_file=None)  # type: ignore[call-arg]
    assert s.discord.bot_token is not None
    assert s.discord.bot_token.get_secret_value() == "secret-token"
    assert "secret-token" not in repr(s)
    assert s.discord.dev_guild_ids == [1, 2]
    assert s.local.models_dir is None
    assert s.hf.inference_mode == "hybrid"


def test_a_bad_value_names_the_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("INFERENCE_MODE", "cloud")
    with pytest.raises(ValidationError, match="INFERENCE_MODE") as raised:
        Settings(_env_file=None)  # type: ignore[call-arg]
    assert [env_name(e["loc"]) for e in raised.value.errors()] == ["INFERENCE_MODE"]
    monkeypatch.delenv("INFERENCE_MODE")
    with pytest.raises(ValidationError) as raised:
        Settings(_env_file=None, discord_dev_guild_ids="1,x")  # type: ignore[call-arg]
    assert [env_name(e["loc"]) for e in raised.value.errors()] == ["DISCORD_DEV_GUILD_IDS.1"]


def test_an_unknown_setting_given_by_name_is_an_error() -> None:
    with pytest.raises(TypeError, match="'llm_modle'"):
        Settings(_env_file=None, llm_modle="x")  # type: ignore[call-arg]


def test_flat_variables_land_in_their_groups(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The environment over .env, keyword arguments over both; no nested
    delimiter: LLM__MODEL and a JSON LLM are nobody's settings."""
    clean_env(monkeypatch)
    dotenv = tmp_path / ".env"
    dotenv.write_text(
        "LLM_MODEL=from-file\nLLM_TIMEOUT=5\nhf_token=hf_file\nSLACK_HTTP_PORT=3001\n"
        "DATA_DIR=/srv/bot\nNOT_A_SETTING=1\n",
        encoding="utf-8",
    )
    monkeypatch.setenv("LLM_TIMEOUT", "7")
    monkeypatch.setenv("LLM__MODEL", "nested")
    monkeypatch.setenv("LLM", '{"model": "json"}')
    s = Settings(_env_file=dotenv, slack_http_port=3002)  # type: ignore[call-arg]
    assert (s.llm.model, s.llm.timeout) == ("from-file", 7.0)
    assert s.hf.token is not None and s.hf.token.get_secret_value() == "hf_file"
    assert s.slack.http_port == 3002
    assert s.store.data_dir == Path("/srv/bot")
    assert s.store.database_url == "sqlite+aiosqlite:////srv/bot/bot.db"
    assert s.setting("LLM_TIMEOUT") == 7.0 and s.setting("slack_http_port") == 3002


def test_the_legacy_name_is_the_same_setting(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """DISCORD_TOKEN in the environment beats DISCORD_BOT_TOKEN in .env (the
    environment beats the file); in one place the current name wins."""
    clean_env(monkeypatch)
    dotenv = tmp_path / ".env"
    dotenv.write_text("DISCORD_BOT_TOKEN=from-file\n", encoding="utf-8")
    monkeypatch.setenv("DISCORD_TOKEN", "from-env")
    token = Settings(_env_file=dotenv).discord.bot_token  # type: ignore[call-arg]
    assert token is not None and token.get_secret_value() == "from-env"
    monkeypatch.setenv("DISCORD_BOT_TOKEN", "current")
    token = Settings(_env_file=dotenv).discord.bot_token  # type: ignore[call-arg]
    assert token is not None and token.get_secret_value() == "current"
    assert "DISCORD_TOKEN" in env_names() and "DISCORD_TOKEN" not in env_names(legacy=False)


def test_a_group_may_be_given_whole(monkeypatch: pytest.MonkeyPatch) -> None:
    """``Settings(llm=LLMSettings(...))`` replaces that group; the others are
    read as ever."""
    clean_env(monkeypatch)
    monkeypatch.setenv("LLM_TIMEOUT", "7")
    monkeypatch.setenv("HF_PROVIDER", "fal-ai")
    s = Settings(_env_file=None, llm=LLMSettings(model="m", timeout=3))  # type: ignore[call-arg]
    assert (s.llm.model, s.llm.timeout, s.hf.provider) == ("m", 3.0, "fal-ai")
    with pytest.raises(TypeError, match="llm_model"):
        Settings(_env_file=None, llm=LLMSettings(), llm_model="m")  # type: ignore[call-arg]
    with pytest.raises(TypeError, match="llm_model"):
        Settings(_env_file=None, llm_model="m", llm=LLMSettings())  # type: ignore[call-arg]


def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """No setting from this process's environment."""
    for key in setting_keys() | {"DISCORD_TOKEN"}:
        monkeypatch.delenv(key, raising=False)


def test_env_example_values_are_the_defaults(monkeypatch: pytest.MonkeyPatch) -> None:
    """What .env.example shows is what an unset variable gives (LOG_LEVEL is
    the one it sets on purpose: a server logs less than the terminal)."""
    clean_env(monkeypatch)
    text = (ROOT / ".env.example").read_text(encoding="utf-8")
    default = Settings(_env_file=None)  # type: ignore[call-arg]
    shown = re.findall(r"^([A-Z][A-Z0-9_]*)=(.+)$", text, flags=re.MULTILINE)
    differ = [
        key
        for key, value in shown
        if Settings(_env_file=None, **{key: value}).setting(key)  # type: ignore[call-arg]
        != default.setting(key)
    ]
    assert differ == ["LOG_LEVEL"]


def test_core_configs_take_their_defaults_from_nowhere_else(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A deployment with nothing set and a test that builds AgentConfig()
    get the same agent: one default each."""
    clean_env(monkeypatch)
    settings = Settings(_env_file=None)  # type: ignore[call-arg]
    assert agent_config(settings) == AgentConfig()
    assert task_timeouts(settings) == TaskTimeouts()
    assert AgentConfig().selection_delay == settings.selection.selection_delay == 1.0
    assert AgentConfig().requests_per_server_per_day == 2_000


def test_the_attachment_cap_is_one_constant(monkeypatch: pytest.MonkeyPatch) -> None:
    clean_env(monkeypatch)
    settings = Settings(_env_file=None)  # type: ignore[call-arg]
    assert MAX_ATTACHMENT_BYTES == 25 * 1024 * 1024
    assert settings.input.max_attachment_bytes == MAX_ATTACHMENT_BYTES
    assert AgentConfig().max_attachment_bytes == MAX_ATTACHMENT_BYTES
    assert DiscordConfig().max_attachment_bytes == MAX_ATTACHMENT_BYTES
    assert SlackConfig(bot_token="xoxb-1").max_file_bytes == MAX_ATTACHMENT_BYTES


def parameters(target: object) -> set[str]:
    if dataclasses.is_dataclass(target):
        return {f.name for f in dataclasses.fields(target)}
    return set(inspect.signature(target).parameters)  # type: ignore[arg-type]


def test_each_setting_marked_into_a_config_names_one_of_its_arguments() -> None:
    from core.experts.local import LocalExpert

    targets: dict[Target, object] = {
        "agent": AgentConfig,
        "timeouts": TaskTimeouts,
        "llm": LLM,
        "local": LocalExpert,
        "access": AccessPolicy,
        "discord": DiscordConfig,
        "slack": SlackConfig,
    }
    settings = Settings(_env_file=None)  # type: ignore[call-arg]
    assert set(targets) == set(get_args(Target))
    for target, cls in targets.items():
        names = set(settings.into(target))
        assert names, target
        assert names <= parameters(cls), (target, names - parameters(cls))


def test_values_are_converted_for_their_config() -> None:
    settings = Settings(  # type: ignore[call-arg]
        _env_file=None,
        result_cache_mb=1.5,
        max_inflight_upload_mb=0,
        discord_shard_ids="",
        discord_admin_roles="3,4",
        max_tasks_per_plan=7,
        model_selection="downloads",
    )
    agent = agent_config(settings)
    assert agent.result_cache_bytes == 1_572_864
    assert agent.max_inflight_upload_bytes is None  # 0: no byte budget
    assert (agent.max_tasks, agent.selection) == (7, "downloads")
    discord = settings.into("discord")
    assert discord["shard_ids"] is None and discord["admin_roles"] == frozenset({3, 4})
