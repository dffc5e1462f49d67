"""Assembling one streamed model response, and salvaging it when a stop cuts it short.

Text and reasoning deltas append to the open block of their type (a change of
type closes it; so does a vendor's seal on a reasoning block, which the block
keeps). Tool calls are collected as the provider completes them. The
interrupted prefix keeps only text and reasoning blocks with visible content;
tool calls are dropped: their dispatch never happened, and a call kept without
a result would corrupt the transcript.

Linear by construction: a block collects its deltas in a list and joins them once,
when its text is first read (``text += delta`` copied the whole block at every delta:
a 1 MB answer in small deltas took 15 s of the runtime's loop).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from runtime.agent.providers.base import (
    ReasoningDelta,
    ReasoningSeal,
    StreamChunk,
    TextDelta,
    ToolCallChunk,
)

BlockType = Literal["text", "reasoning"]


@dataclass
class AssembledBlock:
    type: BlockType
    parts: list[str]
    signature: str = ""
    redacted: str = ""

    @property
    def text(self) -> str:
        """The block's text; joined once, then kept as one part (appends stay linear)."""
        if len(self.parts) != 1:
            self.parts[:] = ["".join(self.parts)]
        return self.parts[0]

    @property
    def sealed(self) -> bool:
        return bool(self.signature or self.redacted)


@dataclass
class Assembler:
    blocks: list[AssembledBlock] = field(default_factory=list)
    tool_calls: list[ToolCallChunk] = field(default_factory=list)
    chunks: int = 0

    def add(self, chunk: StreamChunk) -> None:
        self.chunks += 1
        if isinstance(chunk, ToolCallChunk):
            self.tool_calls.append(chunk)
            return
        if isinstance(chunk, ReasoningSeal):
            self._seal(chunk)
            return
        kind: BlockType = "text" if isinstance(chunk, TextDelta) else "reasoning"
        assert isinstance(chunk, TextDelta | ReasoningDelta)
        last = self.blocks[-1] if self.blocks else None
        if last is not None and last.type == kind and not last.sealed:
            last.parts.append(chunk.text)
        else:
            self.blocks.append(AssembledBlock(kind, [chunk.text]))

    def _seal(self, seal: ReasoningSeal) -> None:
        last = self.blocks[-1] if self.blocks else None
        if seal.redacted:
            self.blocks.append(AssembledBlock("reasoning", [""], redacted=seal.redacted))
        elif last is not None and last.type == "reasoning" and not last.sealed:
            last.signature = seal.signature
        else:  # a sealed block whose reasoning was empty
            self.blocks.append(AssembledBlock("reasoning", [""], signature=seal.signature))

    def kept_blocks(self, *, interrupted: bool) -> list[AssembledBlock]:
        """What the message records: blocks with non-whitespace content, open ones
        included; a whole response also keeps its sealed blocks (the vendor needs
        them back even when they show nothing)."""
        return [b for b in self.blocks
                if b.text.strip() or (not interrupted and b.sealed)]

    def visible_blocks(self) -> list[tuple[BlockType, str]]:
        """Text and reasoning blocks with non-whitespace content, open ones included."""
        return [(b.type, b.text) for b in self.blocks if b.text.strip()]

    @property
    def text(self) -> str:
        return "".join(b.text for b in self.blocks if b.type == "text")

    @property
    def reasoning(self) -> str:
        return "".join(b.text for b in self.blocks if b.type == "reasoning")
