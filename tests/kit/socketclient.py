"""Clients of ``quiesce serve --listen``: the daemon as a subprocess listening on a
WebSocket or a Unix socket, and a byte-level client of each (a WebSocket one made with
wsproto over trio, as a native renderer would)."""

from __future__ import annotations

import json
import os
import pathlib
import signal
import subprocess
import sys
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import msgspec
import trio
from wsproto import ConnectionType, WSConnection
from wsproto.events import (
    AcceptConnection,
    BytesMessage,
    CloseConnection,
    Message,
    RejectConnection,
    RejectData,
    Request,
    TextMessage,
)

from runtime.clients.daemon_client import serve_command
from tests.kit.lineclient import LineClient
from tests.kit.waiters import wait_file
from tests.plugins.support import SERVER

INIT = {"protocolVersion": "1.0", "clientInfo": {"name": "test"}}


@dataclass
class Listening:
    process: trio.Process
    listen: str
    url: str | None
    token_file: str | None
    stderr_path: pathlib.Path

    @property
    def token(self) -> str:
        assert self.url is not None
        return self.url.split("#token=", 1)[1]

    @property
    def port(self) -> int:
        return int(self.listen.rsplit(":", 1)[1])


@asynccontextmanager
async def listening_daemon(env: Mapping[str, str], listen: str | None, *extra: str,
                           tmp: pathlib.Path) -> AsyncIterator[Listening]:
    """``quiesce serve --listen LISTEN EXTRA...``; with ``listen`` None, ``quiesce EXTRA``
    (``quiesce web ...``)."""
    stderr_path = tmp / "daemon.stderr"
    command = (serve_command("--listen", listen, *extra) if listen is not None
               else [*serve_command()[:-1], *extra])
    with open(stderr_path, "wb") as stderr:
        process = await trio.lowlevel.open_process(
            command, stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE, stderr=stderr, env=dict(env))
    try:
        assert process.stdout is not None
        buffer = b""
        with trio.fail_after(30):
            while b"\n" not in buffer:
                chunk = await process.stdout.receive_some(4096)
                assert chunk, stderr_path.read_text()
                buffer += chunk
        info = json.loads(buffer.split(b"\n", 1)[0])
        yield Listening(process, info["listen"], info["url"], info["tokenFile"], stderr_path)
    finally:
        with trio.CancelScope(shield=True):
            if process.returncode is None:
                process.send_signal(signal.SIGTERM)
                with trio.move_on_after(20):
                    await process.wait()
                if process.returncode is None:
                    process.kill()
                    await process.wait()


class Refused(Exception):
    def __init__(self, status: int, body: bytes) -> None:
        super().__init__(f"{status}: {body!r}")
        self.status = status
        self.body = body


@dataclass
class WsClient:
    """One WebSocket connection speaking JSON-RPC, one message a text frame."""

    stream: trio.SocketStream
    ws: WSConnection
    subprotocol: str | None = None
    messages: list[Any] = field(default_factory=list)
    closed: CloseConnection | None = None
    _next_id: int = 0

    async def _pump(self) -> list[Any]:
        data = await self.stream.receive_some(65536)
        if not data:
            raise EOFError("connection closed")
        self.ws.receive_data(data)
        events = list(self.ws.events())
        text: list[str] = []
        out = []
        for event in events:
            if isinstance(event, TextMessage):
                text.append(event.data)
                if event.message_finished:
                    out.append(msgspec.json.decode("".join(text)))
                    text.clear()
            elif isinstance(event, CloseConnection):
                self.closed = event
                try:
                    await self.stream.send_all(self.ws.send(event.response()))
                except (trio.BrokenResourceError, trio.ClosedResourceError):
                    pass
                raise EOFError(f"closed {event.code}")
        return out

    async def send_text(self, text: str) -> None:
        await self.stream.send_all(self.ws.send(TextMessage(data=text)))

    async def send_bytes(self, data: bytes) -> None:
        await self.stream.send_all(self.ws.send(BytesMessage(data=data)))

    async def send(self, obj: Any) -> None:
        await self.send_text(msgspec.json.encode(obj).decode())

    async def receive(self, within: float = 20.0) -> Any:
        with trio.fail_after(within):
            while not self.messages:
                self.messages.extend(await self._pump())
        return self.messages.pop(0)

    async def wait_closed(self, within: float = 10.0) -> CloseConnection:
        with trio.fail_after(within):
            while self.closed is None:
                try:
                    await self._pump()
                except EOFError:
                    break
        assert self.closed is not None
        return self.closed

    async def call(self, method: str, params: Any = None, *,
                   within: float = 20.0) -> Any:
        """Send a request; return its answer (notifications read meanwhile are kept in
        ``seen``)."""
        self._next_id += 1
        message: dict[str, Any] = {"jsonrpc": "2.0", "id": self._next_id, "method": method}
        if params is not None:
            message["params"] = params
        await self.send(message)
        return await self.answer(self._next_id, within=within)

    seen: list[Any] = field(default_factory=list)

    async def answer(self, request_id: int, within: float = 20.0) -> Any:
        with trio.fail_after(within):
            while True:
                message = await self.receive(within)
                if message.get("id") == request_id and "method" not in message:
                    return message
                self.seen.append(message)

    async def next_matching(self, predicate: Any, within: float = 20.0) -> Any:
        """The first message (already seen or new) for which ``predicate`` holds."""
        for i, message in enumerate(self.seen):
            if predicate(message):
                return self.seen.pop(i)
        with trio.fail_after(within):
            while True:
                message = await self.receive(within)
                if predicate(message):
                    return message
                self.seen.append(message)

    async def aclose(self) -> None:
        with trio.CancelScope(shield=True):
            try:
                await self.stream.send_all(self.ws.send(CloseConnection(code=1000)))
            except Exception:  # noqa: BLE001 -- already gone: nothing to close
                pass
            await self.stream.aclose()


