"""Choosing a session's provider: its own config, or the daemon's default."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from protocol.messages.client import OpenAIProviderConfig, ProviderConfig, ScriptedProviderConfig
from runtime.providers.base import (
    ModelRequest,
    Provider,
    ProviderError,
    StreamChunk,
)
from runtime.providers.scripted import ScriptedProvider, load_script, parse_script


class ProviderConfigError(ValueError):
    pass


def parse_provider_option(option: str) -> ProviderConfig:
    """``scripted:FILE`` or ``openai`` (the ``--provider`` option of ``quiesce serve``)."""
    kind, _, rest = option.partition(":")
    if kind == "scripted" and rest:
        return ScriptedProviderConfig(path=rest)
    if kind == "openai" and not rest:
        return OpenAIProviderConfig()
    raise ProviderConfigError(f"--provider must be scripted:FILE or openai, not {option!r}")


NO_PROVIDER_ERROR = "no model provider is configured"  # how the turn's error begins


class UnconfiguredProvider:
    """A session opened with no provider: every model call fails, saying how to fix it."""

    @asynccontextmanager
    async def stream(self, request: ModelRequest) -> AsyncIterator[AsyncIterator[StreamChunk]]:
        raise ProviderError(f"{NO_PROVIDER_ERROR}: pass `provider` in session.new or start "
                            "quiesce serve with --provider")
        yield  # pragma: no cover


def make_provider(config: ProviderConfig | None) -> Provider:
    if config is None:
        return UnconfiguredProvider()
    if isinstance(config, ScriptedProviderConfig):
        if (config.script is None) == (config.path is None):
            raise ProviderConfigError("a scripted provider needs exactly one of script, path")
        try:
            responses = (load_script(config.path) if config.path is not None
                         else parse_script(config.script or []))
        except ValueError as exc:
            raise ProviderConfigError(str(exc)) from exc
        return ScriptedProvider(responses)
    from runtime.providers.openai import OpenAIProvider, provider_from_config

    try:
        provider: OpenAIProvider = provider_from_config(config)
    except ValueError as exc:
        raise ProviderConfigError(str(exc)) from exc  # it names the provider
    return provider
