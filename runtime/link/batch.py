"""The answers to one batch: collected while its members run, written once the last is in.

A batch's members are started one after the other, like separate requests; their answers
go out together, as one array, or as several arrays when one would exceed the frame limit
(each answer alone fits: the endpoint made sure of that).
"""

from __future__ import annotations

from collections.abc import Callable


class BatchReply:
    def __init__(self, limit: int, write: Callable[[bytes], None]) -> None:
        self._limit = limit
        self._write = write
        self._answers: list[bytes] = []
        self._outstanding = 0
        self._closed = False  # every member has been read

    def expect(self) -> None:
        """A member request started: its answer is awaited."""
        self._outstanding += 1

    def add(self, answer: bytes, *, answered: bool = False) -> None:
        """An encoded answer; ``answered``: that of a member :meth:`expect` announced."""
        self._answers.append(answer)
        if answered:
            self._outstanding -= 1
        self._flush_if_done()

    def close(self) -> None:
        """Every member has been read."""
        self._closed = True
        self._flush_if_done()

    def _flush_if_done(self) -> None:
        if not self._closed or self._outstanding or not self._answers:
            return  # (a batch of notifications gets no answer)
        chunk: list[bytes] = []
        size = 2
        for answer in self._answers:
            if chunk and size + len(answer) + 1 > self._limit:
                self._write(b"[" + b",".join(chunk) + b"]")
                chunk, size = [], 2
            chunk.append(answer)
            size += len(answer) + 1
        self._write(b"[" + b",".join(chunk) + b"]")
        self._answers = []
