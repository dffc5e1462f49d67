"""Token usage: the providers' usage reports read from their wire shapes, and the estimate
for a response whose provider reported nothing.

The wire modules hand their usage objects here, so reading usage stays out of their
stream logic. The estimate is about 4 characters a token (the usual rule of thumb for
English text and code); anything estimated is marked so.
"""

from __future__ import annotations

import msgspec

from protocol.messages.events import TokenUsage
from runtime.agent.providers.base import (
    AssistantMessage,
    ModelMessage,
    ModelRequest,
    ToolMessage,
    UsageReport,
    UserMessage,
)

CHARS_PER_TOKEN = 4


class OpenAIPromptDetails(msgspec.Struct, frozen=True):
    cached_tokens: int | None = None


class OpenAIUsage(msgspec.Struct, frozen=True):
    """Chat Completions' ``usage`` (the last event's, with ``stream_options.include_usage``)."""

    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    prompt_tokens_details: OpenAIPromptDetails | None = None


def from_openai(usage: OpenAIUsage) -> UsageReport:
    details = usage.prompt_tokens_details
    return UsageReport(usage.prompt_tokens or 0, usage.completion_tokens or 0,
                       (details.cached_tokens or 0) if details is not None else 0)


def from_anthropic(input_tokens: int | None, output_tokens: int | None,
                   cache_read: int | None, cache_creation: int | None) -> UsageReport:
    """Messages' counts: ``input_tokens`` excludes the tokens read from or written to the
    cache, so the prompt's size is their sum; ``cachedInput`` is the part read."""
    read = cache_read or 0
    return UsageReport((input_tokens or 0) + read + (cache_creation or 0),
                       output_tokens or 0, read)


def tokens_of(text: str) -> int:
    return (len(text) + CHARS_PER_TOKEN - 1) // CHARS_PER_TOKEN


def message_tokens(message: ModelMessage) -> int:
    if isinstance(message, UserMessage):
        return tokens_of(message.text) + 4
    if isinstance(message, ToolMessage):
        return tokens_of(message.text) + 4
    assert isinstance(message, AssistantMessage)
    calls = sum(tokens_of(c.name) + tokens_of(msgspec.json.encode(c.args).decode())
                for c in message.tool_calls)
    return tokens_of(message.text) + tokens_of(message.reasoning) + calls + 4


def history_tokens(messages: tuple[ModelMessage, ...] | list[ModelMessage]) -> int:
    """The estimated size of a history in tokens."""
    return sum(message_tokens(m) for m in messages)


def request_tokens(request: ModelRequest) -> int:
    tools = sum(tokens_of(t.name) + tokens_of(t.description)
                + tokens_of(msgspec.json.encode(t.parameters).decode()) for t in request.tools)
    return tokens_of(request.system) + history_tokens(request.messages) + tools


def usage_of(report: UsageReport | None, request: ModelRequest, output_text: str,
             output_calls: int = 0) -> TokenUsage:
    """A response's usage: the provider's report, or the estimate (marked) without one."""
    if report is not None:
        return TokenUsage(report.input, report.output, report.cached_input)
    return TokenUsage(request_tokens(request), tokens_of(output_text) + 16 * output_calls,
                      0, estimated=True)
