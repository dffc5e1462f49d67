"""``--provider`` of ``quiesce serve``, ``acp`` and ``chat``: the forms it takes, each the
provider configuration a session is opened with (``session.new``'s ``provider``). Light
(protocol only): the commands check it before anything heavy is imported, and chat, a
client of the daemon, reads it without building any part of the daemon."""

from __future__ import annotations

from protocol.messages.client import (
    AnthropicProviderConfig,
    OpenAIProviderConfig,
    ProviderConfig,
    ScriptedProviderConfig,
)

OPTION_FORMS = "scripted:FILE, openai or anthropic"


class ProviderOptionError(ValueError):
    """``--provider`` is none of ``OPTION_FORMS``; the message says so."""


def parse_provider_option(option: str) -> ProviderConfig:
    """``scripted:FILE``, ``openai`` or ``anthropic`` (``quiesce serve --provider``)."""
    kind, _, rest = option.partition(":")
    if kind == "scripted" and rest:
        return ScriptedProviderConfig(path=rest)
    if kind == "openai" and not rest:
        return OpenAIProviderConfig()
    if kind == "anthropic" and not rest:
        return AnthropicProviderConfig()
    raise ProviderOptionError(f"--provider must be {OPTION_FORMS}, not {option!r}")
