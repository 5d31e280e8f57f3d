"""What an OpenAI-compatible server tells :mod:`core.llm`, read in one place.

* :class:`Fault` – an error answer, from its structured fields (``code``,
  ``type``, ``param``, llama.cpp's ``n_prompt_tokens``/``n_ctx``).  The
  message text is read only for what some servers put nowhere else: vLLM's
  context sizes ("maximum context length is N tokens … M in the messages")
  and a parameter an older server names only in prose.
* :func:`retry_delay` – whether sending the same request again can help.
* :func:`context_size` and :func:`model_ids` – the server's self-description
  (llama.cpp ``GET /props``, ``GET /v1/models``).
* :func:`overflow` – the failure of a prompt the context cannot hold.
"""

from __future__ import annotations

import json
import random
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import openai

from core.errors import ErrorCode, ErrorFields, RunFailed

MAX_RETRY_AFTER = 60.0  # seconds; a server asking for a longer wait fails the call now

_OVERFLOW_TEXT = re.compile(
    r"maximum context length|context length exceeded|exceeds the available context size",
    re.IGNORECASE,
)
_UNKNOWN_MODEL_CODES = frozenset(("model_not_found", "model_not_supported"))


def as_int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


@dataclass(frozen=True, slots=True)
class Fault:
    """What an error answer says (empty strings when a field is absent)."""

    status: int | None
    code: str
    kind: str  # the error's "type"
    param: str
    message: str
    n_prompt: int | None = None  # prompt tokens, when the server counted them
    n_ctx: int | None = None  # the server's context size, when it said

    @classmethod
    def of(cls, exc: openai.OpenAIError) -> Fault:
        status = exc.status_code if isinstance(exc, openai.APIStatusError) else None
        # The SDK keeps the "error" object of {"error": {...}} bodies, else the whole body.
        body = exc.body if isinstance(exc, openai.APIError) else None
        fields: Mapping[str, Any] = body if isinstance(body, Mapping) else {}
        message = fields.get("message")
        if not isinstance(message, str):
            message = json.dumps(body) if isinstance(body, Mapping | list) else str(body or "")
        n_prompt, n_ctx = as_int(fields.get("n_prompt_tokens")), as_int(fields.get("n_ctx"))
        if n_ctx is None and (m := re.search(r"maximum context length is (\d+)", message)):
            n_ctx = int(m.group(1))
        if n_prompt is None and (
            m := re.search(r"(\d+) in the messages|resulted in (\d+) tokens", message)
        ):
            n_prompt = int(m.group(1) or m.group(2))
        return cls(
            status=status,
            code=str(fields.get("code") or ""),
            kind=str(fields.get("type") or ""),
            param=str(fields.get("param") or ""),
            message=message,
            n_prompt=n_prompt,
            n_ctx=n_ctx,
        )

    @property
    def overflow(self) -> bool:
        """The prompt (and cap) did not fit the model's context."""
        if self.code == "context_length_exceeded" or self.kind == "exceed_context_size_error":
            return True
        client_error = self.status is not None and 400 <= self.status < 500
        return client_error and bool(_OVERFLOW_TEXT.search(self.message))

    @property
    def unknown_model(self) -> bool:
        """The server does not serve the model asked for (OpenAI 404, HF router 400)."""
        return self.status == 404 or self.code in _UNKNOWN_MODEL_CODES

    def names(self, *params: str, by_param: bool) -> bool:
        """Whether the error is about one of ``params``: its ``param`` field
        (``by_param``), or else its message naming one of them."""
        if by_param:
            return self.param in params
        return any(re.search(rf"\b{p}\b", self.message) for p in params)

    def said(self, limit: int = 200) -> str:
        """The server's own words, one line, or "" for none or an HTML page."""
        text = " ".join(self.message.split())[:limit]
        return "" if text.startswith("<") else text


def retry_delay(exc: openai.OpenAIError, fault: Fault, attempt: int) -> float | None:
    """Seconds to wait before sending the same request again, or None.

    Never after a timeout (an identical request would only time out again);
    only for failures a retry can cure (connection refused or reset, 429,
    5xx), honouring Retry-After up to :data:`MAX_RETRY_AFTER`, otherwise a
    short exponential backoff with jitter.
    """
    if isinstance(exc, openai.APITimeoutError):
        return None
    backoff: float = min(0.5 * 2.0**attempt, 8.0) * (0.75 + random.random() / 4)
    if isinstance(exc, openai.APIConnectionError):
        return backoff
    if not isinstance(exc, openai.APIStatusError):
        return None
    if (exc.status_code != 429 and exc.status_code < 500) or fault.code == "insufficient_quota":
        return None
    after = retry_after(exc.response.headers)
    if after is None:
        return backoff
    return after if after <= MAX_RETRY_AFTER else None


def retry_after(headers: Mapping[str, str]) -> float | None:
    """``retry-after-ms`` or ``retry-after`` (seconds) in seconds, if given."""
    for name, scale in (("retry-after-ms", 1000.0), ("retry-after", 1.0)):
        value = headers.get(name)
        if value is None:
            continue
        try:
            seconds: float = max(0.0, float(value) / scale)
        except ValueError:
            continue
        return seconds
    return None


def model_entries(listing: object) -> list[Mapping[str, Any]]:
    """The model objects of a ``GET /v1/models`` answer."""
    data = listing.get("data") if isinstance(listing, Mapping) else None
    return [d for d in data if isinstance(d, Mapping)] if isinstance(data, list) else []


def model_ids(listing: object) -> list[str]:
    return [m["id"] for m in model_entries(listing) if isinstance(m.get("id"), str)]


def context_from_props(props: object) -> int | None:
    """llama.cpp ``GET /props``: ``default_generation_settings.n_ctx``."""
    if not isinstance(props, Mapping):
        return None
    settings = props.get("default_generation_settings")
    found = as_int(settings.get("n_ctx")) if isinstance(settings, Mapping) else None
    return found or as_int(props.get("n_ctx"))


def context_from_models(listing: object, model: str | None) -> int | None:
    """vLLM's ``max_model_len``, else llama.cpp's ``meta.n_ctx_train``, for
    ``model`` (or the only model listed)."""
    entries = model_entries(listing)
    for entry in entries:
        if len(entries) > 1 and entry.get("id") != model:
            continue
        meta = entry.get("meta")
        found = as_int(entry.get("max_model_len")) or (
            as_int(meta.get("n_ctx_train")) if isinstance(meta, Mapping) else None
        )
        if found:
            return found
    return None


def overflow(host: str, prompt: int | None, n_ctx: int | None, *, estimated: bool) -> RunFailed:
    """The failure of a prompt that does not fit the context (``prompt``:
    its tokens, ``n_ctx``: the context's, each None when unknown)."""
    fields: ErrorFields = {"host": host, "estimated": estimated}
    if prompt:
        fields["prompt_tokens"] = prompt
    if n_ctx:
        fields["n_ctx"] = n_ctx
    return RunFailed(ErrorCode.LLM_PROMPT_TOO_LONG, **fields)
