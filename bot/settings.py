"""Typed settings from the environment or ``.env``.

One cached :func:`get_settings`; nothing reads the environment at import
time, so tests build ``Settings(...)`` directly.  Every field has a default
that works on a laptop; tokens are ``SecretStr`` so they never print.

The settings come in groups, one model each (:mod:`bot.settings_groups`),
and :class:`Settings` has one field per group: ``settings.llm`` (the controller), ``hf`` (Hugging Face),
``local`` (local inference), ``selection``, ``execution``, ``quotas``,
``input``, ``store``, ``discord``, ``slack``, ``process``.  Each setting is
declared once, with its default, in its group.  Its environment variable is
the group's prefix and the field's name (``HF_`` + ``token``: ``HF_TOKEN``;
the groups without a prefix: ``data_dir`` is ``DATA_DIR``) unless the field
names another (``LLM`` group's ``openai_api_key``: ``OPENAI_API_KEY``;
``DISCORD_TOKEN``, the old name of ``DISCORD_BOT_TOKEN``, still works).
The environment, ``.env`` and ``Settings(hf_token=…)`` all give settings by
those flat names (:class:`_ByEnvName` puts each in its group); a group may
also be given whole (``Settings(hf=HFSettings(token=…))``).  An unknown name
given to ``Settings(...)`` is an error, and a bad value's error names the
variable (:func:`env_name`).

A setting that feeds a config class says so where it is declared
(:class:`~bot.settings_groups.Into`): :meth:`Settings.into` builds that
class's arguments from them, and where the config class lives in core (``AgentConfig``,
``TaskTimeouts``) the setting's default *is* the config class's default, so
each is written once.
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import lru_cache
from typing import Any

from pydantic import AliasChoices, BaseModel, Field
from pydantic.fields import FieldInfo
from pydantic_settings import (
    BaseSettings,
    EnvSettingsSource,
    InitSettingsSource,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
)

from bot.settings_groups import (
    APP_NAME,
    LEGACY_DATA_DIR,
    DiscordSettings,
    ExecutionSettings,
    HFSettings,
    InputSettings,
    Into,
    LLMSettings,
    LocalSettings,
    ProcessSettings,
    QuotaSettings,
    SelectionSettings,
    SlackSettings,
    StoreSettings,
    Target,
    default_data_dir,
)

__all__ = [
    "APP_NAME",
    "ENV_NAMES",
    "GROUPS",
    "LEGACY_DATA_DIR",
    "DiscordSettings",
    "ExecutionSettings",
    "HFSettings",
    "InputSettings",
    "Into",
    "LLMSettings",
    "LocalSettings",
    "ProcessSettings",
    "QuotaSettings",
    "SelectionSettings",
    "Settings",
    "SlackSettings",
    "StoreSettings",
    "Target",
    "default",
    "default_data_dir",
    "env_name",
    "env_names",
    "get_settings",
]


class Settings(BaseSettings):
    """Every group; each read from its flat environment variables (module docstring)."""

    model_config = SettingsConfigDict(
        env_file=".env", env_file_encoding="utf-8", env_ignore_empty=True, extra="ignore"
    )

    llm: LLMSettings = Field(default_factory=LLMSettings)
    hf: HFSettings = Field(default_factory=HFSettings)
    local: LocalSettings = Field(default_factory=LocalSettings)
    selection: SelectionSettings = Field(default_factory=SelectionSettings)
    execution: ExecutionSettings = Field(default_factory=ExecutionSettings)
    quotas: QuotaSettings = Field(default_factory=QuotaSettings)
    input: InputSettings = Field(default_factory=InputSettings)
    store: StoreSettings = Field(default_factory=StoreSettings)
    discord: DiscordSettings = Field(default_factory=DiscordSettings)
    slack: SlackSettings = Field(default_factory=SlackSettings)
    process: ProcessSettings = Field(default_factory=ProcessSettings)

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        """Keyword arguments, then the environment, then ``.env``: each by the
        variables' flat names, put in their groups."""
        assert isinstance(init_settings, InitSettingsSource)
        assert isinstance(env_settings, EnvSettingsSource)  # DotEnvSettingsSource is one too
        assert isinstance(dotenv_settings, EnvSettingsSource)
        return (
            _ByEnvName(settings_cls, init_settings.init_kwargs, strict=True),
            _ByEnvName(settings_cls, env_settings.env_vars),
            _ByEnvName(settings_cls, dotenv_settings.env_vars),
        )

    def setting(self, env: str) -> Any:
        """The value of the setting the environment variable ``env`` sets."""
        group, name = ENV_NAMES[env.upper()]
        return getattr(getattr(self, group), name)

    def into(self, target: Target) -> dict[str, Any]:
        """The arguments of ``target``'s config class the settings give (each
        setting marked :class:`Into` it), by that class's names."""
        return {
            into.name or name: into.value(getattr(getattr(self, group), name))
            for group, name, into in _INTO[target]
        }


