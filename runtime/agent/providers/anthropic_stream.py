"""The anthropic provider's wire format, sans-IO: the Messages stream and error bodies.

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
asks. What open blocks hold is bounded (``bounds.CallBudget``: name length, call
count, input JSON and signatures). A stream that ends before ``message_stop`` is an
error, not a short answer.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

import msgspec

from runtime.agent.providers import usage as usage_wire
from runtime.agent.providers.base import (
    ProviderError,
    ReasoningDelta,
    ReasoningSeal,
    StreamChunk,
    TextDelta,
    ToolCallChunk,
)
from runtime.agent.providers.bounds import CallBudget
from runtime.agent.providers.http import excerpt
from runtime.agent.providers.sse import DEFAULT_MAX_EVENT_BYTES, SSEDecoder, SSEError

__all__ = ["ERROR_STATUS", "MessagesStreamDecoder", "error_text"]

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
    cache_read_input_tokens: int | None = None
    cache_creation_input_tokens: int | None = None


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
        self._budget = CallBudget("anthropic")
        self._tool_uses = 0
        self._started = False
        self.done = False
        self.stop_reason: str | None = None
        self.input_tokens: int | None = None
        self.output_tokens: int | None = None
        self._cache: tuple[int | None, int | None] = (None, None)  # read, created

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
                self._cache = (usage.cache_read_input_tokens,
                               usage.cache_creation_input_tokens)
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
            if self.input_tokens is not None or self.output_tokens is not None:
                out.append(usage_wire.from_anthropic(self.input_tokens, self.output_tokens,
                                                     *self._cache))
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
        if start.type == "tool_use":
            self._tool_uses += 1
            self._budget.calls(self._tool_uses)
            self._budget.name(start.name, start.id or f"of block {index}")
        block = self._blocks[index] = _OpenBlock(start.type, start.id, start.name,
                                                 start.input, data=start.data)
        if start.type == "text" and start.text:
            self._budget.text(len(start.text))
            out.append(TextDelta(start.text))
        elif start.type == "thinking":
            if start.thinking:
                self._budget.text(len(start.thinking))
                out.append(ReasoningDelta(start.thinking))
            if start.signature:
                block.parts.append(start.signature)
        elif start.type not in ("tool_use", "redacted_thinking"):
            _log.debug("anthropic: skipping a %r content block", start.type)

    def _delta(self, block: _OpenBlock, delta: _Delta, out: list[StreamChunk]) -> None:
        kind = delta.type
        if kind == "text_delta" and block.type == "text":
            if delta.text:
                self._budget.text(len(delta.text))
                out.append(TextDelta(delta.text))
        elif kind == "thinking_delta" and block.type == "thinking":
            if delta.thinking:
                self._budget.text(len(delta.thinking))
                out.append(ReasoningDelta(delta.thinking))
        elif kind == "signature_delta" and block.type == "thinking":
            self._budget.take(len(delta.signature), "a thinking signature")
            block.parts.append(delta.signature)
        elif kind == "input_json_delta" and block.type == "tool_use":
            self._budget.take(len(delta.partial_json), block.id)
            block.parts.append(delta.partial_json)
        elif kind in ("text_delta", "thinking_delta", "signature_delta", "input_json_delta"):
            raise ProviderError(f"anthropic: a {kind} in a {block.type} block")
        else:
            _log.debug("anthropic: skipping a %r delta", kind)
