"""Choosing a session's provider: its own config, or the daemon's default."""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager

from protocol.messages.client import (
    AnthropicProviderConfig,
    ProviderConfig,
    ScriptedProviderConfig,
)
from protocol.messages.events import NO_PROVIDER_ERROR
from runtime.agent.providers.base import (
    ModelRequest,
    Provider,
    ProviderError,
    StreamChunk,
)
from runtime.agent.providers.scripted import ScriptedProvider, load_script, parse_script


class ProviderConfigError(ValueError):
    """A session's provider configuration that no provider can be made from."""


class UnconfiguredProvider:
    """A session opened with no provider: every model call fails, saying how to fix it."""

    @asynccontextmanager
    async def stream(self, request: ModelRequest) -> AsyncIterator[AsyncIterator[StreamChunk]]:
        raise ProviderError(f"{NO_PROVIDER_ERROR}: pass `provider` in session.new or start "
                            "quiesce serve with --provider")
        yield  # pragma: no cover


def open_provider(config: ProviderConfig | None, environ: Mapping[str, str] | None = None
                  ) -> tuple[ProviderConfig | None, Provider]:
    """The provider a config names, and the config a session records for it: the
    model and base URL it resolved to from the environment filled in, so that the
    session reopens on the same model in a daemon started without that environment."""
    if config is None:
        return None, UnconfiguredProvider()
    if isinstance(config, ScriptedProviderConfig):
        if (config.script is None) == (config.path is None):
            raise ProviderConfigError("a scripted provider needs exactly one of script, path")
        try:
            responses = (load_script(config.path) if config.path is not None
                         else parse_script(config.script or []))
        except ValueError as exc:
            raise ProviderConfigError(str(exc)) from exc
        return config, ScriptedProvider(responses)
    if isinstance(config, AnthropicProviderConfig):
        from runtime.agent.providers import anthropic

        try:
            claude = anthropic.provider_from_config(config, environ)
        except ValueError as exc:
            raise ProviderConfigError(str(exc)) from exc
        return anthropic.recorded(config, claude.config), claude
    from runtime.agent.providers import openai, openai_config

    try:
        compatible = openai.provider_from_config(config, environ)
    except ValueError as exc:
        raise ProviderConfigError(str(exc)) from exc  # it names the provider
    return openai_config.recorded(config, compatible.config), compatible
