"""Settings per server (a Discord server, a Slack workspace, the terminal).

An admin may set, for their server: the LLM model, the selection mode, the
tasks the planner may use, a pinned model per task, the quotas (the
``REQUESTS_PER_*`` / ``LLM_TOKENS_PER_*`` settings) and the answer's
language.  Every key left unset inherits the deployment's setting.

* :class:`ServerSettings` validates: an unknown task is an error naming the
  tasks there are (aliases are accepted and stored canonical); a pinned
  model must serve its task in the catalog when one is given as validation
  context (``ServerSettings.checked(data, catalog)``).
* :class:`ServerSettingsService` loads and saves them through
  :class:`core.store.server_settings.ServerSettingsStore`, with a bounded
  per-server cache: a save here clears the server's entry at once; another
  process's save is seen within ``ttl`` seconds.
* :func:`apply_settings` is pure: from a server's settings and the
  deployment's defaults it returns the :class:`AppliedSettings` one turn runs
  with (tasks offered, pinned candidates, selection mode, LLM model, quotas,
  the language instruction for the answer prompt).
"""

from __future__ import annotations

import logging
import re
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal, Unpack

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic_core import PydanticCustomError

from core.catalog import Catalog, ModelInfo
from core.clock import SYSTEM_CLOCK, Clock
from core.errors import ErrorCode, ErrorFields, InputRejected, SettingProblem, terse
from core.ratelimit import Quotas
from core.store.server_settings import ServerSettingsStore
from core.tasks import TASKS, canonical_task
from core.types import ConversationKey

log = logging.getLogger(__name__)

NO_SERVER = frozenset({"dm"})  # scopes that are not a server (Discord DMs)
PIN_PREFIXES = ("pinned_model.", "pinned_models.")
_MODEL_ID = re.compile(r"[\w.\-/:@+]{1,255}")
# A language name or code: letters (any script), spaces, hyphens, parentheses.
_LANGUAGE = re.compile(r"[^\W\d_](?:[^\W\d_]|[ \-()]){0,39}")
_PLATFORM = re.compile(r"[a-z][a-z0-9_-]{0,31}")

# Quota keys (the deployment's setting names) -> core.ratelimit.Quotas fields.
QUOTA_KEYS: dict[str, str] = {
    "requests_per_user_per_minute": "user_per_minute",
    "requests_per_user_per_day": "user_per_day",
    "llm_tokens_per_user_per_day": "user_tokens_per_day",
    "requests_per_server_per_minute": "server_per_minute",
    "requests_per_server_per_day": "server_per_day",
    "llm_tokens_per_server_per_day": "server_tokens_per_day",
}


class SettingError(InputRejected):
    """A setting an admin gave cannot be used: a ``SETTING_*`` code (or
    ``UNKNOWN_TASK``) with what would be accepted, worded in core.errors."""


@dataclass(frozen=True, slots=True)
class ServerKey:
    """A server: its platform and id (a Discord guild id, a Slack team id,
    ``local`` for the terminal)."""

    platform: str
    server: str

    @classmethod
    def parse(cls, text: str) -> ServerKey:
        """``discord:123…``, ``slack:T0…``, ``cli:local``."""
        platform, sep, server = text.strip().partition(":")
        if not sep or not _PLATFORM.fullmatch(platform) or not server.strip():
            raise SettingError(ErrorCode.SETTING_NOT_SERVER, value=text)
        return cls(platform, server.strip())

    @classmethod
    def of(cls, conversation: ConversationKey) -> ServerKey | None:
        """The server a conversation belongs to (None for a Discord DM)."""
        if conversation.scope in NO_SERVER:
            return None
        return cls(conversation.platform, conversation.scope)

    def __str__(self) -> str:
        return f"{self.platform}:{self.server}"


def _invalid(code: ErrorCode, **fields: Unpack[ErrorFields]) -> PydanticCustomError:
    """A validation error that carries ``code`` and ``fields`` (its message
    is their terse form, for logs): :func:`problems` reads them back."""
    return PydanticCustomError(
        code.value, "{terse}", {"terse": terse(code, fields), "fields": fields}
    )


def _task(name: str) -> str:
    task = canonical_task(name) if isinstance(name, str) else None
    if task is None:
        raise _invalid(ErrorCode.UNKNOWN_TASK, value=str(name), choices=tuple(TASKS))
    return task


