"""The openai provider's configuration: where to stream from, which model, which settings.

A session's ``{"kind": "openai", ...}`` (or the daemon's default) is resolved
against the environment once, when the session opens: ``OPENAI_BASE_URL``
(default the OpenAI API), ``OPENAI_MODEL`` and the key variable (``apiKeyEnv``,
default ``OPENAI_API_KEY``, which may be unset: local servers often need none; a
variable named explicitly must be set). The key never enters a config the
session log records; :func:`recorded` is what it records instead.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

import msgspec

from protocol.messages.client import OpenAIProviderConfig, ReasoningEffort

__all__ = ["DEFAULT_BASE_URL", "OpenAIConfig", "recorded"]

DEFAULT_BASE_URL = "https://api.openai.com/v1"


@dataclass(frozen=True)
class OpenAIConfig:
    """Where to stream from. ``timeout`` is the longest silence accepted while
    sending or streaming (seconds), not a cap on a whole response;
    ``connect_timeout`` bounds connecting. The model settings are sent only when
    set (see :class:`~protocol.messages.client.OpenAIProviderConfig`)."""

    model: str
    base_url: str = DEFAULT_BASE_URL
    api_key: str | None = field(default=None, repr=False)
    timeout: float = 600.0
    connect_timeout: float = 10.0
    headers: Mapping[str, str] = field(default_factory=dict, repr=False)
    temperature: float | None = None
    max_tokens: int | None = None
    max_completion_tokens: int | None = None
    reasoning_effort: ReasoningEffort | None = None

    def __post_init__(self) -> None:
        if not self.model:
            raise ValueError("openai: a model is required")
        if not self.base_url.startswith(("http://", "https://")):
            raise ValueError(f"openai: base URL must be http(s), got {self.base_url!r}")
        if self.timeout <= 0 or self.connect_timeout <= 0:
            raise ValueError("openai: timeouts must be positive")
        object.__setattr__(self, "base_url", self.base_url.rstrip("/"))
        object.__setattr__(self, "headers", MappingProxyType(dict(self.headers)))

    @property
    def url(self) -> str:
        return f"{self.base_url}/chat/completions"

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> OpenAIConfig:
        """``OPENAI_BASE_URL`` (default the OpenAI API), ``OPENAI_MODEL`` (required),
        ``OPENAI_API_KEY`` (optional: local servers often need none)."""
        env = os.environ if environ is None else environ
        model = env.get("OPENAI_MODEL", "")
        if not model:
            raise ValueError("openai: OPENAI_MODEL is not set")
        return cls(model=model,
                   base_url=env.get("OPENAI_BASE_URL") or DEFAULT_BASE_URL,
                   api_key=env.get("OPENAI_API_KEY") or None)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any],
                  environ: Mapping[str, str] | None = None) -> OpenAIConfig:
        """Session config ``{"kind": "openai", "baseUrl"?, "model"?, "apiKeyEnv"?,
        "timeout"?, "connectTimeout"?, "headers"?, ...settings}``. Missing ``baseUrl``
        and ``model`` come from the environment as in :meth:`from_env`. The key is
        never in the config (it would land in session logs): ``apiKeyEnv`` names
        the variable holding it."""
        data = dict(data)
        extra = {name: data.pop(name) for name in ("timeout", "connectTimeout", "headers")
                 if name in data}
        try:
            config = msgspec.convert(data, OpenAIProviderConfig)
            transport = msgspec.convert(extra, _Transport)
        except msgspec.ValidationError as exc:
            raise ValueError(f"openai: invalid provider config: {exc}") from exc
        return cls.resolve(config, timeout=transport.timeout,
                           connect_timeout=transport.connect_timeout,
                           headers=transport.headers, environ=environ)

    @classmethod
    def resolve(cls, config: OpenAIProviderConfig, *, timeout: float = 600.0,
                connect_timeout: float = 10.0, headers: Mapping[str, str] | None = None,
                environ: Mapping[str, str] | None = None) -> OpenAIConfig:
        """Fill what a config leaves out from the environment (see the module docstring)."""
        env = os.environ if environ is None else environ
        model = config.model or env.get("OPENAI_MODEL", "")
        if not model:
            raise ValueError("openai: no model in the provider config and OPENAI_MODEL is unset")
        key_env = config.api_key_env or "OPENAI_API_KEY"
        api_key = env.get(key_env) or None
        if config.api_key_env is not None and api_key is None:
            raise ValueError(f"openai: apiKeyEnv names {key_env}, which is not set")
        return cls(model=model,
                   base_url=config.base_url or env.get("OPENAI_BASE_URL") or DEFAULT_BASE_URL,
                   api_key=api_key, timeout=timeout, connect_timeout=connect_timeout,
                   headers=headers or {}, temperature=config.temperature,
                   max_tokens=config.max_tokens,
                   max_completion_tokens=config.max_completion_tokens,
                   reasoning_effort=config.reasoning_effort)


class _Transport(msgspec.Struct, frozen=True, forbid_unknown_fields=True, rename="camel"):
    timeout: float = 600.0
    connect_timeout: float = 10.0
    headers: dict[str, str] = msgspec.field(default_factory=dict)


def recorded(config: OpenAIProviderConfig, resolved: OpenAIConfig) -> OpenAIProviderConfig:
    """What a session's log keeps: the config with the model and base URL it resolved
    to, so a daemon started without the environment reopens it on the same model
    (never the key: only the name of its variable)."""
    return msgspec.structs.replace(config, model=resolved.model, base_url=resolved.base_url)
