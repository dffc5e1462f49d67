"""Listening for the socket link: ``ws://HOST:PORT`` (WebSocket, PORT 0 picks one) or
``unix:PATH`` (the client link's newline-delimited frames over a Unix socket), each
connection served as one client of the daemon (``ServeLink``).

What may connect is decided in ``guard.py``: this module only binds, makes the token
and its file, and hands each connection over.
"""

from __future__ import annotations

import dataclasses
import errno
import json
import logging
import os
import pathlib
import socket
from collections.abc import Awaitable, Callable

import trio

from runtime.daemon.socketlink.guard import (
    Guard,
    UnsafeAddress,
    check_bind_host,
    make_token,
    prepare_unix_dir,
    tcp_peer_refusal,
    unix_peer_refusal,
    write_token_file,
)
from runtime.daemon.socketlink.websocket import handle_connection

log = logging.getLogger(__name__)

ServeLink = Callable[[trio.abc.ReceiveStream, trio.abc.SendStream], Awaitable[None]]


@dataclasses.dataclass(frozen=True)
class ListenSpec:
    kind: str  # "ws" or "unix"
    host: str = ""
    port: int = 0
    path: pathlib.Path | None = None


def parse_listen(text: str) -> ListenSpec:
    """``ws://HOST:PORT`` or ``unix:PATH``; ValueError otherwise."""
    if text.startswith("unix:"):
        path = text[len("unix:"):].removeprefix("//")
        if not path:
            raise ValueError("unix: needs a path")
        return ListenSpec("unix", path=pathlib.Path(path).absolute())
    if text.startswith("ws://"):
        rest = text[len("ws://"):].rstrip("/")
        host, sep, port = rest.rpartition(":")
        if not sep or not port.isdigit() or not host:
            raise ValueError(f"{text!r}: expected ws://HOST:PORT")
        return ListenSpec("ws", host=host.strip("[]"), port=int(port))
    raise ValueError(f"{text!r}: expected ws://HOST:PORT or unix:PATH")


def check_listen(text: str, *, allow_remote: bool) -> ListenSpec:
    """The address parsed and checked before anything starts (ValueError, UnsafeAddress)."""
    spec = parse_listen(text)
    if spec.kind == "ws":
        check_bind_host(spec.host, allow_remote=allow_remote)
    else:
        assert spec.path is not None
        prepare_unix_dir(spec.path)
    return spec


@dataclasses.dataclass
class Listening:
    """Where the link listens, as printed at start (one JSON line on stdout)."""

    listen: str
    url: str | None = None
    token_file: str | None = None

    def line(self) -> str:
        return json.dumps({"listen": self.listen, "url": self.url,
                           "tokenFile": self.token_file})


class SocketListener:
    def __init__(self, spec: ListenSpec, serve_link: ServeLink, *, max_frame_size: int,
                 token_dir: pathlib.Path, origins: tuple[str, ...] = (),
                 allow_remote: bool = False, web: bool = False) -> None:
        self.spec = spec
        self._serve_link = serve_link
        self._max_frame_size = max_frame_size
        self._token_dir = token_dir
        self._origins = origins
        self._allow_remote = allow_remote
        self._web = web
        self.listening: Listening | None = None
        self.guard: Guard | None = None

    async def run(self, *, task_status: trio.TaskStatus[Listening] = trio.TASK_STATUS_IGNORED
                  ) -> None:
        if self.spec.kind == "unix":
            await self._run_unix(task_status)
        else:
            await self._run_ws(task_status)

    async def _run_ws(self, task_status: trio.TaskStatus[Listening]) -> None:
        check_bind_host(self.spec.host, allow_remote=self._allow_remote)
        listeners = await trio.open_tcp_listeners(self.spec.port, host=self.spec.host)
        port = listeners[0].socket.getsockname()[1]
        host = self.spec.host if ":" not in self.spec.host else f"[{self.spec.host}]"
        names: tuple[str, ...] = ("127.0.0.1", "localhost", "[::1]")
        if host not in names:
            names = (*names, host)
        token = make_token()
        self.guard = Guard(token, port, hosts=names, origins=self._origins)
        token_file = self._token_dir / f"socket-{os.getpid()}.token"
        write_token_file(token_file, token)
        self.listening = Listening(f"ws://{host}:{port}", f"http://{host}:{port}/#token={token}",
                                   str(token_file))
        log.info("socket link listening on ws://%s:%d (token in %s)", host, port, token_file)
        try:
            task_status.started(self.listening)
            await trio.serve_listeners(self._on_tcp, listeners)
        finally:
            token_file.unlink(missing_ok=True)

    async def _on_tcp(self, stream: trio.SocketStream) -> None:
        assert self.guard is not None
        why = await tcp_peer_refusal(stream.socket)
        if why is not None:
            log.warning("socket link: refused a connection: %s", why)
            await stream.aclose()
            return
        await handle_connection(stream, self.guard, self._serve_link,
                                max_frame_size=self._max_frame_size, web=self._web)

    async def _run_unix(self, task_status: trio.TaskStatus[Listening]) -> None:
        path = self.spec.path
        assert path is not None
        prepare_unix_dir(path)
        sock = trio.socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            _unlink_stale(path)
            old = os.umask(0o177)  # the socket is made 0600
            try:
                await sock.bind(str(path))
            finally:
                os.umask(old)
            os.chmod(path, 0o600)
            sock.listen(64)
        except BaseException:
            sock.close()
            raise
        self.listening = Listening(f"unix:{path}")
        log.info("socket link listening on unix:%s", path)
        try:
            task_status.started(self.listening)
            await trio.serve_listeners(self._on_unix, [trio.SocketListener(sock)])
        finally:
            path.unlink(missing_ok=True)

    async def _on_unix(self, stream: trio.SocketStream) -> None:
        async with stream:
            why = unix_peer_refusal(stream.socket)
            if why is not None:
                log.warning("socket link: refused a connection: %s", why)
                return
            await self._serve_link(stream, stream)


def _unlink_stale(path: pathlib.Path) -> None:
    """A socket left by a dead daemon is removed; a live one's is not taken over."""
    if not path.exists():
        return
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        probe.connect(str(path))
    except OSError as exc:
        if exc.errno != errno.ECONNREFUSED:
            raise UnsafeAddress(f"{path}: {exc}") from exc
        path.unlink()
    else:
        raise UnsafeAddress(f"{path}: a daemon is listening there already")
    finally:
        probe.close()