class ServerSettings(BaseModel):
    """One server's settings; None (or absent) inherits the deployment's."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    llm_model: str | None = None
    model_selection: Literal["llm", "downloads"] | None = None
    allowed_tasks: tuple[str, ...] | None = None  # None: every task the deployment runs
    pinned_models: dict[str, str] = Field(default_factory=dict)  # task -> model id
    language: str | None = None
    requests_per_user_per_minute: int | None = Field(default=None, ge=0)
    requests_per_user_per_day: int | None = Field(default=None, ge=0)
    llm_tokens_per_user_per_day: int | None = Field(default=None, ge=0)
    requests_per_server_per_minute: int | None = Field(default=None, ge=0)
    requests_per_server_per_day: int | None = Field(default=None, ge=0)
    llm_tokens_per_server_per_day: int | None = Field(default=None, ge=0)

    @field_validator("llm_model")
    @classmethod
    def _model_name(cls, v: str | None) -> str | None:
        if v is not None and not _MODEL_ID.fullmatch(v):
            raise _invalid(ErrorCode.SETTING_NOT_MODEL_NAME, value=v)
        return v

    @field_validator("allowed_tasks")
    @classmethod
    def _allowed(cls, v: tuple[str, ...] | None) -> tuple[str, ...] | None:
        if v is None:
            return None
        wanted = {_task(name) for name in v}
        return tuple(t for t in TASKS if t in wanted)  # the table's order, no duplicates

    @field_validator("pinned_models")
    @classmethod
    def _pins(cls, v: dict[str, str]) -> dict[str, str]:
        out: dict[str, str] = {}
        for name, model in v.items():
            task = _task(name)
            if not isinstance(model, str) or not _MODEL_ID.fullmatch(model):
                raise _invalid(ErrorCode.SETTING_NOT_MODEL_ID, value=str(model))
            out[task] = model
        return out

    @field_validator("language")
    @classmethod
    def _language(cls, v: str | None) -> str | None:
        if v is None:
            return None
        v = " ".join(v.split())
        if not _LANGUAGE.fullmatch(v) or v.count(" ") > 2:
            raise _invalid(ErrorCode.SETTING_NOT_LANGUAGE, value=v)
        return v

    @model_validator(mode="after")
    def _consistent(self, info: ValidationInfo) -> ServerSettings:
        if self.allowed_tasks is not None:
            barred = sorted(t for t in self.pinned_models if t not in self.allowed_tasks)
            if barred:
                raise _invalid(ErrorCode.SETTING_PIN_BARRED, choices=tuple(barred))
        catalog = info.context.get("catalog") if isinstance(info.context, dict) else None
        if isinstance(catalog, Catalog):
            for task, model in self.pinned_models.items():
                if catalog.get(model, task) is None:
                    known = tuple(m.id for m in catalog.candidates(task, 5))
                    raise _invalid(
                        ErrorCode.SETTING_PIN_NOT_SERVED, model=model, task=task, choices=known
                    )
        return self

    # --- building -------------------------------------------------------

    @classmethod
    def checked(cls, data: Mapping[str, Any], catalog: Catalog | None = None) -> ServerSettings:
        """Validate ``data`` (against ``catalog`` for pinned models); a
        SettingError whose message names each bad key otherwise."""
        try:
            return cls.model_validate(dict(data), context={"catalog": catalog})
        except ValidationError as e:
            raise SettingError(ErrorCode.SETTING_INVALID, problems=problems(e)) from None

    @classmethod
    def lenient(cls, data: Mapping[str, Any], where: str = "") -> ServerSettings:
        """Stored settings as far as they are still valid (a task renamed,
        a key removed since they were saved): bad keys are dropped, with a
        log line, instead of failing every turn of the server."""
        data = dict(data)
        while True:
            try:
                return cls.model_validate(data)
            except ValidationError as e:
                bad = {str(err["loc"][0]) for err in e.errors() if err["loc"]} & set(data)
                # An error of the whole (a pin for a task no longer allowed): drop the pins.
                bad = bad or ({"pinned_models"} & set(data)) or set(data)
                log.warning(
                    "server settings %s: ignoring %s (%s)",
                    where,
                    ", ".join(sorted(bad)),
                    describe(e),
                )
                for key in bad:
                    del data[key]

    def stored(self) -> dict[str, Any]:
        """The JSON kept in the store: only the keys that are set."""
        return self.model_dump(mode="json", exclude_none=True, exclude_defaults=True)

    # --- one key at a time (the CLI, /config) ---------------------------

    def with_value(self, key: str, value: str, catalog: Catalog | None = None) -> ServerSettings:
        """These settings with ``key`` set from its text form: a comma list
        (or ``none``) for ``allowed_tasks``, ``pinned_model.TASK`` for a pin,
        a whole number for a quota."""
        data = self.stored()
        key = key.strip()
        pin = _pin_task(key)
        if pin is not None:
            data["pinned_models"] = {**data.get("pinned_models", {}), pin: value.strip()}
        elif key == "allowed_tasks":
            names = [] if value.strip().lower() == "none" else value.split(",")
            if any(not n.strip() for n in names):
                raise SettingError(ErrorCode.SETTING_TASK_LIST)
            data[key] = [n.strip() for n in names]
        elif key in QUOTA_KEYS:
            try:
                data[key] = int(value.strip().replace("_", ""))
            except ValueError:
                raise SettingError(ErrorCode.SETTING_NOT_NUMBER, key=key, value=value) from None
        elif key in ServerSettings.model_fields and key != "pinned_models":
            data[key] = value.strip()
        else:
            raise SettingError(ErrorCode.SETTING_UNKNOWN, key=key, choices=KEYS)
        return ServerSettings.checked(data, catalog)

    def without(self, key: str) -> ServerSettings:
        """These settings with ``key`` back to the deployment's."""
        data = self.stored()
        key = key.strip()
        pin = _pin_task(key)
        if pin is not None:
            pins = dict(data.get("pinned_models", {}))
            if pins.pop(pin, None) is None:
                raise SettingError(ErrorCode.SETTING_NOT_PINNED, task=pin)
            data["pinned_models"] = pins
        elif key in ServerSettings.model_fields:
            data.pop(key, None)
        else:
            raise SettingError(ErrorCode.SETTING_UNKNOWN, key=key, choices=KEYS)
        return ServerSettings.checked(data)


