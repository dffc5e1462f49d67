"""One TCP connection of the socket link: its HTTP request (h11), the checks
(``guard.py``), then either a static page or a WebSocket (wsproto) carrying the client
link.

The WebSocket is adapted to the byte streams the project's ``Endpoint`` reads and writes,
so the link keeps every wire rule of stdio (wire order, bounds, errors): one JSON-RPC
message per text frame in both directions. Incoming, a message becomes one newline-framed
frame (a raw newline, which JSON allows only as whitespace between tokens, becomes a
carriage return, the same whitespace; inside a string both are invalid, so nothing valid
changes meaning). Outgoing, each frame the endpoint writes is one text message.
A binary message is refused with close code 1003 (unsupported data), one larger than the
frame limit with 1009 (message too big), before any of it reaches the endpoint.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

import h11
import trio
from wsproto.connection import Connection, ConnectionState, ConnectionType
from wsproto.events import BytesMessage, CloseConnection, Ping, TextMessage
from wsproto.frame_protocol import CloseReason
from wsproto.utilities import generate_accept_token

from runtime.daemon.socketlink.guard import SUBPROTOCOL, Guard, Refused
from runtime.daemon.socketlink.webpage import Page, find_page

log = logging.getLogger(__name__)

READ_CHUNK = 65536
HANDSHAKE_TIMEOUT = 10.0
MAX_REQUEST_HEAD = 16384

ServeLink = Callable[[trio.abc.ReceiveStream, trio.abc.SendStream], Awaitable[None]]


async def handle_connection(stream: trio.abc.Stream, guard: Guard, serve_link: ServeLink, *,
                            max_frame_size: int, web: bool) -> None:
    """Serve one TCP connection until it closes."""
    http = h11.Connection(h11.SERVER, max_incomplete_event_size=MAX_REQUEST_HEAD)
    with trio.move_on_after(HANDSHAKE_TIMEOUT) as timer:
        request = await _read_request(stream, http)
    if timer.cancelled_caught or request is None:
        await stream.aclose()
        return
    headers: dict[str, list[str]] = {}
    for name, value in request.headers:
        headers.setdefault(name.decode("latin-1").lower(), []).append(value.decode("latin-1"))
    target = request.target.decode("latin-1")
    method = request.method.decode("latin-1")
    upgrade = "websocket" in headers.get("upgrade", [""])[0].lower()
    try:
        guard.check_request(method, target, headers, websocket=upgrade)
    except Refused as refused:
        await _respond(stream, http, refused.status, b"text/plain", refused.reason.encode())
        await stream.aclose()
        return
    if not upgrade:
        page = find_page(target) if web and method == "GET" else None
        if page is None:
            await _respond(stream, http, 404, b"text/plain", b"not found")
        else:
            await _respond_page(stream, http, page)
        await stream.aclose()
        return
    key = headers.get("sec-websocket-key", [""])[0]
    if headers.get("sec-websocket-version", [""])[0] != "13" or not key:
        await _respond(stream, http, 400, b"text/plain", b"WebSocket version 13 only")
        await stream.aclose()
        return
    accept = generate_accept_token(key.encode())
    reply = [(b"upgrade", b"websocket"), (b"connection", b"Upgrade"),
             (b"sec-websocket-accept", accept)]
    offered = [p.strip() for value in headers.get("sec-websocket-protocol", [])
               for p in value.split(",")]
    if SUBPROTOCOL in offered:  # a browser must be given one it offered
        reply.append((b"sec-websocket-protocol", SUBPROTOCOL.encode()))
    await stream.send_all(http.send(h11.InformationalResponse(status_code=101,
                                                                headers=reply)))
    trailing, _ = http.trailing_data
    ws = WebSocketStream(stream, max_frame_size, bytes(trailing))
    try:
        await serve_link(ws, ws)
    finally:
        await ws.close(1000, "")


async def _read_request(stream: trio.abc.Stream, http: h11.Connection) -> h11.Request | None:
    while True:
        try:
            event = http.next_event()
        except h11.RemoteProtocolError:
            return None
        if isinstance(event, h11.Request):
            return event
        if event is h11.NEED_DATA:
            data = await stream.receive_some(READ_CHUNK)
            http.receive_data(bytes(data))
            if not data:
                return None
        elif isinstance(event, h11.ConnectionClosed):
            return None


async def _respond(stream: trio.abc.Stream, http: h11.Connection, status: int,
                   content_type: bytes, body: bytes,
                   extra: tuple[tuple[bytes, bytes], ...] = ()) -> None:
    headers = [(b"content-type", content_type), (b"content-length", str(len(body)).encode()),
               (b"connection", b"close"), (b"cache-control", b"no-store"), *extra]
    try:
        await stream.send_all(http.send(h11.Response(status_code=status, headers=headers))
                              + http.send(h11.Data(data=body)) + http.send(h11.EndOfMessage()))
    except (trio.BrokenResourceError, trio.ClosedResourceError):
        pass


async def _respond_page(stream: trio.abc.Stream, http: h11.Connection, page: Page) -> None:
    await _respond(stream, http, 200, page.content_type, page.body, (
        (b"content-security-policy", page.csp),
        (b"x-content-type-options", b"nosniff"),
        (b"referrer-policy", b"no-referrer"),
        (b"x-frame-options", b"DENY"),
    ))


class WebSocketStream(trio.abc.HalfCloseableStream):
    """A WebSocket as the byte streams the ``Endpoint`` reads and writes."""

    def __init__(self, stream: trio.abc.Stream, max_frame_size: int, initial: bytes) -> None:
        self._stream = stream
        self._max = max_frame_size
        self._ws = Connection(ConnectionType.SERVER)
        if initial:
            self._ws.receive_data(initial)
        self._ready = bytearray()
        self._text: list[str] = []
        self._size = 0
        self._eof = False
        self._write_lock = trio.Lock()
        self._pending_out = b""

    async def _write(self, data: bytes) -> None:
        if not data:
            return
        async with self._write_lock:
            await self._stream.send_all(data)

    async def close(self, code: int, reason: str) -> None:
        """Send a close frame (if the connection is still open), then close the socket."""
        self._eof = True
        if self._ws.state is ConnectionState.OPEN:
            try:
                await self._write(self._ws.send(CloseConnection(code=code, reason=reason)))
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                pass
        await self._stream.aclose()

    # -- ReceiveStream --------------------------------------------------------------

    async def receive_some(self, max_bytes: int | None = None) -> bytes:
        while not self._ready and not self._eof:
            if not await self._process_events():
                try:
                    data = await self._stream.receive_some(READ_CHUNK)
                except (trio.BrokenResourceError, trio.ClosedResourceError):
                    data = b""
                if not data:
                    self._eof = True
                    break
                self._ws.receive_data(bytes(data))
        if not self._ready:
            return b""
        size = len(self._ready) if max_bytes is None else min(max_bytes, len(self._ready))
        out = bytes(self._ready[:size])
        del self._ready[:size]
        return out

    async def _process_events(self) -> bool:
        """Handle the events already received; True if any."""
        any_event = False
        for event in self._ws.events():
            any_event = True
            if isinstance(event, TextMessage):
                self._size += len(event.data.encode("utf-8", "surrogatepass"))
                if self._size > self._max:
                    log.warning("socket link: message over %d bytes: closing (1009)", self._max)
                    await self.close(CloseReason.MESSAGE_TOO_BIG, "message too big")
                    return True
                self._text.append(event.data)
                if event.message_finished:
                    text = "".join(self._text).replace("\n", "\r")
                    self._ready += text.encode("utf-8", "surrogatepass") + b"\n"
                    self._text.clear()
                    self._size = 0
            elif isinstance(event, BytesMessage):
                log.warning("socket link: binary message: closing (1003)")
                await self.close(CloseReason.UNSUPPORTED_DATA, "text frames only")
                return True
            elif isinstance(event, Ping):
                await self._write(self._ws.send(event.response()))
            elif isinstance(event, CloseConnection):
                if self._ws.state is ConnectionState.REMOTE_CLOSING:
                    await self._write(self._ws.send(event.response()))
                self._eof = True
                return True
        return any_event

    # -- SendStream -----------------------------------------------------------------

    async def send_all(self, data: bytes | bytearray | memoryview) -> None:
        if self._ws.state is not ConnectionState.OPEN:
            raise trio.BrokenResourceError("WebSocket closed")
        buffered = self._pending_out + bytes(data)
        *lines, self._pending_out = buffered.split(b"\n")
        out = b"".join(self._ws.send(TextMessage(data=line.decode("utf-8", "surrogatepass")))
                       for line in lines)
        await self._write(out)

    async def wait_send_all_might_not_block(self) -> None:
        await self._stream.wait_send_all_might_not_block()

    async def send_eof(self) -> None:
        await self.close(1000, "")

    async def aclose(self) -> None:
        await self.close(1000, "")
