"""A small local HTTP/1.1 server that replays hand-made event-stream responses.

It serves on 127.0.0.1 (ephemeral port) inside the test's nursery, records each
request, and answers with the next queued :class:`Reply`. While it streams
without end (``forever``) or holds a request unanswered (``stall``), it watches
the connection and records when the client goes away (EOF or reset).
"""

from __future__ import annotations

import functools
import json
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

import trio

from runtime.agent.providers.base import ModelRequest, StreamChunk, UsageReport

SSE_HEADERS = (("Content-Type", "text/event-stream; charset=utf-8"),
               ("Cache-Control", "no-cache"))


@dataclass(frozen=True)
class Reply:
    status: int = 200
    reason: str = "OK"
    headers: tuple[tuple[str, str], ...] = SSE_HEADERS
    # Body pieces, each written as its own HTTP chunk (or write); a float sleeps.
    body: tuple[bytes | float, ...] = ()
    framing: Literal["chunked", "close", "length"] = "chunked"
    # Chunked only: announce a longer chunk than the first piece, then close.
    cut: bool = False
    # Hold the request without answering until the client leaves.
    stall: bool = False
    # After the body, send this every 10 ms until the client leaves.
    forever: bytes | None = None


@dataclass(frozen=True)
class Received:
    method: str
    target: str
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)


@dataclass
class FakeServer:
    port: int = 0
    replies: deque[Reply] = field(default_factory=deque)
    requests: list[Received] = field(default_factory=list)
    received: trio.Event = field(default_factory=trio.Event)
    gone: trio.Event = field(default_factory=trio.Event)
    gone_at: float | None = None
    gone_how: str = ""
    sent_while_watching: int = 0

    async def start(self, nursery: trio.Nursery) -> None:
        serve = functools.partial(trio.serve_tcp, self._serve, 0, host="127.0.0.1")
        listeners = await nursery.start(serve)
        self.port = listeners[0].socket.getsockname()[1]

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def queue(self, *replies: Reply) -> None:
        self.replies.extend(replies)

    async def _serve(self, stream: trio.SocketStream) -> None:
        async with stream:
            try:
                request = await _read_request(stream)
            except (trio.BrokenResourceError, EOFError):
                return
            self.requests.append(request)
            self.received.set()
            await self._reply(stream, self.replies.popleft())

    async def _reply(self, stream: trio.SocketStream, reply: Reply) -> None:
        head = [f"HTTP/1.1 {reply.status} {reply.reason}", *(f"{k}: {v}" for k, v in reply.headers)]
        data = [piece for piece in reply.body if isinstance(piece, bytes)]
        if reply.framing == "chunked":
            head.append("Transfer-Encoding: chunked")
        elif reply.framing == "length":
            head.append(f"Content-Length: {sum(map(len, data))}")
        else:
            head.append("Connection: close")
        if reply.stall:
            await self._watch(stream, None)
            return
        try:
            await stream.send_all(("\r\n".join(head) + "\r\n\r\n").encode())
            for piece in reply.body:
                if isinstance(piece, float):
                    await trio.sleep(piece)
                elif reply.framing == "chunked":
                    if reply.cut:
                        await stream.send_all(b"%x\r\n" % (len(piece) + 10) + piece)
                        return
                    await stream.send_all(b"%x\r\n%s\r\n" % (len(piece), piece))
                else:
                    await stream.send_all(piece)
            if reply.forever is not None:
                piece = reply.forever
                if reply.framing == "chunked":
                    piece = b"%x\r\n%s\r\n" % (len(piece), piece)
                await self._watch(stream, piece)
                return
            if reply.framing == "chunked" and not reply.cut:
                await stream.send_all(b"0\r\n\r\n")
        except trio.BrokenResourceError:
            self._left("reset while sending")

    async def _watch(self, stream: trio.SocketStream, piece: bytes | None) -> None:
        """Until the client leaves: keep sending ``piece`` (framed; if any), watch for EOF."""
        async with trio.open_nursery() as nursery:
            async def receive() -> None:
                try:
                    while await stream.receive_some():
                        pass
                    self._left("EOF")
                except trio.BrokenResourceError:
                    self._left("reset")
                nursery.cancel_scope.cancel()

            nursery.start_soon(receive)
            if piece is None:
                return
            try:
                while True:
                    await stream.send_all(piece)
                    self.sent_while_watching += 1
                    await trio.sleep(0.01)
            except trio.BrokenResourceError:
                self._left("reset while sending")
                nursery.cancel_scope.cancel()

    def _left(self, how: str) -> None:
        if not self.gone.is_set():
            self.gone_at = trio.current_time()
            self.gone_how = how
            self.gone.set()


async def _read_request(stream: trio.SocketStream) -> Received:
    buf = bytearray()
    while b"\r\n\r\n" not in buf:
        data = await stream.receive_some()
        if not data:
            raise EOFError
        buf += data
    head, _, rest = bytes(buf).partition(b"\r\n\r\n")
    request_line, *lines = head.decode("latin-1").split("\r\n")
    method, target, _version = request_line.split(" ", 2)
    headers = {}
    for line in lines:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    body = bytearray(rest)
    length = int(headers.get("content-length", "0"))
    while len(body) < length:
        data = await stream.receive_some()
        if not data:
            raise EOFError
        body += data
    return Received(method, target, headers, bytes(body))


class StreamingProvider(Protocol):
    def stream(self, request: ModelRequest) -> Any: ...


async def collect(provider: StreamingProvider, request: ModelRequest,
                  seen: list[StreamChunk] | None = None, *,
                  usage: bool = False) -> list[StreamChunk]:
    """Every chunk of one streamed request (into ``seen`` too, if given), within 5 s; the
    usage report only if ``usage``."""
    seen = [] if seen is None else seen
    with trio.fail_after(5):
        async with provider.stream(request) as stream:
            async for chunk in stream:
                if usage or not isinstance(chunk, UsageReport):
                    seen.append(chunk)
    return seen


def split(body: bytes, size: int) -> tuple[bytes, ...]:
    """Cut a body into pieces of ``size`` bytes: lines, CRLFs and UTF-8 get split."""
    return tuple(body[i:i + size] for i in range(0, len(body), size))
