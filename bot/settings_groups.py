"""The settings' groups: each setting declared once, with its default.

One pydantic model per group (the LLM, Hugging Face, local inference, model
selection, execution, quotas, input limits, the store, Discord, Slack, the
process); :class:`bot.settings.Settings` has one field per group and reads
them from the environment.  A field's environment variable is the group's
prefix and its name in capitals (:func:`_names`), unless it names another
(``validation_alias``).  A setting that is an argument of a config class is
marked :class:`Into` it; where that class is the core's (``AgentConfig``,
``TaskTimeouts``) the default is taken from it, so it is written once.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal

import platformdirs
from pydantic import (
    AliasChoices,
    AliasGenerator,
    BaseModel,
    ConfigDict,
    Field,
    PrivateAttr,
    SecretStr,
    field_validator,
    model_validator,
)
from pydantic_settings import NoDecode

from core.config import AgentConfig
from core.tasks import TaskTimeouts

IntList = Annotated[list[int], NoDecode]

APP_NAME = "hugginggpt-bot"
# Before DATA_DIR existed the store lived in ./data of the working directory.
LEGACY_DATA_DIR = Path("data")
MIB = 1024 * 1024

# What a deployment gets when nothing is set: the core's own defaults.
_AGENT = AgentConfig()
_TIMEOUTS = TaskTimeouts()

# The config classes settings feed (bot.app builds each): core.config.AgentConfig,
# core.tasks.TaskTimeouts, core.llm.LLM, core.experts.local.LocalExpert,
# adapters.discord's AccessPolicy and DiscordConfig, adapters.slack's SlackConfig.
Target = Literal["agent", "timeouts", "llm", "local", "access", "discord", "slack"]


@dataclass(frozen=True, slots=True)
class Into:
    """Marks a setting as an argument of a config class (by :data:`Target`):
    ``name`` there (default: the setting's own), multiplied by ``scale``
    (MiB → bytes), ``None`` where the setting is 0 and ``zero_is_none``, and
    passed through ``convert`` (a list → ``frozenset``)."""

    target: Target
    name: str | None = None
    scale: int = 1
    zero_is_none: bool = False
    convert: Callable[[Any], Any] | None = None

    def value(self, value: Any) -> Any:
        if self.zero_is_none and not value:
            return None
        if self.scale != 1:
            value = int(value * self.scale)
        return self.convert(value) if self.convert is not None and value is not None else value


def default_data_dir() -> Path:
    """The per-user data directory (``~/.local/share/hugginggpt-bot`` on Linux)."""
    return Path(platformdirs.user_data_dir(APP_NAME, appauthor=False))


def _legacy_data_dir() -> Path | None:
    """``./data`` when it holds an earlier version's database or media files."""
    here = Path.cwd() / LEGACY_DATA_DIR
    if (here / "bot.db").is_file() or (here / "media").is_dir():
        return here
    return None


def _csv(value: object) -> object:
    """Accept "1,2,3" from the environment for list fields."""
    if isinstance(value, str):
        return [v.strip() for v in value.split(",") if v.strip()]
    if isinstance(value, int):
        return [value]
    return value


def _names(prefix: str = "") -> ConfigDict:
    """A group's config: each field read from ``PREFIX`` + its name in capitals
    (its own ``validation_alias`` when it names another variable), and given
    by name in Python (``HFSettings(token=…)``)."""
    return ConfigDict(
        alias_generator=AliasGenerator(validation_alias=lambda name: f"{prefix}{name}".upper()),
        validate_by_name=True,
        validate_by_alias=True,
    )


class LLMSettings(BaseModel):
    """The controller: any OpenAI-compatible endpoint; with only HF_TOKEN, the
    HF router's /v1 (``bot.app.llm_endpoint`` chooses).  ``LLM_*``."""

    model_config = _names("LLM_")

    openai_api_key: SecretStr | None = Field(default=None, validation_alias="OPENAI_API_KEY")
    openai_base_url: str | None = Field(default=None, validation_alias="OPENAI_BASE_URL")
    model: str | None = None  # unset: a current default for the endpoint in use
    # one stage's whole budget (retries and a re-ask included)
    timeout: Annotated[float, Into("llm")] = 120.0
    max_retries: Annotated[int, Into("llm")] = 2
    # unset: no sampling parameter is sent (plans and model choices at 0 on llama.cpp)
    temperature: Annotated[float | None, Into("llm")] = None
    # minimal | low | medium | high, where supported
    reasoning_effort: Annotated[str | None, Into("llm")] = None


class HFSettings(BaseModel):
    """Hugging Face inference: the hosted service, the Hub, the mode.  ``HF_*``."""

    model_config = _names("HF_")

    token: SecretStr | None = None
    # a self-hosted server speaking the task API, replacing the service for every hosted call
    inference_url: str | None = None
    endpoint: str = "https://huggingface.co"  # the Hub API
    router_url: str = "https://router.huggingface.co"  # Inference Providers (or a gateway)
    provider: str = "auto"  # auto (your order on the Hub) or one provider's name
    inference_mode: Literal["remote", "local", "hybrid"] = Field(
        default="remote", validation_alias="INFERENCE_MODE"
    )


class LocalSettings(BaseModel):
    """Local inference (``INFERENCE_MODE=local`` or ``hybrid``):
    ``core.experts.local.LocalExpert``'s arguments.  ``LOCAL_*``."""

    model_config = _names("LOCAL_")

    models_dir: Annotated[Path | None, Into("local")] = None
    # download weights from the Hub on first use (into the HF cache)
    download: Annotated[bool, Into("local")] = True
    # refuse models whose weights are larger
    download_max_gb: Annotated[float, Into("local")] = 20.0
    # id patterns (fnmatch); empty: any
    download_allow: Annotated[list[str], NoDecode, Into("local")] = []
    max_models: Annotated[int, Into("local", "max_loaded")] = 2
    device: Annotated[str | None, Into("local")] = None  # auto when unset
    # the Stable Diffusion base a bare ControlNet checkpoint is paired with (id or dir)
    controlnet_base: Annotated[str, Into("local")] = "stable-diffusion-v1-5/stable-diffusion-v1-5"
    # fewer steps = faster, rougher images
    diffusion_steps: Annotated[int | None, Into("local")] = None
    # the depth-estimation model (id or dir) that makes a depth/normal ControlNet's control image
    depth_model: Annotated[str | None, Into("local")] = None
    # the segmentation model (id or dir) that makes a seg ControlNet's control image
    seg_model: Annotated[str | None, Into("local")] = None

    @field_validator("download_allow", mode="before")
    @classmethod
    def _local_csv(cls, value: object) -> object:
        return _csv(value)


class SelectionSettings(BaseModel):
    """Model selection (``AgentConfig``'s defaults)."""

    model_config = _names()

    model_catalog: Path | None = None
    model_selection: Annotated[Literal["llm", "downloads"], Into("agent", "selection")] = "llm"
    # Independent tasks run this long on their most downloaded model before the
    # LLM is asked to choose; those done sooner need no choice (0: ask at once).
    selection_delay: Annotated[float, Into("agent"), Field(ge=0)] = _AGENT.selection_delay
    top_k: Annotated[int, Into("agent")] = _AGENT.top_k


class ExecutionSettings(BaseModel):
    """Running the plans and the durable turns (``AgentConfig``'s and
    ``TaskTimeouts``' defaults)."""

    model_config = _names()

    # local inference calls at once in this process (CPU/GPU)
    max_concurrent_tasks: Annotated[int, Into("agent", "concurrency")] = _AGENT.concurrency
    # tasks of one request at once (hosted calls: no process limit)
    max_parallel_tasks: Annotated[int, Into("agent")] = _AGENT.max_parallel_tasks
    # model results reused within a conversation; 0: off
    result_cache_entries: Annotated[int, Into("agent")] = _AGENT.result_cache_entries
    # memory those results may hold (MiB); 0: off
    result_cache_mb: Annotated[float, Into("agent", "result_cache_bytes", scale=MIB)] = (
        _AGENT.result_cache_bytes / MIB
    )
    # Turns one process runs at once; the rest queue in order.  A text request
    # holds little memory, so many may wait on the LLM and models at once (CPU
    # is the limit then); uploads are bounded by the byte budget below.
    max_inflight_requests: Annotated[int, Into("agent")] = _AGENT.max_inflight_requests
    # Declared upload bytes (MiB) the running turns may hold between them (0: no
    # budget).  Measured (benchmarks/memory_admission.py, `run slack`): ~120 MB at
    # rest, and a request holds ~3x its uploads while downloading and decoding
    # them (170 MB for 3 x 20 MB PNGs), so 400 MiB of uploads should peak near
    # 120 + 3 x 420 MB, within 1.5 GB: 20 such requests at once peaked at 1.17 GB
    # (2.7 GB without a budget).  A bigger single request runs alone.
    max_inflight_upload_mb: Annotated[
        float,
        Into("agent", "max_inflight_upload_bytes", scale=MIB, zero_is_none=True),
        Field(ge=0),
    ] = (_AGENT.max_inflight_upload_bytes or 0) / MIB
    # a dead process's turns are taken over after this
    job_lease_seconds: Annotated[float, Into("agent")] = _AGENT.job_lease_seconds
    # how often a process looks for queued or orphaned turns
    job_poll_seconds: Annotated[float, Into("agent")] = _AGENT.job_poll_seconds
    # classic tasks (text, classification, detection…)
    task_timeout: Annotated[float, Into("timeouts", "classic")] = _TIMEOUTS.classic
    # image and audio generation
    media_task_timeout: Annotated[float, Into("timeouts", "media")] = _TIMEOUTS.media
    # video generation takes minutes
    video_task_timeout: Annotated[float, Into("timeouts", "video")] = _TIMEOUTS.video
    max_tasks_per_plan: Annotated[int, Into("agent", "max_tasks")] = _AGENT.max_tasks


class QuotaSettings(BaseModel):
    """Quotas, kept in the database (they hold across restarts and replicas);
    0 turns one off.  Admins (Discord Manage Server or DISCORD_ADMIN_ROLES,
    SLACK_ADMIN_USERS, the terminal) are exempt.  A "server" is a Discord
    server or a Slack workspace."""

    model_config = _names()

    requests_per_user_per_minute: Annotated[int, Into("agent")] = (
        _AGENT.requests_per_user_per_minute
    )
    requests_per_user_per_day: Annotated[int, Into("agent")] = _AGENT.requests_per_user_per_day
    llm_tokens_per_user_per_day: Annotated[int, Into("agent")] = _AGENT.llm_tokens_per_user_per_day
    requests_per_server_per_minute: Annotated[int, Into("agent")] = (
        _AGENT.requests_per_server_per_minute
    )
    requests_per_server_per_day: Annotated[int, Into("agent")] = _AGENT.requests_per_server_per_day
    llm_tokens_per_server_per_day: Annotated[int, Into("agent")] = (
        _AGENT.llm_tokens_per_server_per_day
    )


class InputSettings(BaseModel):
    """Limits on input, the same on every platform."""

    model_config = _names()

    max_attachment_bytes: Annotated[
        int, Into("agent"), Into("discord"), Into("slack", "max_file_bytes")
    ] = _AGENT.max_attachment_bytes
    max_image_pixels: Annotated[int, Into("agent")] = _AGENT.max_image_pixels
    history_turns: Annotated[int, Into("agent")] = _AGENT.history_turns


class StoreSettings(BaseModel):
    """The database and the media files."""

    model_config = _names()

    # The SQLite database and media files. Unset: ./data when it already holds a
    # database or media (earlier versions kept them there), else the per-user directory.
    data_dir: Path | None = None
    database_url: str = ""  # unset: SQLite at DATA_DIR/bot.db
    database_pool_size: int = 10  # connections per process (PostgreSQL allows ~100 in all)
    database_pool_timeout: float = 60.0  # seconds a request waits in line for a connection
    media_dir: Path | None = None  # unset: DATA_DIR/media
    # `db prune-media` keeps unused files younger than this (seconds): a request still
    # running writes its files before the rows that refer to them
    prune_min_age: float = 3600.0
    _data_dir_origin: str = PrivateAttr(default="")

    @model_validator(mode="after")
    def _resolve_data_dir(self) -> StoreSettings:
        if self._data_dir_origin:  # resolved already (a group is validated again in Settings)
            return self
        if self.data_dir is not None:
            self.data_dir = self.data_dir.expanduser()
            self._data_dir_origin = "DATA_DIR"
        elif (legacy := _legacy_data_dir()) is not None:
            self.data_dir = legacy
            self._data_dir_origin = (
                f"./data in the working directory holds an earlier version's data; "
                f"set DATA_DIR to keep using it from anywhere, or move it to {default_data_dir()}"
            )
        else:
            self.data_dir = default_data_dir()
            self._data_dir_origin = "the per-user default; DATA_DIR changes it"
        if not self.database_url:
            self.database_url = f"sqlite+aiosqlite:///{(self.data_dir / 'bot.db').as_posix()}"
        self.media_dir = (self.media_dir or self.data_dir / "media").expanduser()
        return self

    @property
    def data_path(self) -> Path:
        """``data_dir`` once resolved (the validator always sets it)."""
        assert self.data_dir is not None
        return self.data_dir

    @property
    def media_path(self) -> Path:
        """``media_dir`` once resolved (the validator always sets it)."""
        assert self.media_dir is not None
        return self.media_dir

    @property
    def data_dir_origin(self) -> str:
        """Why ``data_dir`` is where it is (for the start-up log line)."""
        return self._data_dir_origin


class DiscordSettings(BaseModel):
    """``adapters.discord``'s config (``bot.app.discord_config``).  ``DISCORD_*``."""

    model_config = _names("DISCORD_")

    bot_token: SecretStr | None = Field(
        default=None, validation_alias=AliasChoices("DISCORD_BOT_TOKEN", "DISCORD_TOKEN")
    )
    dev_guild_ids: Annotated[IntList, Into("discord", convert=tuple)] = []
    shard_ids: Annotated[
        list[int] | None, NoDecode, Into("discord", zero_is_none=True, convert=tuple)
    ] = None
    shard_count: Annotated[int | None, Into("discord")] = None
    allowed_guilds: Annotated[IntList, Into("access", convert=frozenset)] = []
    denied_guilds: Annotated[IntList, Into("access", convert=frozenset)] = []
    allowed_channels: Annotated[IntList, Into("access", convert=frozenset)] = []
    denied_channels: Annotated[IntList, Into("access", convert=frozenset)] = []
    allowed_roles: Annotated[IntList, Into("access", convert=frozenset)] = []
    denied_roles: Annotated[IntList, Into("access", convert=frozenset)] = []
    # members are admins (/config, server usage, no quotas)
    admin_roles: Annotated[IntList, Into("discord", convert=frozenset)] = []
    # REST API base override (self-hosted proxy, tests)
    api_base: Annotated[str | None, Into("discord")] = None

    @field_validator(
        "dev_guild_ids",
        "shard_ids",
        "allowed_guilds",
        "denied_guilds",
        "allowed_channels",
        "denied_channels",
        "allowed_roles",
        "denied_roles",
        "admin_roles",
        mode="before",
    )
    @classmethod
    def _discord_csv(cls, value: object) -> object:
        return _csv(value)


class SlackSettings(BaseModel):
    """``adapters.slack``'s config (``bot.app.slack_config``, which also says
    which token is missing).  ``SLACK_*``."""

    model_config = _names("SLACK_")

    bot_token: SecretStr | None = None
    app_token: SecretStr | None = None
    signing_secret: SecretStr | None = None
    http_port: Annotated[int, Into("slack")] = 3000
    # admins (usage, config, no quotas)
    admin_users: Annotated[list[str], NoDecode, Into("slack", convert=frozenset)] = []
    # Web API base override (self-hosted proxy, tests)
    api_url: Annotated[str | None, Into("slack")] = None

    @field_validator("admin_users", mode="before")
    @classmethod
    def _slack_csv(cls, value: object) -> object:
        return _csv(value)


class ProcessSettings(BaseModel):
    """The process: shutdown, the terminal's worker, logs and observability."""

    model_config = _names()

    shutdown_grace: float = 30.0  # seconds running requests get to finish on SIGTERM
    # --- the terminal's resident worker (`python -m bot serve`, docs/cli-worker.md) ---
    cli_socket: Path | None = None  # unset: DATA_DIR/cli.sock
    cli_worker_idle: float = Field(default=1800.0, ge=0)  # seconds idle before it exits; 0: never
    # unset: INFO (the servers on stderr; ask, chat, doctor in DATA_DIR/logs/bot.log, bot.logs)
    log_level: str | None = None
    # --- observability ---
    log_format: Literal["text", "json"] = "text"  # json: one JSON object a line (collectors)
    metrics_port: int | None = Field(default=None, ge=0, le=65535)  # unset: no /metrics
    metrics_host: str = "127.0.0.1"  # 0.0.0.0 (or ::) to let another host scrape it
    # OpenTelemetry spans (the otel extra) to this OTLP/HTTP collector; the other OTEL_*
    # variables are read from the environment by the exporter itself
    otel_exporter_otlp_endpoint: str | None = None