KEYS: tuple[str, ...] = (
    "llm_model",
    "model_selection",
    "allowed_tasks",
    "pinned_model.TASK",
    "language",
    *QUOTA_KEYS,
)


def _pin_task(key: str) -> str | None:
    for prefix in PIN_PREFIXES:
        if key.startswith(prefix):
            name = key[len(prefix) :]
            task = canonical_task(name)
            if task is None:
                raise SettingError(ErrorCode.UNKNOWN_TASK, value=name, choices=tuple(TASKS))
            return task
    return None


def problems(e: ValidationError) -> tuple[SettingProblem, ...]:
    """What is wrong, one problem per error: the key (empty: the whole), and
    a code with its fields (:func:`_invalid`'s; pydantic's own checks, a
    number below 0, say, are :attr:`ErrorCode.MESSAGE` with pydantic's words)."""
    found: list[SettingProblem] = []
    for err in e.errors():
        key = str(err["loc"][0]) if err["loc"] else ""
        ctx = err.get("ctx") or {}
        if err["type"] in _CODES and "fields" in ctx:
            code, fields = ErrorCode(err["type"]), ctx["fields"]
        else:
            detail = str(err["msg"]).removeprefix("Value error, ")
            code, fields = ErrorCode.MESSAGE, {"detail": detail}
        found.append({"key": key, "code": code.value, "fields": fields})
    return tuple(found)


_CODES = frozenset(c.value for c in ErrorCode)


def describe(e: ValidationError) -> str:
    """``allowed_tasks: unknown_task value='x' …`` — one clause per error, for a log line."""
    return "; ".join(
        f"{p['key']}: {terse(ErrorCode(p['code']), p['fields'])}"
        if p["key"]
        else terse(ErrorCode(p["code"]), p["fields"])
        for p in problems(e)
    )


# ------------------------------------------------------------ one turn


@dataclass(frozen=True, slots=True)
class AppliedSettings:
    """The deployment's settings with a server's applied: what a turn runs with."""

    runnable: tuple[str, ...]  # the tasks offered to the planner
    selection: Literal["llm", "downloads"]
    llm_model: str | None  # None: the deployment's
    quotas: Quotas
    pinned: Mapping[str, ModelInfo] = field(default_factory=dict)  # task -> the only candidate
    language: str | None = None

    def candidates(self, task: str, ranked: Sequence[ModelInfo]) -> list[ModelInfo]:
        """The candidates for ``task``: the pinned model alone, else ``ranked``."""
        pinned = self.pinned.get(task)
        return [pinned] if pinned is not None else list(ranked)

    def answer_instruction(self) -> str | None:
        """A line for the answer prompt's system message (None: no language set)."""
        if self.language is None:
            return None
        return (
            f"Write the whole answer in {self.language} (the language set for this server), "
            "whatever language the request is written in."
        )


