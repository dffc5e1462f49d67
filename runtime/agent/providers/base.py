"""What a provider is: a model request in, an async stream of chunks out.

A provider yields a tool call only once it is complete (all of its arguments
streamed), so a stop mid-stream can drop half-streamed calls without the agent
ever having seen them. Leaving the stream's context (a stop cancels the
consumer) must close whatever backs it (an HTTP response, a timer).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field
from typing import Any, Protocol


@dataclass(frozen=True)
class TextDelta:
    text: str


@dataclass(frozen=True)
class ReasoningDelta:
    text: str


@dataclass(frozen=True)
class ReasoningSeal:
    """A reasoning block ended whole, sealed by the vendor (Anthropic's thinking
    blocks): ``signature`` seals the reasoning streamed since the last seal, or
    ``redacted`` carries a block whose reasoning is encrypted. The next request
    must send sealed blocks back unchanged; unsealed reasoning (cut by a stop, or
    from a vendor without seals) is never sent back to a vendor that checks."""

    signature: str = ""
    redacted: str = ""


@dataclass(frozen=True)
class ToolCallChunk:
    call_id: str
    name: str
    args: dict[str, Any]


@dataclass(frozen=True)
class UsageReport:
    """The tokens the response took, as the provider reported them (at most one per
    stream, near its end): ``input`` counts every prompt token, cached ones included."""

    input: int
    output: int
    cached_input: int = 0


StreamChunk = TextDelta | ReasoningDelta | ReasoningSeal | ToolCallChunk | UsageReport


@dataclass(frozen=True)
class UserMessage:
    text: str


@dataclass(frozen=True)
class SealedReasoning:
    """A reasoning block as its vendor sealed it (see :class:`ReasoningSeal`)."""

    text: str
    signature: str = ""
    redacted: str = ""


@dataclass(frozen=True)
class AssistantMessage:
    text: str = ""
    reasoning: str = ""
    tool_calls: tuple[ToolCallChunk, ...] = ()
    sealed: tuple[SealedReasoning, ...] = ()
    """The message's sealed reasoning blocks, in order (what Anthropic needs back)."""


@dataclass(frozen=True)
class ToolMessage:
    call_id: str
    text: str
    is_error: bool = False


ModelMessage = UserMessage | AssistantMessage | ToolMessage


@dataclass(frozen=True)
class ToolSchema:
    name: str
    description: str
    parameters: dict[str, Any]


@dataclass(frozen=True)
class ModelRequest:
    system: str
    messages: tuple[ModelMessage, ...]
    tools: tuple[ToolSchema, ...] = field(default_factory=tuple)


class ProviderError(Exception):
    """The model could not be reached or answered something unusable."""


class Provider(Protocol):
    def stream(self, request: ModelRequest) -> AbstractAsyncContextManager[
            AsyncIterator[StreamChunk]]: ...