async def ws_connect(port: int, *, token: str | None = None, how: str = "bearer",
                     host: str | None = None, origin: str | None = None,
                     extra: list[tuple[bytes, bytes]] | None = None) -> WsClient:
    """Connect as a native client (``how="bearer"``) or as a browser does
    (``how="protocol"``: the token in ``Sec-WebSocket-Protocol``). Raise
    :class:`Refused` with the HTTP status when refused."""
    stream = await trio.open_tcp_stream("127.0.0.1", port)
    ws = WSConnection(ConnectionType.CLIENT)
    headers = list(extra or [])
    subprotocols: list[str] = []
    if token is not None and how == "bearer":
        headers.append((b"authorization", b"Bearer " + token.encode()))
    if token is not None and how == "protocol":
        subprotocols = ["quiesce.v1", f"quiesce.token.{token}"]
    if origin is not None:
        headers.append((b"origin", origin.encode()))
    await stream.send_all(ws.send(Request(host=host or f"127.0.0.1:{port}", target="/",
                                          extra_headers=headers,
                                          subprotocols=subprotocols)))
    status = 0
    body = b""
    with trio.fail_after(10):
        while True:
            data = await stream.receive_some(65536)
            if not data:
                await stream.aclose()
                raise Refused(status, body)
            ws.receive_data(data)
            for event in ws.events():
                if isinstance(event, AcceptConnection):
                    return WsClient(stream, ws, event.subprotocol)
                if isinstance(event, RejectConnection):
                    status = event.status_code
                    if not event.has_body:
                        await stream.aclose()
                        raise Refused(status, body)
                elif isinstance(event, RejectData):
                    body += event.data
                    if event.body_finished:
                        await stream.aclose()
                        raise Refused(status, body)
                elif isinstance(event, Message):
                    raise AssertionError(event)


async def unix_connect(path: str) -> LineClient:
    """A client of ``--listen unix:PATH``: newline-delimited frames, as on stdio."""
    stream = await trio.open_unix_socket(path)
    return LineClient(stream, stream)


async def client_of(port: int, token: str) -> WsClient:
    """A WebSocket client that has shaken hands."""
    client = await ws_connect(port, token=token)
    assert "result" in await client.call("initialize", INIT)
    return client


STUBBORN = [[{"toolCall": {"id": "w1", "name": "mcp__tools__wait_stubbornly", "args": {}}}],
            [{"text": "never"}]]
"""A turn whose one call (``w1``) is the test plugin server's that ignores its cancel."""


async def stubborn_session(client: WsClient, workspace: pathlib.Path) -> str:
    """A session of :data:`STUBBORN` made over ``client`` (its plugin server started): its
    id."""
    new = await client.call("session.new", {
        "workspace": str(workspace), "permissionMode": "auto",
        "provider": {"kind": "scripted", "script": STUBBORN},
        "mcpServers": [{"name": "tools", "command": sys.executable,
                        "args": [str(SERVER)]}]}, within=60)
    session_id: str = new["result"]["sessionId"]
    return session_id


async def run_stubborn(client: WsClient, session_id: str, workspace: pathlib.Path, *,
                       request_id: int, text: str = "go") -> int:
    """Prompt it (request ``request_id``, its answer not waited for) until its call runs:
    the plugin server's pid."""
    await client.send({"jsonrpc": "2.0", "id": request_id, "method": "agent.prompt",
                       "params": {"sessionId": session_id, "text": text}})
    return int(await wait_file(workspace / "started-stubbornly", within=30))


def mode_of(path: str | os.PathLike[str]) -> int:
    return os.stat(path).st_mode & 0o777
