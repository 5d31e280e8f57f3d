"""Typed settings from the environment or ``.env``.

One cached :func:`get_settings`; nothing reads the environment at import
time, so tests build ``Settings(...)`` directly.  Every field has a default
that works on a laptop; tokens are ``SecretStr`` so they never print.
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import Annotated, Literal

import platformdirs
from pydantic import AliasChoices, Field, PrivateAttr, SecretStr, field_validator, model_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

IntList = Annotated[list[int], NoDecode]

APP_NAME = "hugginggpt-bot"
# Before DATA_DIR existed the store lived in ./data of the working directory.
LEGACY_DATA_DIR = Path("data")


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


class Settings(BaseSettings):
    model_config = SettingsConfigDict(
        env_file=".env",
        env_file_encoding="utf-8",
        env_ignore_empty=True,
        extra="ignore",
        populate_by_name=True,
    )

    # --- LLM (any OpenAI-compatible endpoint; with only HF_TOKEN, the HF router's /v1) ---
    openai_api_key: SecretStr | None = None
    openai_base_url: str | None = None
    llm_model: str | None = None  # unset: a current default for the endpoint in use
    llm_timeout: float = 120.0  # one stage's whole budget (retries and a re-ask included)
    llm_max_retries: int = 2
    llm_temperature: float | None = None  # unset: no sampling parameter is sent
    llm_reasoning_effort: str | None = None  # minimal | low | medium | high, where supported

    # --- Hugging Face inference ---
    hf_token: SecretStr | None = None
    # a self-hosted server speaking the task API, replacing the service for every hosted call
    hf_inference_url: str | None = None
    hf_endpoint: str = "https://huggingface.co"  # the Hub API
    hf_router_url: str = "https://router.huggingface.co"  # Inference Providers (or a gateway)
    hf_provider: str = "auto"  # auto (your order on the Hub) or one provider's name
    inference_mode: Literal["remote", "local", "hybrid"] = "remote"
    local_models_dir: Path | None = None
    # local/hybrid: download weights from the Hub on first use (into the HF cache)
    local_download: bool = True
    local_download_max_gb: float = 20.0  # refuse models whose weights are larger
    local_download_allow: Annotated[list[str], NoDecode] = []  # id patterns (fnmatch); empty: any
    local_max_models: int = 2
    local_device: str | None = None  # "cpu", "cuda", … (auto when unset)
    # the Stable Diffusion base a bare ControlNet checkpoint is paired with (id or dir)
    local_controlnet_base: str = "stable-diffusion-v1-5/stable-diffusion-v1-5"
    local_diffusion_steps: int | None = None  # fewer steps = faster, rougher images
    # the depth-estimation model (id or dir) that makes a depth/normal ControlNet's control image
    local_depth_model: str | None = None
    # the segmentation model (id or dir) that makes a seg ControlNet's control image
    local_seg_model: str | None = None

    # --- model selection ---
    model_catalog: Path | None = None
    model_selection: Literal["llm", "downloads"] = "llm"
    # Independent tasks run this long on their most downloaded model before the
    # LLM is asked to choose; those done sooner need no choice (0: ask at once).
    selection_delay: float = Field(default=1.0, ge=0)
    top_k: int = 5

    # --- execution ---
    max_concurrent_tasks: int = 4  # local inference calls at once in this process (CPU/GPU)
    max_parallel_tasks: int = 8  # tasks of one request at once (hosted calls: no process limit)
    result_cache_entries: int = 256  # model results reused within a conversation; 0: off
    result_cache_mb: float = 64.0  # memory those results may hold; 0: off
    # Turns one process runs at once; the rest queue in order.  A text request
    # holds little memory, so many may wait on the LLM and models at once (CPU
    # is the limit then); uploads are bounded by the byte budget below.
    max_inflight_requests: int = 64
    # Declared upload bytes (MiB) the running turns may hold between them (0: no
    # budget).  Measured (benchmarks/memory_admission.py, `run slack`): ~120 MB at
    # rest, and a request holds ~3x its uploads while downloading and decoding
    # them (170 MB for 3 x 20 MB PNGs), so 400 MiB of uploads should peak near
    # 120 + 3 x 420 MB, within 1.5 GB: 20 such requests at once peaked at 1.17 GB
    # (2.7 GB without a budget).  A bigger single request runs alone.
    max_inflight_upload_mb: float = Field(default=400.0, ge=0)
    job_lease_seconds: float = 60.0  # a dead process's turns are taken over after this
    job_poll_seconds: float = 2.0  # how often a process looks for queued or orphaned turns
    task_timeout: float = 120.0  # classic tasks (text, classification, detection…)
    media_task_timeout: float = 300.0  # image and audio generation
    video_task_timeout: float = 900.0  # video generation takes minutes
    max_tasks_per_plan: int = 10
    # Quotas, kept in the database (they hold across restarts and replicas); 0 turns one off.
    # Admins (Discord Manage Server, SLACK_ADMIN_USERS, the terminal) are exempt.
    requests_per_user_per_minute: int = 20
    requests_per_user_per_day: int = 200
    llm_tokens_per_user_per_day: int = 1_000_000
    requests_per_server_per_minute: int = 60  # a Discord server or a Slack workspace
    requests_per_server_per_day: int = 2_000
    llm_tokens_per_server_per_day: int = 10_000_000

    # --- limits on input ---
    max_attachment_bytes: int = 25 * 1024 * 1024
    max_image_pixels: int = 40_000_000
    history_turns: int = 10

    # --- storage ---
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

    # --- Discord ---
    discord_bot_token: SecretStr | None = Field(
        default=None, validation_alias=AliasChoices("DISCORD_BOT_TOKEN", "DISCORD_TOKEN")
    )
    discord_dev_guild_ids: IntList = []
    discord_shard_ids: Annotated[list[int] | None, NoDecode] = None
    discord_shard_count: int | None = None
    discord_allowed_guilds: IntList = []
    discord_denied_guilds: IntList = []
    discord_allowed_channels: IntList = []
    discord_denied_channels: IntList = []
    discord_allowed_roles: IntList = []
    discord_denied_roles: IntList = []
    discord_admin_roles: IntList = []  # members are admins (/config, server usage, no quotas)
    discord_api_base: str | None = None  # REST API base override (self-hosted proxy, tests)

    # --- Slack ---
    slack_bot_token: SecretStr | None = None
    slack_app_token: SecretStr | None = None
    slack_signing_secret: SecretStr | None = None
    slack_http_port: int = 3000
    slack_admin_users: Annotated[list[str], NoDecode] = []  # admins (usage, config, no quotas)
    slack_api_url: str | None = None  # Web API base override (self-hosted proxy, tests)

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

    @field_validator(
        "discord_dev_guild_ids",
        "discord_shard_ids",
        "discord_allowed_guilds",
        "discord_denied_guilds",
        "discord_allowed_channels",
        "discord_denied_channels",
        "discord_allowed_roles",
        "discord_denied_roles",
        "discord_admin_roles",
        "local_download_allow",
        "slack_admin_users",
        mode="before",
    )
    @classmethod
    def _split_csv(cls, value: object) -> object:
        return _csv(value)

    @model_validator(mode="after")
    def _resolve_data_dir(self) -> Settings:
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


@lru_cache(maxsize=1)
def get_settings() -> Settings:
    return Settings()
