"""A local model server for the benchmarks: Chat Completions event streams over HTTP/1.1.

It answers every POST with the next queued body (a list of byte pieces, each written as one
HTTP chunk, or a generator of them: a server that never stops sending), on 127.0.0.1 with
an ephemeral port, inside the caller's nursery. It records whether the client went away
before the body ended (``gone``). What a fast local server (llama.cpp, vLLM) does, with
nothing of the suite's test helpers.
"""

from __future__ import annotations

import functools
import json
from collections import deque
from collections.abc import Iterable, Iterator

import trio


def delta_event(text: str) -> bytes:
    """One Chat Completions stream event carrying ``text``."""
    return b"data: " + json.dumps({"choices": [{"index": 0, "delta": {"content": text}}]},
                                  separators=(",", ":")).encode() + b"\n\n"


def text_stream(total: int, delta: int = 16, per_piece: int = 256) -> list[bytes]:
    """``total`` characters of text in ``delta``-character deltas, ``per_piece`` events a
    write, then ``finish_reason: stop`` and ``[DONE]``."""
    one = delta_event(("abcdefghijklmno " * (delta // 16 + 1))[:delta])
    events = total // delta
    pieces = [one * per_piece for _ in range(events // per_piece)]
    if events % per_piece:
        pieces.append(one * (events % per_piece))
    end = {"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}
    pieces.append(b"data: " + json.dumps(end).encode() + b"\n\ndata: [DONE]\n\n")
    return pieces


def endless_call_arguments(fragment: int = 65536) -> Iterator[bytes]:
    """A tool call whose arguments never end: its id and name, then fragments forever."""
    first = {"choices": [{"index": 0, "delta": {"tool_calls": [{
        "index": 0, "id": "call_1", "type": "function",
        "function": {"name": "Write", "arguments": '{"content": "'}}]}}]}
    yield b"data: " + json.dumps(first).encode() + b"\n\n"
    more = {"choices": [{"index": 0, "delta": {"tool_calls": [{
        "index": 0, "function": {"arguments": "a" * fragment}}]}}]}
    piece = b"data: " + json.dumps(more).encode() + b"\n\n"
    while True:
        yield piece


def endless_text(delta: int = 65536, per_piece: int = 8) -> Iterator[bytes]:
    """Text without end: ``per_piece`` deltas of ``delta`` characters a write, forever."""
    piece = delta_event("t" * delta) * per_piece
    while True:
        yield piece


class SSEServer:
    def __init__(self) -> None:
        self.port = 0
        self.bodies: deque[Iterable[bytes]] = deque()
        self.gone = trio.Event()
        self.sent = 0  # body bytes written

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    async def start(self, nursery: trio.Nursery) -> None:
        serve = functools.partial(trio.serve_tcp, self._serve, 0, host="127.0.0.1")
        listeners = await nursery.start(serve)
        self.port = listeners[0].socket.getsockname()[1]

    async def _serve(self, stream: trio.SocketStream) -> None:
        async with stream:
            if not await _read_request(stream):
                return
            body = self.bodies.popleft()
            head = ("HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
                    "Transfer-Encoding: chunked\r\n\r\n")
            try:
                await stream.send_all(head.encode())
                for piece in body:
                    await stream.send_all(b"%x\r\n%s\r\n" % (len(piece), piece))
                    self.sent += len(piece)
                await stream.send_all(b"0\r\n\r\n")
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                self.gone.set()


async def _read_request(stream: trio.SocketStream) -> bool:
    """Read one request (head and Content-Length body); False if the client left."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = await stream.receive_some(65536)
        if not chunk:
            return False
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    length = 0
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value.strip())
    while len(body) < length:
        chunk = await stream.receive_some(65536)
        if not chunk:
            return False
        body += chunk
    return True
