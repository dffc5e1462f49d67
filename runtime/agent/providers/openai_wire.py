"""The openai provider's wire format, sans-IO: the Chat Completions request and stream.

* :func:`encode_request` turns a :class:`ModelRequest` into the JSON body of one
  streamed step (``"stream": true``; the model settings only when set);
* :class:`ChatStreamDecoder` takes the response body's bytes in any pieces and
  returns stream chunks: ``delta.content`` and ``delta.refusal`` become
  :class:`TextDelta`, ``delta.reasoning_content`` (or, when a server sends none,
  ``delta.reasoning``) becomes :class:`ReasoningDelta`, and ``delta.tool_calls``
  fragments are assembled by ``index`` and released as complete
  :class:`ToolCallChunk` s, in index order, when the choice's ``finish_reason``
  arrives (or at ``[DONE]`` if it never does). Calls may interleave, so a call is
  never released early.

Tool-call arguments that are not a JSON object are a :class:`ProviderError`
naming the call: a call is never dispatched with arguments the model did not
write (empty arguments mean ``{}``). What the pending calls hold is bounded
(``bounds.CallBudget``: name length, call count, arguments). A stream that ends before a
``finish_reason`` or ``[DONE]`` is an error, not a short answer.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

import msgspec

from runtime.agent.providers import usage as usage_wire
from runtime.agent.providers.base import (
    AssistantMessage,
    ModelRequest,
    ProviderError,
    ReasoningDelta,
    StreamChunk,
    TextDelta,
    ToolCallChunk,
    ToolMessage,
    UserMessage,
)
from runtime.agent.providers.bounds import CallBudget
from runtime.agent.providers.http import excerpt
from runtime.agent.providers.openai_config import OpenAIConfig
from runtime.agent.providers.sse import DEFAULT_MAX_EVENT_BYTES, SSEDecoder, SSEError

__all__ = ["ChatStreamDecoder", "encode_request", "error_text"]

_log = logging.getLogger(__name__)


# --- request encoding ---------------------------------------------------------------


class _WireFunctionCall(msgspec.Struct, frozen=True):
    name: str
    arguments: str


class _WireToolCall(msgspec.Struct, frozen=True):
    id: str
    function: _WireFunctionCall
    type: str = "function"


class _SystemMsg(msgspec.Struct, frozen=True, tag_field="role", tag="system"):
    content: str


class _UserMsg(msgspec.Struct, frozen=True, tag_field="role", tag="user"):
    content: str


class _AssistantMsg(msgspec.Struct, frozen=True, tag_field="role", tag="assistant",
                    omit_defaults=True):
    content: str | None = None
    tool_calls: tuple[_WireToolCall, ...] = ()


class _ToolMsg(msgspec.Struct, frozen=True, tag_field="role", tag="tool"):
    tool_call_id: str
    content: str


class _WireFunction(msgspec.Struct, frozen=True):
    name: str
    description: str
    parameters: dict[str, Any]


class _WireTool(msgspec.Struct, frozen=True):
    function: _WireFunction
    type: str = "function"


class _StreamOptions(msgspec.Struct, frozen=True):
    include_usage: bool = True  # the last event before [DONE] carries the usage


_USAGE = _StreamOptions()


class _Body(msgspec.Struct, frozen=True, omit_defaults=True):
    model: str
    messages: list[_SystemMsg | _UserMsg | _AssistantMsg | _ToolMsg]
    stream: bool
    tools: list[_WireTool] = msgspec.field(default_factory=list)
    temperature: float | None = None
    max_tokens: int | None = None
    max_completion_tokens: int | None = None
    reasoning_effort: str | None = None
    stream_options: _StreamOptions | None = None


_json_encoder = msgspec.json.Encoder()


def encode_request(model: str | OpenAIConfig, request: ModelRequest) -> bytes:
    """The Chat Completions body for one streamed step.

    Reasoning in earlier assistant messages is not sent back (Chat Completions
    has no input field for it, and some servers refuse one). A tool result's
    ``is_error`` has no wire field either: its text says so. Given a config, its
    model settings are sent (each only when set)."""
    messages: list[_SystemMsg | _UserMsg | _AssistantMsg | _ToolMsg] = []
    if request.system:
        messages.append(_SystemMsg(request.system))
    for message in request.messages:
        if isinstance(message, UserMessage):
            messages.append(_UserMsg(message.text))
        elif isinstance(message, AssistantMessage):
            calls = tuple(
                _WireToolCall(call.call_id, _WireFunctionCall(
                    call.name, _json_encoder.encode(call.args).decode()))
                for call in message.tool_calls)
            # An assistant message needs content or tool calls; null content is
            # the documented form when it only calls tools.
            content = message.text if message.text or not calls else None
            messages.append(_AssistantMsg(content, calls))
        elif isinstance(message, ToolMessage):
            messages.append(_ToolMsg(message.call_id, message.text))
    # OpenAI refuses an empty "tools" list, so none is sent when there are no tools.
    tools = [_WireTool(_WireFunction(t.name, t.description, t.parameters))
             for t in request.tools]
    if isinstance(model, str):
        return _json_encoder.encode(_Body(model, messages, True, tools,
                                          stream_options=_USAGE))
    config = model
    return _json_encoder.encode(_Body(
        config.model, messages, True, tools, temperature=config.temperature,
        max_tokens=config.max_tokens, max_completion_tokens=config.max_completion_tokens,
        reasoning_effort=config.reasoning_effort, stream_options=_USAGE))


# --- response decoding --------------------------------------------------------------


class _FunctionDelta(msgspec.Struct, frozen=True):
    name: str | None = None
    arguments: str | None = None


class _ToolCallDelta(msgspec.Struct, frozen=True):
    index: int | None = None
    id: str | None = None
    function: _FunctionDelta | None = None


class _Delta(msgspec.Struct, frozen=True):
    content: str | None = None
    refusal: str | None = None
    reasoning_content: str | None = None
    reasoning: str | None = None
    tool_calls: list[_ToolCallDelta] | None = None


class _Choice(msgspec.Struct, frozen=True):
    index: int = 0
    delta: _Delta = msgspec.field(default_factory=_Delta)
    finish_reason: str | None = None


class _ErrorBody(msgspec.Struct, frozen=True):
    message: str | None = None
    type: str | None = None
    code: str | int | None = None


class _Event(msgspec.Struct, frozen=True):
    choices: list[_Choice] = msgspec.field(default_factory=list)
    error: _ErrorBody | str | None = None
    usage: usage_wire.OpenAIUsage | None = None


_event_decoder = msgspec.json.Decoder(_Event)
_args_decoder = msgspec.json.Decoder(dict[str, Any])


def _error_text(error: _ErrorBody | str) -> str:
    if isinstance(error, str):
        return excerpt(error)
    parts = [p for p in (error.type, str(error.code) if error.code is not None else None)
             if p]
    suffix = f" ({', '.join(parts)})" if parts else ""
    return excerpt(error.message or "no message") + suffix


@dataclass
class _PendingCall:
    index: int
    id: str = ""
    name: str = ""
    arguments: list[str] = field(default_factory=list)

    def add(self, delta: _ToolCallDelta) -> None:
        if delta.id and not self.id:
            self.id = delta.id
        function = delta.function
        if function is None:
            return
        # OpenAI sends a call's name whole, once; some servers repeat it in
        # every fragment, which must not double it.
        if function.name and function.name != self.name:
            self.name += function.name
        if function.arguments:
            self.arguments.append(function.arguments)

    def complete(self) -> ToolCallChunk:
        if not self.id or not self.name:
            raise ProviderError(f"openai: tool call at index {self.index} ended without "
                                f"{'an id' if not self.id else 'a name'}")
        text = "".join(self.arguments)
        if not text.strip():
            return ToolCallChunk(self.id, self.name, {})
        try:
            args = _args_decoder.decode(text)
        except (msgspec.DecodeError, msgspec.ValidationError) as exc:
            raise ProviderError(
                f"openai: tool call {self.id} ({self.name}) has arguments that are not a "
                f"JSON object ({exc}): {excerpt(text)!r}") from exc
        return ToolCallChunk(self.id, self.name, args)


class ChatStreamDecoder:
    """Chat Completions stream bytes in, :data:`StreamChunk` s out.

    Only choice 0 is read (the request asks for one). :attr:`done` turns true at
    ``[DONE]``; nothing after it is read. Malformed events, error events and
    unusable tool calls raise :class:`ProviderError`."""

    def __init__(self, max_event_bytes: int = DEFAULT_MAX_EVENT_BYTES) -> None:
        self._sse = SSEDecoder(max_event_bytes)
        self._calls: dict[int, _PendingCall] = {}
        self._budget = CallBudget("openai")
        self._finished = False
        self.done = False
        self.finish_reason: str | None = None

    def feed(self, data: bytes) -> list[StreamChunk]:
        if self.done:
            return []
        try:
            events = self._sse.feed(data)
        except SSEError as exc:
            raise ProviderError(f"openai: malformed event stream: {exc}") from exc
        out: list[StreamChunk] = []
        for event in events:
            if event.data.strip() == "[DONE]":
                self.done = True
                out.extend(self._release_calls())
                break
            self._event(event.event, event.data, out)
        return out

    def end(self) -> list[StreamChunk]:
        """The body ended; return the calls it finished, or raise if it was cut short."""
        cut = self._sse.end()
        if self.done:
            return []
        if not self._finished:
            detail = " inside an event" if cut else ""
            raise ProviderError(f"openai: the stream ended{detail} before the response "
                                "finished (no finish_reason, no [DONE])")
        return self._release_calls()

    def _event(self, kind: str, data: str, out: list[StreamChunk]) -> None:
        try:
            event = _event_decoder.decode(data)
        except (msgspec.DecodeError, msgspec.ValidationError) as exc:
            if kind == "error":
                raise ProviderError(f"openai: the server sent an error event: "
                                    f"{excerpt(data)!r}") from exc
            raise ProviderError(f"openai: malformed stream event ({exc}): "
                                f"{excerpt(data)!r}") from exc
        if event.error is not None:
            raise ProviderError(f"openai: the server reported an error mid-stream: "
                                f"{_error_text(event.error)}")
        if kind == "error":
            raise ProviderError(f"openai: the server sent an error event: {excerpt(data)!r}")
        for choice in event.choices:
            if choice.index == 0:
                self._choice(choice, out)
        if event.usage is not None:
            out.append(usage_wire.from_openai(event.usage))

    def _choice(self, choice: _Choice, out: list[StreamChunk]) -> None:
        delta = choice.delta
        reasoning = delta.reasoning_content or delta.reasoning
        if reasoning:
            self._budget.text(len(reasoning))
            out.append(ReasoningDelta(reasoning))
        if delta.content:
            self._budget.text(len(delta.content))
            out.append(TextDelta(delta.content))
        if delta.refusal:
            self._budget.text(len(delta.refusal))
            out.append(TextDelta(delta.refusal))
        for call_delta in delta.tool_calls or ():
            call = self._pending(call_delta)
            call.add(call_delta)
            label = call.id or f"at index {call.index}"
            self._budget.name(call.name, label)
            function = call_delta.function
            if function is not None and function.arguments:
                self._budget.take(len(function.arguments), label)
        if choice.finish_reason is not None:
            self._finished = True
            self.finish_reason = choice.finish_reason
            if choice.finish_reason in ("length", "content_filter"):
                _log.warning("openai: the response was cut short (finish_reason=%s)",
                             choice.finish_reason)
            out.extend(self._release_calls())

    def _pending(self, delta: _ToolCallDelta) -> _PendingCall:
        index = delta.index
        if index is None:
            # Servers that omit the index stream one call at a time: a new id
            # starts a call, anything else continues the last one.
            known = [c for c in self._calls.values() if delta.id and c.id == delta.id]
            if known:
                return known[0]
            if delta.id or not self._calls:
                index = max(self._calls, default=-1) + 1
            else:
                index = max(self._calls)
        call = self._calls.get(index)
        if call is None:
            self._budget.calls(len(self._calls) + 1)
            call = self._calls[index] = _PendingCall(index)
        return call

    def _release_calls(self) -> list[StreamChunk]:
        calls: list[StreamChunk] = [self._calls[i].complete() for i in sorted(self._calls)]
        self._calls.clear()
        return calls


def error_text(body: bytes) -> str | None:
    """What an HTTP error body in the OpenAI shape (``{"error": {...}}``) says."""
    try:
        error = msgspec.json.decode(body, type=_Event).error
    except (msgspec.DecodeError, msgspec.ValidationError):
        return None
    return _error_text(error) if error is not None else None
