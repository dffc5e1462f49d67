"""Assembling one streamed model response, and salvaging it when a stop cuts it short.

Text and reasoning deltas append to the open block of their type (a change of
type closes it). Tool calls are collected as the provider completes them. The
interrupted prefix keeps only text and reasoning blocks with visible content;
tool calls are dropped: their dispatch never happened, and a call kept without
a result would corrupt the transcript.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from runtime.providers.base import ReasoningDelta, StreamChunk, TextDelta, ToolCallChunk

BlockType = Literal["text", "reasoning"]


@dataclass
class _Block:
    type: BlockType
    text: str


@dataclass
class Assembler:
    blocks: list[_Block] = field(default_factory=list)
    tool_calls: list[ToolCallChunk] = field(default_factory=list)
    chunks: int = 0

    def add(self, chunk: StreamChunk) -> None:
        self.chunks += 1
        if isinstance(chunk, ToolCallChunk):
            self.tool_calls.append(chunk)
            return
        kind: BlockType = "text" if isinstance(chunk, TextDelta) else "reasoning"
        assert isinstance(chunk, TextDelta | ReasoningDelta)
        if self.blocks and self.blocks[-1].type == kind:
            self.blocks[-1].text += chunk.text
        else:
            self.blocks.append(_Block(kind, chunk.text))

    def visible_blocks(self) -> list[tuple[BlockType, str]]:
        """Text and reasoning blocks with non-whitespace content, open ones included."""
        return [(b.type, b.text) for b in self.blocks if b.text.strip()]

    @property
    def text(self) -> str:
        return "".join(b.text for b in self.blocks if b.type == "text")

    @property
    def reasoning(self) -> str:
        return "".join(b.text for b in self.blocks if b.type == "reasoning")
