"""The anthropic provider: Anthropic's Messages API, streamed.

One step is one ``POST {base_url}/v1/messages`` with ``"stream": true``, the
``x-api-key`` and ``anthropic-version`` headers; the wire format is :mod:`.anthropic_wire`
(the request) and :mod:`.anthropic_stream` (its events); the I/O, the close-at-once on a
stop and the error mapping are the shared :func:`runtime.agent.providers.http.post_stream`.

Configuration (:class:`AnthropicConfig`), resolved once when a session opens:
the session's ``{"kind": "anthropic", ...}`` or the daemon's default, with what
it leaves out from ``ANTHROPIC_BASE_URL`` (default ``https://api.anthropic.com``)
and ``ANTHROPIC_MODEL``; the key from the variable ``apiKeyEnv`` names (default
``ANTHROPIC_API_KEY``). A key is required for Anthropic's own API; a different
base URL (a proxy or gateway) may do without. The key goes only into the
``x-api-key`` header: it is kept out of reprs and log lines, and masked if an
error body echoes it.
"""

from __future__ import annotations

import logging
import os
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

import httpx
import msgspec

from protocol.messages.client import AnthropicProviderConfig
from runtime.agent.providers.anthropic_stream import MessagesStreamDecoder, error_text
from runtime.agent.providers.anthropic_wire import Settings, encode_request
from runtime.agent.providers.base import ModelRequest, StreamChunk
from runtime.agent.providers.http import post_stream
from runtime.agent.providers.sse import DEFAULT_MAX_EVENT_BYTES

__all__ = ["DEFAULT_BASE_URL", "AnthropicConfig", "AnthropicProvider", "provider_from_config",
           "recorded"]

_log = logging.getLogger(__name__)

DEFAULT_BASE_URL = "https://api.anthropic.com"
API_VERSION = "2023-06-01"
DEFAULT_MAX_TOKENS = 8192


@dataclass(frozen=True)
class AnthropicConfig:
    """Where to stream from and with which settings; ``timeout`` is the longest
    silence accepted while sending or streaming (s), ``connect_timeout`` bounds
    connecting. ``max_tokens`` None: :data:`DEFAULT_MAX_TOKENS`, plus the thinking
    budget when thinking is on (the API wants ``max_tokens`` above the budget)."""

    model: str
    base_url: str = DEFAULT_BASE_URL
    api_key: str | None = field(default=None, repr=False)
    timeout: float = 600.0
    connect_timeout: float = 10.0
    temperature: float | None = None
    max_tokens: int | None = None
    thinking_budget: int | None = None
    prompt_caching: bool = True

    def __post_init__(self) -> None:
        if not self.model:
            raise ValueError("anthropic: a model is required")
        if not self.base_url.startswith(("http://", "https://")):
            raise ValueError(f"anthropic: base URL must be http(s), got {self.base_url!r}")
        if self.timeout <= 0 or self.connect_timeout <= 0:
            raise ValueError("anthropic: timeouts must be positive")
        budget = self.thinking_budget
        if budget is not None and self.max_tokens is not None and self.max_tokens <= budget:
            raise ValueError(f"anthropic: maxTokens ({self.max_tokens}) must be above "
                             f"thinkingBudget ({budget})")
        if budget is not None and self.temperature is not None and self.temperature != 1:
            raise ValueError("anthropic: thinking works only at the default temperature; "
                             "leave temperature out when thinkingBudget is set")
        base = self.base_url.rstrip("/")
        object.__setattr__(self, "base_url", base.removesuffix("/v1"))

    @property
    def url(self) -> str:
        return f"{self.base_url}/v1/messages"

    @property
    def settings(self) -> Settings:
        max_tokens = self.max_tokens
        if max_tokens is None:
            max_tokens = DEFAULT_MAX_TOKENS + (self.thinking_budget or 0)
        return Settings(self.model, max_tokens, self.temperature, self.thinking_budget,
                        self.prompt_caching)

    @classmethod
    def resolve(cls, config: AnthropicProviderConfig,
                environ: Mapping[str, str] | None = None) -> AnthropicConfig:
        env = os.environ if environ is None else environ
        model = config.model or env.get("ANTHROPIC_MODEL", "")
        if not model:
            raise ValueError("anthropic: no model in the provider config and "
                             "ANTHROPIC_MODEL is unset")
        base_url = config.base_url or env.get("ANTHROPIC_BASE_URL") or DEFAULT_BASE_URL
        key_env = config.api_key_env or "ANTHROPIC_API_KEY"
        api_key = env.get(key_env) or None
        if api_key is None and (config.api_key_env is not None
                                or base_url.rstrip("/") == DEFAULT_BASE_URL):
            raise ValueError(f"anthropic: no API key: {key_env} is not set")
        return cls(model=model, base_url=base_url, api_key=api_key,
                   temperature=config.temperature, max_tokens=config.max_tokens,
                   thinking_budget=config.thinking_budget,
                   prompt_caching=config.prompt_caching)


def recorded(config: AnthropicProviderConfig,
             resolved: AnthropicConfig) -> AnthropicProviderConfig:
    """What a session's log keeps: the config with the model and base URL it resolved
    to (never the key: only the name of its variable)."""
    return msgspec.structs.replace(config, model=resolved.model, base_url=resolved.base_url)


class AnthropicProvider:
    """Streams steps from the Messages API (see the module docstring). Without
    ``client``, every stream uses its own short-lived httpx client."""

    def __init__(self, config: AnthropicConfig, *, client: httpx.AsyncClient | None = None,
                 max_event_bytes: int = DEFAULT_MAX_EVENT_BYTES) -> None:
        self._config = config
        self._client = client
        self._max_event_bytes = max_event_bytes
        self._timeout = httpx.Timeout(config.timeout, connect=config.connect_timeout)
        headers = {
            "Content-Type": "application/json",
            "Accept": "text/event-stream",
            "Accept-Encoding": "identity",
            "anthropic-version": API_VERSION,
        }
        if config.api_key:
            headers["x-api-key"] = config.api_key
        self._headers = headers

    @property
    def config(self) -> AnthropicConfig:
        return self._config

    @asynccontextmanager
    async def stream(self, request: ModelRequest) -> AsyncIterator[AsyncIterator[StreamChunk]]:
        url = self._config.url
        _log.debug("anthropic: POST %s model=%s messages=%d tools=%d", url,
                   self._config.model, len(request.messages), len(request.tools))
        async with post_stream(vendor="anthropic", url=url,
                               body=encode_request(self._config.settings, request),
                               headers=self._headers, http_timeout=self._timeout,
                               decoder=MessagesStreamDecoder(self._max_event_bytes),
                               error_text=error_text, secrets=(self._config.api_key,),
                               client=self._client) as chunks:
            yield chunks


def provider_from_config(config: AnthropicProviderConfig,
                         environ: Mapping[str, str] | None = None) -> AnthropicProvider:
    """The provider ``{"kind": "anthropic", ...}`` names; :class:`ValueError` when the
    config and environment name no model or no key."""
    return AnthropicProvider(AnthropicConfig.resolve(config, environ))
