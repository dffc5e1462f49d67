"""The anthropic provider's wire format, sans-IO: the Messages request.

Request (:func:`encode_request`): ``model``, ``max_tokens``, ``system``,
``messages`` and ``tools`` (``name``, ``description``, ``input_schema``) with
``"stream": true``, plus ``temperature`` and ``thinking`` when configured. With prompt
caching (the default), ``cache_control`` breakpoints mark the end of the tools, of the
system prompt and of the newest message, so each step of a turn reads the conversation so
far from Anthropic's prompt cache instead of paying for it again.
Messages alternate as the API expects: consecutive messages of one role are one
message. An assistant message sends its sealed thinking blocks first (with their
signatures, unchanged, as the API requires when a tool loop continues), then its
text, then its ``tool_use`` blocks; unsealed reasoning (cut by a stop, or written
by another vendor) is never sent, and a message left with nothing is left out.
Tool results go back as ``tool_result`` blocks (``tool_use_id``, ``is_error``)
in the next user message, before any text.

The stream is ``anthropic_stream.py``'s.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

import msgspec

from runtime.agent.providers.base import (
    AssistantMessage,
    ModelMessage,
    ModelRequest,
    ToolMessage,
    UserMessage,
)

__all__ = ["Settings", "encode_messages", "encode_request"]



# --- request encoding -------------------------------------------------------------


@dataclass(frozen=True)
class Settings:
    model: str
    max_tokens: int
    temperature: float | None = None
    thinking_budget: int | None = None
    prompt_caching: bool = True


_EPHEMERAL = {"type": "ephemeral"}


class _Thinking(msgspec.Struct, frozen=True):
    budget_tokens: int
    type: str = "enabled"


class _Body(msgspec.Struct, frozen=True, omit_defaults=True):
    model: str
    max_tokens: int
    messages: list[dict[str, Any]]
    stream: bool  # no default: omit_defaults would leave it out
    system: str | list[dict[str, Any]] = ""
    tools: list[dict[str, Any]] = msgspec.field(default_factory=list)
    temperature: float | None = None
    thinking: _Thinking | None = None


_json_encoder = msgspec.json.Encoder()


def _assistant_content(message: AssistantMessage) -> list[dict[str, Any]]:
    content: list[dict[str, Any]] = []
    for block in message.sealed:
        if block.redacted:
            content.append({"type": "redacted_thinking", "data": block.redacted})
        else:
            content.append({"type": "thinking", "thinking": block.text,
                            "signature": block.signature})
    if message.text.strip():  # the API refuses empty or blank text blocks
        content.append({"type": "text", "text": message.text})
    content.extend({"type": "tool_use", "id": call.call_id, "name": call.name,
                    "input": call.args} for call in message.tool_calls)
    return content


def _content(message: ModelMessage) -> tuple[Literal["user", "assistant"], list[dict[str, Any]]]:
    if isinstance(message, UserMessage):
        return "user", [{"type": "text", "text": message.text or "(empty message)"}]
    if isinstance(message, ToolMessage):
        return "user", [{"type": "tool_result", "tool_use_id": message.call_id,
                         "content": message.text or "(no output)",
                         "is_error": message.is_error}]
    return "assistant", _assistant_content(message)


def encode_messages(messages: tuple[ModelMessage, ...]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for message in messages:
        role, content = _content(message)
        if not content:
            continue
        if out and out[-1]["role"] == role:
            out[-1]["content"].extend(content)
        else:
            out.append({"role": role, "content": content})
    if out and out[-1]["role"] == "assistant":
        # A final assistant message is a prefill: the API refuses trailing whitespace.
        for block in out[-1]["content"]:
            if block["type"] == "text":
                block["text"] = block["text"].rstrip()
    return out


def _mark_cache_points(system: str, tools: list[dict[str, Any]],
                       messages: list[dict[str, Any]]) -> str | list[dict[str, Any]]:
    """Prompt caching: breakpoints after the tools, the system prompt and the newest
    message, so the next step of a turn reads everything before its new part from the
    cache. Returns the system field (a block, to carry its breakpoint)."""
    if tools:
        tools[-1] = {**tools[-1], "cache_control": _EPHEMERAL}
    if messages:
        last = messages[-1]["content"][-1]
        if last["type"] in ("text", "tool_result", "tool_use"):
            last["cache_control"] = _EPHEMERAL
    if not system:
        return system
    return [{"type": "text", "text": system, "cache_control": _EPHEMERAL}]


def encode_request(settings: Settings, request: ModelRequest) -> bytes:
    """The Messages body for one streamed step (see the module docstring)."""
    tools = [{"name": t.name, "description": t.description, "input_schema": t.parameters}
             for t in request.tools]
    messages = encode_messages(request.messages)
    system: str | list[dict[str, Any]] = request.system
    if settings.prompt_caching:
        system = _mark_cache_points(request.system, tools, messages)
    thinking = (_Thinking(settings.thinking_budget)
                if settings.thinking_budget is not None else None)
    return _json_encoder.encode(_Body(
        settings.model, settings.max_tokens, messages, True,
        system=system, tools=tools, temperature=settings.temperature,
        thinking=thinking))
