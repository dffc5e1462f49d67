"""The sandbox's HTTP proxy (network ``proxy``): a session's only way out of its private
network namespace, admitting the configured ``allow_domains`` only.

Its listener is a socket made inside the session's namespace (``netns.listen_inside``:
a thread enters it, binds ``127.0.0.1:<free port>``, goes back; the socket keeps its
namespace), accepted on from the host's trio loop. So only the session's processes reach
it (on their own loopback), and what it connects to is reached from the host's own
namespace. Children find it in ``HTTP_PROXY``/``HTTPS_PROXY`` (``SessionSandbox.env``).

It speaks ``CONNECT host:port`` (a tunnel, for HTTPS) and plain HTTP with an absolute URI
(``GET http://host/path``), parsed with h11; a domain not admitted gets ``403`` whose
reason and body name it (``REFUSED_MARK``, recognised in a Bash result by
``host/sandbox/refusal.py``). Bounds: the request head's size, connections at once, idle
time of a connection. Its tasks live in its own nursery, under a scope the session's
sandbox cancels when it closes.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
from collections.abc import Callable
from urllib.parse import urlsplit

import h11
import trio

from protocol.sandboxsettings import admits
from runtime.proc import netns

log = logging.getLogger(__name__)

MAX_HEAD_BYTES = 16 * 1024
MAX_CONNECTIONS = 64
IDLE_SECONDS = 120.0
CONNECT_SECONDS = 15.0
READY_SECONDS = 10.0
CHUNK = 64 * 1024
REFUSED_MARK = "quiesce sandbox proxy"
_HOP_BY_HOP = frozenset({b"connection", b"keep-alive", b"proxy-connection",
                         b"proxy-authorization", b"proxy-authenticate", b"te", b"trailer",
                         b"upgrade"})
_SAFE = re.compile(r"[^A-Za-z0-9.\-_:\[\]*]")


class _Answer(Exception):
    """Answer the client ``status`` and close (raised while a request is handled)."""

    def __init__(self, status: int, reason: str, body: str) -> None:
        super().__init__(body)
        self.status, self.reason, self.body = status, reason, body


def refused(domain: str) -> _Answer:
    name = _SAFE.sub("?", domain)[:253]
    return _Answer(403, f"Forbidden ({REFUSED_MARK}: {name} is not allowed)",
                   f"{REFUSED_MARK}: {name} is not in the sandbox's allow_domains; "
                   "the request was refused\n")


class SessionProxy:
    """One session's proxy: ``run`` serves (in a host nursery) until ``close``."""

    def __init__(self, allow: tuple[str, ...], namespace: Callable[[], int | None], *,
                 idle: float = IDLE_SECONDS, max_connections: int = MAX_CONNECTIONS) -> None:
        self.allow = allow
        self.port: int | None = None
        self._namespace = namespace
        self._idle = idle
        self._max = max_connections
        self._active = 0
        self._ready = trio.Event()
        self._scope = trio.CancelScope()

    async def ready(self) -> int | None:
        """Its port once it listens (bounded wait); ``None`` if it could not."""
        with trio.move_on_after(READY_SECONDS):
            await self._ready.wait()
        return self.port

    def close(self) -> None:
        """End it and every connection (on the trio thread)."""
        self._scope.cancel()
        self._ready.set()

    async def run(self) -> None:
        with self._scope:
            try:
                listener = await self._listen()
            except OSError as exc:
                log.warning("the sandbox's proxy cannot listen: %s", exc)
                return
            finally:
                self._ready.set()
            with listener:
                async with trio.open_nursery() as nursery:
                    while True:
                        try:
                            sock, _ = await listener.accept()
                        except OSError as exc:  # out of descriptors, say: not the host's end
                            log.warning("the sandbox's proxy cannot accept: %s", exc)
                            await trio.sleep(0.5)
                            continue
                        stream = trio.SocketStream(sock)
                        if self._active >= self._max:
                            nursery.start_soon(_answer_and_close, stream, _Answer(
                                503, "Too many connections",
                                f"{REFUSED_MARK}: too many connections at once\n"))
                            continue
                        self._active += 1
                        nursery.start_soon(self._serve, stream)

    async def _listen(self) -> trio.socket.SocketType:
        fd = await trio.to_thread.run_sync(self._namespace)
        if fd is None:
            raise OSError("the session has no private network namespace")
        try:
            sock = await trio.to_thread.run_sync(netns.listen_inside, fd)
        finally:
            _close_fd(fd)
        self.port = sock.getsockname()[1]
        return trio.socket.from_stdlib_socket(sock)

    async def _serve(self, client: trio.SocketStream) -> None:
        try:
            async with client:
                conn = h11.Connection(h11.SERVER, max_incomplete_event_size=MAX_HEAD_BYTES)
                try:
                    with trio.fail_after(self._idle):
                        request = await _head(client, conn)
                    if not isinstance(request, h11.Request):
                        return
                    await self._forward(client, conn, request)
                except _Answer as answer:
                    await _answer_and_close(client, answer)
                except (h11.ProtocolError, ValueError) as exc:  # ValueError: a bad port, name
                    status = (exc.error_status_hint
                              if isinstance(exc, h11.RemoteProtocolError) else 400)
                    await _answer_and_close(client, _Answer(
                        status, "Bad request", f"{REFUSED_MARK}: bad request: {exc}\n"))
        except (trio.TooSlowError, trio.BrokenResourceError, trio.ClosedResourceError,
                OSError) as exc:
            log.debug("proxy connection ended: %r", exc)
        finally:
            self._active -= 1

    async def _forward(self, client: trio.SocketStream, conn: h11.Connection,
                       request: h11.Request) -> None:
        target = request.target.decode("ascii", "replace")
        if request.method == b"CONNECT":
            host, port = _host_port(target)
            with trio.fail_after(self._idle):
                end = await _next(client, conn)
            if not isinstance(end, h11.EndOfMessage):
                raise _Answer(400, "Bad request", f"{REFUSED_MARK}: CONNECT has no body\n")
            upstream = await self._open(host, port)
            async with upstream:
                await client.send_all(b"HTTP/1.1 200 Connection established\r\n\r\n")
                leftover, _ = conn.trailing_data
                if leftover:
                    await upstream.send_all(leftover)
                await self._splice(client, upstream)
            return
        url = urlsplit(target)
        if url.scheme != "http" or not url.hostname:
            raise _Answer(400, "Bad request", f"{REFUSED_MARK}: only CONNECT, or plain "
                          f"http:// with an absolute URI, is proxied (not {target[:200]!r})\n")
        host, port = url.hostname, url.port or 80  # a bad port: ValueError, a 400
        upstream = await self._open(host, port)
        async with upstream:
            out = h11.Connection(h11.CLIENT)
            path = (url.path or "/") + (f"?{url.query}" if url.query else "")
            headers = [(k, v) for k, v in request.headers if k.lower() not in _HOP_BY_HOP]
            if not any(k.lower() == b"host" for k, _ in headers):  # HTTP/1.0 may leave it out
                headers.append((b"Host", url.netloc.encode("ascii", "replace")))
            headers.append((b"Connection", b"close"))
            await upstream.send_all(out.send(h11.Request(
                method=request.method, target=path.encode(), headers=headers)) or b"")
            while True:  # the request's body, as it comes
                with trio.fail_after(self._idle):
                    event = await _next(client, conn)
                if isinstance(event, h11.Data):
                    await upstream.send_all(out.send(h11.Data(data=event.data)) or b"")
                elif isinstance(event, h11.EndOfMessage):
                    await upstream.send_all(out.send(h11.EndOfMessage()) or b"")
                    break
                else:
                    return  # the client went away
            await self._splice(upstream, client, one_way=True)

    async def _open(self, host: str, port: int) -> trio.SocketStream:
        if not admits(self.allow, host):
            log.info("sandbox proxy refused %s:%d (not in allow_domains)", host, port)
            raise refused(host)
        try:
            with trio.fail_after(CONNECT_SECONDS):
                return await trio.open_tcp_stream(host, port)
        except (OSError, trio.TooSlowError) as exc:
            raise _Answer(502, "Bad gateway", f"{REFUSED_MARK}: cannot reach "
                          f"{_SAFE.sub('?', host)}:{port}: {exc or 'timed out'}\n") from None

    async def _splice(self, a: trio.SocketStream, b: trio.SocketStream, *,
                      one_way: bool = False) -> None:
        """Bytes both ways (or ``a`` to ``b`` only) until both ends are done, an error,
        or ``idle`` seconds with nothing sent either way."""
        scope = trio.CancelScope(deadline=trio.current_time() + self._idle)

        async def pump(src: trio.SocketStream, dst: trio.SocketStream) -> None:
            try:
                while data := await src.receive_some(CHUNK):
                    await dst.send_all(data)
                    scope.deadline = trio.current_time() + self._idle
                with contextlib.suppress(trio.BrokenResourceError, trio.ClosedResourceError,
                                         OSError):
                    await dst.send_eof()
            except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
                scope.cancel()

        with scope:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(pump, a, b)
                if not one_way:
                    nursery.start_soon(pump, b, a)


