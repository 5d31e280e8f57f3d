"""Settings: `.env.example` mirrors them key for key; env parsing as documented."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from bot.settings import Settings

ROOT = Path(__file__).resolve().parents[2]


def example_keys() -> set[str]:
    text = (ROOT / ".env.example").read_text(encoding="utf-8")
    return set(re.findall(r"^([A-Z][A-Z0-9_]*)=", text, flags=re.MULTILINE))


def setting_keys() -> set[str]:
    keys = set()
    for name, field in Settings.model_fields.items():
        alias = field.validation_alias
        choices = getattr(alias, "choices", None)
        keys.add(str(choices[0]) if choices else name.upper())
    return keys


def test_env_example_mirrors_settings() -> None:
    assert example_keys() == setting_keys()


def test_lists_tokens_and_empty_values_from_the_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("DISCORD_TOKEN", "secret-token")
    monkeypatch.setenv("DISCORD_DEV_GUILD_IDS", "1, 2")
    monkeypatch.setenv("LOCAL_MODELS_DIR", "")  # empty means unset, not "."
    monkeypatch.setenv("INFERENCE_MODE", "hybrid")
    s = Settings(_env_file=None)  # type: ignore[call-arg]
    assert s.discord_bot_token is not None
    assert s.discord_bot_token.get_secret_value() == "secret-token"
    assert "secret-token" not in repr(s)
    assert s.discord_dev_guild_ids == [1, 2]
    assert s.local_models_dir is None
    assert s.inference_mode == "hybrid"


def test_a_bad_value_names_the_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("INFERENCE_MODE", "cloud")
    with pytest.raises(ValueError, match="inference_mode"):
        Settings(_env_file=None)  # type: ignore[call-arg]
