"""The OpenAI-compatible chat client: one call in, text and token counts out.

The agent's stages only need "send these messages, give me the text".  This
wrapper adds what every stage would otherwise repeat: token accounting into a
:class:`~core.types.Usage`, a JSON mode that degrades gracefully on local
servers that do not know ``response_format``, and failures turned into
:class:`~core.errors.RunFailed` messages a user can read.  Errors are
classified by the SDK's exception types, never by their text, and the API key
never appears in a message or a log line.  Retries are the SDK's own
(``max_retries``); this module adds none.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import cast
from urllib.parse import urlsplit

import openai
from openai.types.chat import ChatCompletion, ChatCompletionMessageParam
from openai.types.shared_params import ResponseFormatJSONObject

from core.errors import ConfigError, RunFailed
from core.types import Usage

log = logging.getLogger(__name__)

_JSON_FORMAT: ResponseFormatJSONObject = {"type": "json_object"}
# Local servers ignore the key but the SDK insists on one.
_PLACEHOLDER_KEY = "no-key"


@dataclass(frozen=True, slots=True)
class _Params:
    max_tokens: int | None
    temperature: float


class LLM:
    """A thin, long-lived wrapper over :class:`openai.AsyncOpenAI`.

    Build one in the composition root and ``await llm.aclose()`` on shutdown.
    """

    def __init__(
        self,
        *,
        api_key: str,
        base_url: str | None,
        model: str,
        timeout: float = 120,
        max_retries: int = 2,
    ) -> None:
        if not api_key:
            if base_url is None:
                raise ConfigError(
                    "OPENAI_API_KEY is not set: set it, or point OPENAI_BASE_URL at a "
                    "local OpenAI-compatible server"
                )
            api_key = _PLACEHOLDER_KEY
        self.model = model
        self.timeout = timeout
        self._client = openai.AsyncOpenAI(
            api_key=api_key, base_url=base_url, timeout=timeout, max_retries=max_retries
        )
        self.host = _host_of(str(self._client.base_url))
        # Flipped off the first time the server refuses response_format.
        self._json_mode_ok = True

    async def complete(
        self,
        messages: list[dict[str, str]],
        *,
        usage: Usage,
        json_mode: bool = False,
        max_tokens: int | None = None,
        temperature: float = 0.0,
    ) -> str:
        """One non-streaming chat completion; returns the assistant's text.

        The call's tokens are added to ``usage`` (0 when the server reports
        none).  With ``json_mode`` the server is asked for a JSON object; a
        server that answers that request with 400 is asked again without it,
        and never asked for it again.  Every failure raises ``RunFailed``.
        """
        params = _Params(max_tokens=max_tokens, temperature=temperature)
        want_json = json_mode and self._json_mode_ok
        started = time.monotonic()
        try:
            try:
                response = await self._create(messages, params, json_format=want_json)
            except (openai.BadRequestError, openai.UnprocessableEntityError):
                if not want_json:
                    raise
                log.info("llm %s refused response_format; not sending it again", self.host)
                self._json_mode_ok = want_json = False
                response = await self._create(messages, params, json_format=False)
        except openai.OpenAIError as exc:
            message = self._describe(exc)
            log.warning(
                "llm call failed model=%s host=%s cause=%s status=%s latency=%.2fs",
                self.model,
                self.host,
                type(exc).__name__,
                getattr(exc, "status_code", None),
                time.monotonic() - started,
            )
            raise RunFailed(message) from exc
        latency = time.monotonic() - started

        prompt_tokens = completion_tokens = 0
        if response.usage is not None:
            prompt_tokens = response.usage.prompt_tokens or 0
            completion_tokens = response.usage.completion_tokens or 0
        usage.add(prompt_tokens, completion_tokens)
        log.debug(
            "llm call model=%s prompt_tokens=%d completion_tokens=%d latency=%.2fs json=%s",
            self.model,
            prompt_tokens,
            completion_tokens,
            latency,
            want_json,
        )
        if not response.choices:
            raise RunFailed(f"The language model at {self.host} returned no answer")
        return response.choices[0].message.content or ""

    async def aclose(self) -> None:
        """Close the HTTP connection pool."""
        await self._client.close()

    async def _create(
        self, messages: list[dict[str, str]], params: _Params, *, json_format: bool
    ) -> ChatCompletion:
        return await self._client.chat.completions.create(
            model=self.model,
            # Plain role/content dicts; the server validates them.
            messages=cast(list[ChatCompletionMessageParam], messages),
            stream=False,
            temperature=params.temperature,
            max_tokens=openai.omit if params.max_tokens is None else params.max_tokens,
            response_format=_JSON_FORMAT if json_format else openai.omit,
        )

    def _describe(self, exc: openai.OpenAIError) -> str:
        """A user-facing sentence for an SDK failure (by type; no secrets)."""
        who = f"The language model at {self.host}"
        # APITimeoutError subclasses APIConnectionError: test it first.
        if isinstance(exc, openai.APITimeoutError):
            return f"{who} did not answer within {self.timeout:g} s"
        if isinstance(exc, openai.APIConnectionError):
            return f"{who} could not be reached"
        if isinstance(exc, openai.AuthenticationError | openai.PermissionDeniedError):
            return f"{who} rejected the API key (check OPENAI_API_KEY)"
        if isinstance(exc, openai.NotFoundError):
            return f"{who} does not know model {self.model} (check LLM_MODEL)"
        if isinstance(exc, openai.RateLimitError):
            return f"{who} is rate limiting us (HTTP 429); try again in a moment"
        if isinstance(exc, openai.APIStatusError):
            return f"{who} returned an error (HTTP {exc.status_code})"
        if isinstance(exc, openai.APIResponseValidationError):
            return f"{who} sent an answer that could not be read"
        return f"{who} failed ({type(exc).__name__})"


def _host_of(base_url: str) -> str:
    """host[:port] of a URL, without any user:password part."""
    parts = urlsplit(base_url)
    host = parts.hostname or base_url
    return f"{host}:{parts.port}" if parts.port else host