async def _next(stream: trio.SocketStream, conn: h11.Connection) -> object:
    """The next h11 event of ``conn``, reading ``stream`` as needed."""
    while True:
        event = conn.next_event()
        if event is not h11.NEED_DATA:
            return event
        conn.receive_data(await stream.receive_some(CHUNK))


async def _head(stream: trio.SocketStream, conn: h11.Connection) -> object:
    """The request's head (h11's event), refused past ``MAX_HEAD_BYTES`` (431) however it
    arrives (h11's own bound holds only while the head is incomplete)."""
    received = 0
    while True:
        event = conn.next_event()
        if event is not h11.NEED_DATA:
            return event
        if received > MAX_HEAD_BYTES:
            raise _Answer(431, "Request header fields too large",
                          f"{REFUSED_MARK}: the request's head is over "
                          f"{MAX_HEAD_BYTES} bytes\n")
        data = await stream.receive_some(MAX_HEAD_BYTES + 1 - received)
        received += len(data)
        conn.receive_data(data)


def _host_port(target: str) -> tuple[str, int]:
    host, sep, port = target.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise _Answer(400, "Bad request", f"{REFUSED_MARK}: CONNECT needs host:port\n")
    return host.strip("[]"), int(port)


async def _answer_and_close(stream: trio.SocketStream, answer: _Answer) -> None:
    body = answer.body.encode("utf-8", "replace")
    head = (f"HTTP/1.1 {answer.status} {answer.reason}\r\nContent-Type: text/plain; "
            f"charset=utf-8\r\nContent-Length: {len(body)}\r\nConnection: close\r\n\r\n")
    with contextlib.suppress(trio.BrokenResourceError, trio.ClosedResourceError, OSError):
        with trio.move_on_after(5):
            await stream.send_all(head.encode("latin-1", "replace") + body)
            await stream.send_eof()
        # Unread input at close would reset the connection, losing the answer: read
        # theirs a little (bounded) first.
        with trio.move_on_after(1):
            drained = 0
            while drained < 4 * MAX_HEAD_BYTES and (data := await stream.receive_some(CHUNK)):
                drained += len(data)
    await stream.aclose()


def _close_fd(fd: int) -> None:
    with contextlib.suppress(OSError):
        os.close(fd)