def _groups() -> dict[str, type[BaseModel]]:
    groups: dict[str, type[BaseModel]] = {}
    for group, info in Settings.model_fields.items():
        assert isinstance(info.annotation, type) and issubclass(info.annotation, BaseModel)
        groups[group] = info.annotation
    return groups


GROUPS = _groups()


def _env_names() -> dict[str, tuple[str, str]]:
    names: dict[str, tuple[str, str]] = {}
    for group, model in GROUPS.items():
        for name, info in model.model_fields.items():
            alias = info.validation_alias
            choices = alias.choices if isinstance(alias, AliasChoices) else [alias]
            for env in choices:
                assert isinstance(env, str), (group, name)
                assert env not in names, f"{env} is two settings"
                names[env] = (group, name)
    return names


# Every environment variable a setting reads (legacy names too) → (group, field).
ENV_NAMES = _env_names()
# (group, field) → its variable's current name (the first: DISCORD_BOT_TOKEN, not DISCORD_TOKEN).
_CURRENT = {where: env for env, where in reversed(ENV_NAMES.items())}


def env_names(*, legacy: bool = True) -> list[str]:
    """The environment variables the settings read, in declaration order;
    without the legacy names (``DISCORD_TOKEN``) when ``legacy`` is false:
    then one per setting, the name ``.env.example`` shows."""
    return [env for env, where in ENV_NAMES.items() if legacy or _CURRENT[where] == env]


def default(env: str) -> Any:
    """The default of the setting the environment variable ``env`` sets."""
    group, name = ENV_NAMES[env.upper()]
    return GROUPS[group].model_fields[name].get_default(call_default_factory=True)


def env_name(loc: tuple[int | str, ...]) -> str:
    """The variable a validation error's location is about (``("hf",
    "INFERENCE_MODE")`` → ``INFERENCE_MODE``; a list item keeps its index)."""
    if len(loc) >= 2 and loc[0] in GROUPS:
        return ".".join(str(part) for part in loc[1:])
    return ".".join(str(part) for part in loc).upper()


class _ByEnvName(PydanticBaseSettingsSource):
    """Values by environment variable name (``HF_TOKEN``, in any case), each
    put in its group by the variable's current name: ``{"hf": {"HF_TOKEN":
    …}}``, ``{"discord": {"DISCORD_BOT_TOKEN": …}}`` for ``DISCORD_TOKEN`` too
    (so the environment's legacy name still beats ``.env``'s current one, and
    the current name beats the legacy one in one source).  Other names are
    ignored (the environment holds many), unless ``strict`` (keyword arguments:
    an unknown one is a mistake); there a group may also be given whole."""

    def __init__(
        self, settings_cls: type[BaseSettings], values: Mapping[str, Any], *, strict: bool = False
    ) -> None:
        super().__init__(settings_cls)
        self.values = values
        self.strict = strict

    def get_field_value(self, field: FieldInfo, field_name: str) -> tuple[Any, str, bool]:
        return None, field_name, False  # not used: __call__ reads every group at once

    def __call__(self) -> dict[str, Any]:
        grouped: dict[str, dict[str, Any]] = {}
        for key, value in self.values.items():
            if self.strict and key in GROUPS:
                continue
            env = key.upper()
            if env in ENV_NAMES:
                group = ENV_NAMES[env][0]
                if self.strict and group in self.values:
                    raise TypeError(
                        f"{key!r} and {group!r} both given: set {group} whole or by name"
                    )
                current = _CURRENT[ENV_NAMES[env]]
                values = grouped.setdefault(group, {})
                if env == current or current not in values:
                    values[current] = value
            elif self.strict:
                raise TypeError(f"unknown setting {key!r} (not one of bot.settings.ENV_NAMES)")
        whole = {key: value for key, value in self.values.items() if self.strict and key in GROUPS}
        return grouped | whole


def _marks() -> dict[Target, list[tuple[str, str, Into]]]:
    marks: dict[Target, list[tuple[str, str, Into]]] = {}
    for group, model in GROUPS.items():
        for name, info in model.model_fields.items():
            for meta in info.metadata:
                if isinstance(meta, Into):
                    marks.setdefault(meta.target, []).append((group, name, meta))
    return marks


_INTO = _marks()


@lru_cache(maxsize=1)
def get_settings() -> Settings:
    return Settings()
