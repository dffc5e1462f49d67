"""Bounded output of a process tool: streamed live up to a cap, kept as head and tail.

``feed`` passes text on to ``emit`` (the call's ``tools.output``) until
``cap`` bytes were emitted, then stops emitting; the result keeps the first
and the last ``cap / 2`` bytes with a marker for what was left out.
"""

from __future__ import annotations

import codecs
from collections import deque
from collections.abc import Callable


def _utf8_len(text: str) -> int:
    return len(text.encode("utf-8", "surrogatepass"))


def _head_bytes(text: str, limit: int) -> str:
    return text.encode("utf-8", "surrogatepass")[:limit].decode("utf-8", "ignore")


def _tail_bytes(text: str, limit: int) -> str:
    data = text.encode("utf-8", "surrogatepass")
    return data[max(0, len(data) - limit):].decode("utf-8", "ignore")


class BoundedOutput:
    def __init__(self, cap: int, emit: Callable[[str, str], None] | None) -> None:
        self.cap = max(cap, 2)
        self._emit = emit
        self.emitted = 0
        self.total = 0
        self.stream_truncated = False
        self._half = self.cap // 2
        self._head: list[str] = []
        self._head_size = 0
        self._tail: deque[str] = deque()
        self._tail_size = 0

    def feed(self, stream: str, text: str) -> None:
        if not text:
            return
        size = _utf8_len(text)
        self.total += size
        self._stream(stream, text, size)
        if self._head_size < self._half:
            part = _head_bytes(text, self._half - self._head_size)
            self._head.append(part)
            self._head_size += _utf8_len(part)
            text = text[len(part):]
            if not text:
                return
            size = _utf8_len(text)
        self._tail.append(text)
        self._tail_size += size
        while self._tail and self._tail_size > self._half:
            first = self._tail.popleft()
            first_size = _utf8_len(first)
            if self._tail_size - first_size >= self._half:
                self._tail_size -= first_size
                continue
            kept = _tail_bytes(first, self._half - (self._tail_size - first_size))
            self._tail.appendleft(kept)
            self._tail_size += _utf8_len(kept) - first_size
            break

    def _stream(self, stream: str, text: str, size: int) -> None:
        if self._emit is None:
            return
        room = self.cap - self.emitted
        if room <= 0:
            self.stream_truncated = True
            return
        if size > room:
            text = _head_bytes(text, room)
            size = room
            self.stream_truncated = True
        if text:
            self._emit(stream, text)
        self.emitted += size

    @property
    def truncated(self) -> bool:
        return self.total > self._head_size + self._tail_size

    def text(self) -> str:
        head, tail = "".join(self._head), "".join(self._tail)
        if self.truncated:
            omitted = self.total - self._head_size - self._tail_size
            return f"{head}\n[... {omitted} bytes of output omitted ...]\n{tail}"
        return head + tail

    def tail(self, limit: int) -> str:
        return _tail_bytes(self.text(), limit)


class TextSink:
    """Decodes one stream's bytes incrementally (a split UTF-8 sequence is kept)."""

    def __init__(self, stream: str, out: BoundedOutput) -> None:
        self._stream = stream
        self._out = out
        self._decoder = codecs.getincrementaldecoder("utf-8")("replace")

    def feed(self, data: bytes) -> None:
        self._out.feed(self._stream, self._decoder.decode(data))

    def end(self) -> None:
        self._out.feed(self._stream, self._decoder.decode(b"", final=True))
