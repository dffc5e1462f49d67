"""Newline-delimited framing, sans-IO: bytes in, frames out.

A frame is one JSON-RPC message on one line. The decoder is incremental (feed
it whatever the transport read) and bounded: a line longer than
``max_frame_size`` yields one :class:`FrameTooLarge` event, its bytes are
discarded as they arrive, and decoding resynchronises at the next newline.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

DEFAULT_MAX_FRAME_SIZE = 8 * 1024 * 1024


@dataclass(frozen=True, slots=True)
class Frame:
    data: bytes


@dataclass(frozen=True, slots=True)
class FrameTooLarge:
    size_at_least: int
    limit: int


FrameEvent = Frame | FrameTooLarge


class FrameDecoder:
    def __init__(self, max_frame_size: int = DEFAULT_MAX_FRAME_SIZE) -> None:
        if max_frame_size < 1:
            raise ValueError("max_frame_size must be positive")
        self._limit = max_frame_size
        self._buffer = bytearray()
        self._discarding = False  # inside an oversized line, dropping until newline
        self._discarded = 0

    def feed(self, data: bytes | bytearray) -> Iterator[FrameEvent]:
        """Feed bytes; yield every frame (or oversize event) they complete."""
        start = 0
        end = len(data)
        while start < end:
            newline = data.find(b"\n", start)
            if self._discarding:
                if newline < 0:
                    self._discarded += end - start
                    return
                self._discarded += newline - start
                self._discarding = False
                start = newline + 1
                continue
            if newline < 0:
                self._buffer += data[start:]
                if len(self._buffer) > self._limit:
                    yield FrameTooLarge(len(self._buffer), self._limit)
                    self._discarding = True
                    self._discarded = len(self._buffer)
                    self._buffer.clear()
                return
            if len(self._buffer) + (newline - start) > self._limit:
                yield FrameTooLarge(len(self._buffer) + newline - start, self._limit)
                self._buffer.clear()
                start = newline + 1
                continue
            if self._buffer:
                self._buffer += data[start:newline]
                line = bytes(self._buffer)
                self._buffer.clear()
            else:
                line = bytes(data[start:newline])
            start = newline + 1
            line = line.rstrip(b"\r")
            if line.strip():
                yield Frame(line)

    @property
    def pending(self) -> int:
        """Bytes buffered of an unfinished frame."""
        return len(self._buffer)


def encode_frame(payload: bytes) -> bytes:
    """One message, one line. JSON encoders never emit raw newlines."""
    if b"\n" in payload:
        raise ValueError("a frame must not contain a newline")
    return payload + b"\n"
