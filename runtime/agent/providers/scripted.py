"""The scripted provider: model responses from a JSON script, consumed in order.

A script is a list of responses; a response is a list of chunks, each one of
``{"text": str}``, ``{"reasoning": str}``,
``{"toolCall": {"id": str, "name": str, "args": {...}}}``, ``{"sleepMs": int}`` or
``{"usage": {"input": int, "output": int, "cachedInput": int}}`` (what the response
reports as its token usage; without one the runtime estimates it).
Sleeps are real (trio) sleeps, so a stop lands mid-stream exactly as it would
on a slow model. Every step of every turn takes the next response; running out
is an error, never an invented answer.
"""

from __future__ import annotations

import pathlib
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import msgspec
import trio

from runtime.agent.providers.base import (
    ModelRequest,
    ProviderError,
    ReasoningDelta,
    StreamChunk,
    TextDelta,
    ToolCallChunk,
    UsageReport,
)


class _ToolCall(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    id: str
    name: str
    args: dict[str, Any] = msgspec.field(default_factory=dict)


class _Usage(msgspec.Struct, frozen=True, forbid_unknown_fields=True, rename="camel"):
    input: int = 0
    output: int = 0
    cached_input: int = 0


class _Chunk(msgspec.Struct, frozen=True, forbid_unknown_fields=True, rename="camel"):
    text: str | None = None
    reasoning: str | None = None
    tool_call: _ToolCall | None = None
    sleep_ms: int | None = None
    usage: _Usage | None = None


Script = list[list[_Chunk]]
_script_decoder = msgspec.json.Decoder(Script)


def parse_script(data: bytes | list[Any]) -> list[list[StreamChunk | float]]:
    """Validate a script; return each response as chunks and sleeps (seconds)."""
    try:
        raw = (_script_decoder.decode(data) if isinstance(data, bytes)
               else msgspec.convert(data, Script))
    except (msgspec.DecodeError, msgspec.ValidationError) as exc:
        raise ValueError(f"invalid script: {exc}") from exc
    responses: list[list[StreamChunk | float]] = []
    for r, response in enumerate(raw):
        items: list[StreamChunk | float] = []
        for c, chunk in enumerate(response):
            present = [v for v in (chunk.text, chunk.reasoning, chunk.tool_call, chunk.sleep_ms,
                                    chunk.usage) if v is not None]
            if len(present) != 1:
                raise ValueError(f"invalid script: response {r} chunk {c} must have exactly one "
                                 "of text, reasoning, toolCall, sleepMs, usage")
            if chunk.text is not None:
                items.append(TextDelta(chunk.text))
            elif chunk.reasoning is not None:
                items.append(ReasoningDelta(chunk.reasoning))
            elif chunk.tool_call is not None:
                call = chunk.tool_call
                items.append(ToolCallChunk(call.id, call.name, dict(call.args)))
            elif chunk.sleep_ms is not None:
                if chunk.sleep_ms < 0:
                    raise ValueError(f"invalid script: response {r} chunk {c}: negative sleep")
                items.append(chunk.sleep_ms / 1000)
            elif chunk.usage is not None:
                u = chunk.usage
                items.append(UsageReport(u.input, u.output, u.cached_input))
        responses.append(items)
    return responses


def load_script(path: str) -> list[list[StreamChunk | float]]:
    try:
        data = pathlib.Path(path).read_bytes()
    except OSError as exc:
        raise ValueError(f"cannot read script {path}: {exc.strerror}") from exc
    return parse_script(data)


class ScriptedProvider:
    def __init__(self, responses: list[list[StreamChunk | float]]) -> None:
        self._responses = list(responses)
        self._next = 0

    @property
    def remaining(self) -> int:
        return len(self._responses) - self._next

    @asynccontextmanager
    async def stream(self, request: ModelRequest) -> AsyncIterator[AsyncIterator[StreamChunk]]:
        if self._next >= len(self._responses):
            raise ProviderError(f"the script has no response left (it had "
                                f"{len(self._responses)})")
        response = self._responses[self._next]
        self._next += 1
        yield self._play(response)

    async def _play(self, response: list[StreamChunk | float]) -> AsyncIterator[StreamChunk]:
        for item in response:
            if isinstance(item, float):
                await trio.sleep(item)
            else:
                yield item