def apply_settings(
    settings: ServerSettings | None,
    *,
    runnable: Sequence[str],
    catalog: Catalog,
    selection: Literal["llm", "downloads"],
    quotas: Quotas,
    llm_model: str | None = None,
    usable: Callable[[str, ModelInfo], bool] | None = None,
) -> AppliedSettings:
    """The deployment's per-turn inputs changed by a server's ``settings``.

    ``runnable``: the tasks the deployment can run now (the planner is
    offered those the server allows); ``usable(task, model)``: whether a
    backend can run a model (the router's test) — a pinned model that is
    gone from the catalog or cannot run is ignored, with a log line, and the
    task keeps its ranked candidates."""
    s = settings or ServerSettings()
    allowed = set(s.allowed_tasks) if s.allowed_tasks is not None else None
    tasks = tuple(t for t in runnable if allowed is None or t in allowed)
    pinned: dict[str, ModelInfo] = {}
    for task, model_id in s.pinned_models.items():
        info = catalog.get(model_id, task)
        if info is None or (usable is not None and not usable(task, info)):
            why = "is not in the catalog" if info is None else "cannot run here"
            log.warning(
                "pinned model %s for %s %s: using the ranked candidates", model_id, task, why
            )
            continue
        pinned[task] = info
    overrides = {
        field_name: getattr(s, key)
        for key, field_name in QUOTA_KEYS.items()
        if getattr(s, key) is not None
    }
    return AppliedSettings(
        runnable=tasks,
        selection=s.model_selection or selection,
        llm_model=s.llm_model or llm_model,
        quotas=replace(quotas, **overrides),
        pinned=pinned,
        language=s.language,
    )


# ------------------------------------------------------------ load, save, cache


class ServerSettingsService:
    """Settings per server, cached: at most ``max_entries`` servers, each
    for ``ttl`` seconds (another process's change shows within that), and
    cleared here at once by :meth:`set`, :meth:`unset` and :meth:`save`."""

    def __init__(
        self,
        store: ServerSettingsStore,
        *,
        catalog: Catalog | None = None,
        ttl: float = 30.0,
        max_entries: int = 1024,
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        self.store = store
        self.catalog = catalog
        self.ttl = ttl
        self.max_entries = max(1, max_entries)
        self._clock = clock
        self._cache: OrderedDict[ServerKey, tuple[float, ServerSettings]] = OrderedDict()

    async def get(self, key: ServerKey | None) -> ServerSettings:
        """The server's settings (empty for a DM or a server with none).
        StoreUnavailable when the store cannot be reached."""
        if key is None:
            return ServerSettings()
        now = self._clock.monotonic()
        hit = self._cache.get(key)
        if hit is not None and now - hit[0] < self.ttl:
            self._cache.move_to_end(key)
            return hit[1]
        row = await self.store.load(key.platform, key.server)
        settings = ServerSettings.lenient(row.settings, str(key)) if row else ServerSettings()
        self._remember(key, settings, now)
        return settings

    async def for_conversation(self, conversation: ConversationKey) -> ServerSettings:
        return await self.get(ServerKey.of(conversation))

    async def set(
        self, key: ServerKey, name: str, value: str, *, by: str | None = None
    ) -> ServerSettings:
        """Set one key (validated against the catalog); SettingError if bad."""
        return await self._update(key, lambda s: s.with_value(name, value, self.catalog), by)

    async def unset(self, key: ServerKey, name: str, *, by: str | None = None) -> ServerSettings:
        return await self._update(key, lambda s: s.without(name), by)

    async def save(
        self, key: ServerKey, settings: ServerSettings, *, by: str | None = None
    ) -> ServerSettings:
        """Replace the server's settings with ``settings`` (validated again)."""
        checked = ServerSettings.checked(settings.stored(), self.catalog)
        return await self._update(key, lambda _old: checked, by)

    async def listed(self) -> list[tuple[ServerKey, ServerSettings]]:
        """Every server with settings."""
        rows = await self.store.list()
        return [
            (
                ServerKey(r.platform, r.server),
                ServerSettings.lenient(r.settings, f"{r.platform}:{r.server}"),
            )
            for r in rows
        ]

    async def _update(
        self,
        key: ServerKey,
        change: Callable[[ServerSettings], ServerSettings],
        by: str | None,
    ) -> ServerSettings:
        def apply(old: dict[str, Any]) -> dict[str, Any]:
            return change(ServerSettings.lenient(old, str(key))).stored()

        self._cache.pop(key, None)
        try:
            new = await self.store.update(key.platform, key.server, apply, by=by)
        finally:
            self._cache.pop(key, None)
        settings = ServerSettings.lenient(new, str(key))
        log.info("server %s settings changed by %s: %s", key, by or "?", settings.stored())
        return settings

    def _remember(self, key: ServerKey, settings: ServerSettings, now: float) -> None:
        self._cache[key] = (now, settings)
        self._cache.move_to_end(key)
        while len(self._cache) > self.max_entries:
            self._cache.popitem(last=False)
