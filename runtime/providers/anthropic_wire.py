"""The anthropic provider's wire format, sans-IO: the Messages request and its stream.

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

Stream (:class:`MessagesStreamDecoder`), the documented server-sent events:
``message_start``; per content block ``content_block_start`` / ``_delta`` /
``_stop`` for ``text`` (``text_delta`` → :class:`TextDelta`), ``thinking``
(``thinking_delta`` → :class:`ReasoningDelta`, ``signature_delta`` collected and
released as a :class:`ReasoningSeal` when the block stops), ``redacted_thinking``
(its ``data`` released as a seal) and ``tool_use`` (``input_json_delta``
fragments joined and released as one :class:`ToolCallChunk` when the block
stops, so a half-streamed call never leaves the decoder); ``message_delta``
(stop reason, output tokens); ``message_stop`` (the end); ``ping``; ``error``
(a :class:`ProviderError` naming the error type and the HTTP status it stands
for). Unknown events and delta types are skipped, as the API's versioning policy
asks. A stream that ends before ``message_stop`` is an error, not a short answer.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any, Literal

import msgspec

from runtime.providers.base import (
    AssistantMessage,
    ModelMessage,
    ModelRequest,
    ProviderError,
    ReasoningDelta,
    ReasoningSeal,
    StreamChunk,
    TextDelta,
    ToolCallChunk,
    ToolMessage,
    UserMessage,
)
from runtime.providers.http import excerpt
from runtime.providers.sse import DEFAULT_MAX_EVENT_BYTES, SSEDecoder, SSEError

__all__ = ["ERROR_STATUS", "MessagesStreamDecoder", "encode_request", "error_text"]

_log = logging.getLogger(__name__)

# The documented error types, and the HTTP status each stands for.
ERROR_STATUS = {
    "invalid_request_error": 400,
    "authentication_error": 401,
    "permission_error": 403,
    "not_found_error": 404,
    "request_too_large": 413,
    "rate_limit_error": 429,
    "api_error": 500,
    "overloaded_error": 529,
}


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


# --- stream decoding --------------------------------------------------------------


class _ErrorBody(msgspec.Struct, frozen=True):
    type: str = "error"
    message: str = ""


class _Block(msgspec.Struct, frozen=True):
    type: str
    text: str = ""
    thinking: str = ""
    signature: str = ""
    data: str = ""
    id: str = ""
    name: str = ""
    input: dict[str, Any] | None = None


class _Delta(msgspec.Struct, frozen=True):
    type: str = ""
    text: str = ""
    thinking: str = ""
    signature: str = ""
    partial_json: str = ""
    stop_reason: str | None = None


class _Usage(msgspec.Struct, frozen=True):
    input_tokens: int | None = None
    output_tokens: int | None = None


class _Message(msgspec.Struct, frozen=True):
    id: str = ""
    model: str = ""
    usage: _Usage | None = None


class _Event(msgspec.Struct, frozen=True):
    type: str
    index: int | None = None
    message: _Message | None = None
    content_block: _Block | None = None
    delta: _Delta | None = None
    usage: _Usage | None = None
    error: _ErrorBody | None = None
    request_id: str | None = None


_event_decoder = msgspec.json.Decoder(_Event)
_args_decoder = msgspec.json.Decoder(dict[str, Any])


def _describe(error: _ErrorBody, request_id: str | None = None) -> str:
    text = f"{excerpt(error.message or 'no message')} ({error.type})"
    return f"{text} [request {request_id}]" if request_id else text


def error_text(body: bytes) -> str | None:
    """What an HTTP error body in the Messages shape (``{"type": "error", "error":
    {"type", "message"}, "request_id"}``) says."""
    try:
        event = _event_decoder.decode(body)
    except (msgspec.DecodeError, msgspec.ValidationError):
        return None
    return _describe(event.error, event.request_id) if event.error is not None else None


@dataclass
class _OpenBlock:
    type: str
    id: str = ""
    name: str = ""
    input: dict[str, Any] | None = None
    parts: list[str] = field(default_factory=list)  # JSON fragments or signature pieces
    data: str = ""

    def finish(self) -> StreamChunk | None:
        if self.type == "thinking":
            return ReasoningSeal(signature="".join(self.parts)) if self.parts else None
        if self.type == "redacted_thinking":
            return ReasoningSeal(redacted=self.data) if self.data else None
        if self.type == "tool_use":
            return self._call()
        return None

    def _call(self) -> ToolCallChunk:
        if not self.id or not self.name:
            raise ProviderError(f"anthropic: a tool_use block ended without "
                                f"{'an id' if not self.id else 'a name'}")
        text = "".join(self.parts)
        if not text.strip():
            return ToolCallChunk(self.id, self.name, dict(self.input or {}))
        try:
            args = _args_decoder.decode(text)
        except (msgspec.DecodeError, msgspec.ValidationError) as exc:
            raise ProviderError(
                f"anthropic: tool call {self.id} ({self.name}) has input that is not a "
                f"JSON object ({exc}; input cut short when a response reaches its "
                f"maxTokens: raise it): {excerpt(text)!r}") from exc
        return ToolCallChunk(self.id, self.name, args)


class MessagesStreamDecoder:
    """Messages stream bytes in, :data:`StreamChunk` s out (see the module docstring).

    :attr:`done` turns true at ``message_stop``; nothing after it is read.
    :attr:`stop_reason` and the token counts are what the stream reported."""

    def __init__(self, max_event_bytes: int = DEFAULT_MAX_EVENT_BYTES) -> None:
        self._sse = SSEDecoder(max_event_bytes)
        self._blocks: dict[int, _OpenBlock] = {}
        self._started = False
        self.done = False
        self.stop_reason: str | None = None
        self.input_tokens: int | None = None
        self.output_tokens: int | None = None

    def feed(self, data: bytes) -> list[StreamChunk]:
        if self.done:
            return []
        try:
            events = self._sse.feed(data)
        except SSEError as exc:
            raise ProviderError(f"anthropic: malformed event stream: {exc}") from exc
        out: list[StreamChunk] = []
        for sse in events:
            self._event(sse.data, out)
            if self.done:
                break
        return out

    def end(self) -> list[StreamChunk]:
        cut = self._sse.end()
        if self.done:
            return []
        detail = " inside an event" if cut else ""
        raise ProviderError(f"anthropic: the stream ended{detail} before message_stop")

    def _event(self, data: str, out: list[StreamChunk]) -> None:
        try:
            event = _event_decoder.decode(data)
        except (msgspec.DecodeError, msgspec.ValidationError) as exc:
            raise ProviderError(f"anthropic: malformed stream event ({exc}): "
                                f"{excerpt(data)!r}") from exc
        kind = event.type
        if kind == "error":
            error = event.error or _ErrorBody(message=excerpt(data))
            status = ERROR_STATUS.get(error.type)
            as_status = f" (as HTTP {status})" if status is not None else ""
            raise ProviderError(f"anthropic: the API reported an error mid-stream"
                                f"{as_status}: {_describe(error, event.request_id)}")
        if kind == "message_start":
            self._started = True
            usage = event.message.usage if event.message is not None else None
            if usage is not None:
                self.input_tokens = usage.input_tokens
            return
        if kind == "ping":
            return
        if kind == "message_delta":
            self._message_delta(event)
            return
        if kind == "message_stop":
            if self._blocks:
                raise ProviderError(f"anthropic: message_stop with blocks still open "
                                    f"(index {', '.join(map(str, sorted(self._blocks)))})")
            self.done = True
            _log.debug("anthropic: message done: stop_reason=%s input_tokens=%s "
                       "output_tokens=%s", self.stop_reason, self.input_tokens,
                       self.output_tokens)
            return
        if kind.startswith("content_block_"):
            if not self._started:
                raise ProviderError(f"anthropic: {kind} before message_start")
            self._block_event(kind, event, out)
            return
        _log.debug("anthropic: skipping an unknown stream event %r", kind)

    def _message_delta(self, event: _Event) -> None:
        if event.delta is not None and event.delta.stop_reason is not None:
            self.stop_reason = event.delta.stop_reason
            if self.stop_reason in ("max_tokens", "refusal", "model_context_window_exceeded"):
                _log.warning("anthropic: the response was cut short (stop_reason=%s)",
                             self.stop_reason)
        if event.usage is not None and event.usage.output_tokens is not None:
            self.output_tokens = event.usage.output_tokens

    def _block_event(self, kind: str, event: _Event, out: list[StreamChunk]) -> None:
        index = event.index
        if index is None:
            raise ProviderError(f"anthropic: {kind} without an index")
        if kind == "content_block_start":
            self._start(index, event.content_block, out)
            return
        block = self._blocks.get(index)
        if block is None:
            raise ProviderError(f"anthropic: {kind} for block {index}, which is not open")
        if kind == "content_block_delta":
            if event.delta is not None:
                self._delta(block, event.delta, out)
        elif kind == "content_block_stop":
            del self._blocks[index]
            finished = block.finish()
            if finished is not None:
                out.append(finished)

    def _start(self, index: int, start: _Block | None, out: list[StreamChunk]) -> None:
        if start is None:
            raise ProviderError(f"anthropic: content_block_start {index} without a block")
        if index in self._blocks:
            raise ProviderError(f"anthropic: block {index} started twice")
        block = self._blocks[index] = _OpenBlock(start.type, start.id, start.name,
                                                 start.input, data=start.data)
        if start.type == "text" and start.text:
            out.append(TextDelta(start.text))
        elif start.type == "thinking":
            if start.thinking:
                out.append(ReasoningDelta(start.thinking))
            if start.signature:
                block.parts.append(start.signature)
        elif start.type not in ("tool_use", "redacted_thinking"):
            _log.debug("anthropic: skipping a %r content block", start.type)

    @staticmethod
    def _delta(block: _OpenBlock, delta: _Delta, out: list[StreamChunk]) -> None:
        kind = delta.type
        if kind == "text_delta" and block.type == "text":
            if delta.text:
                out.append(TextDelta(delta.text))
        elif kind == "thinking_delta" and block.type == "thinking":
            if delta.thinking:
                out.append(ReasoningDelta(delta.thinking))
        elif kind == "signature_delta" and block.type == "thinking":
            block.parts.append(delta.signature)
        elif kind == "input_json_delta" and block.type == "tool_use":
            block.parts.append(delta.partial_json)
        elif kind in ("text_delta", "thinking_delta", "signature_delta", "input_json_delta"):
            raise ProviderError(f"anthropic: a {kind} in a {block.type} block")
        else:
            _log.debug("anthropic: skipping a %r delta", kind)
