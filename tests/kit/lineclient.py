"""Newline-delimited JSON-RPC over a byte stream, as on stdio and ``--listen unix:``.

One client for every test that speaks frames by hand: ``quiesce serve``'s stdin and
stdout (:class:`tests.kit.rawclient.RawClient`), a Unix socket link
(:func:`tests.kit.socketclient.unix_connect`), the ops socket.
"""

from __future__ import annotations

from typing import Any

import msgspec
import trio


class LineClient:
    def __init__(self, send: trio.abc.SendStream, receive: trio.abc.ReceiveStream, *,
                 first_id: int = 0, within: float = 20.0) -> None:
        self._send = send
        self._receive = receive
        self._next_id = first_id
        self._within = within  # how long a receive waits by default
        self.buffer = b""
        self.seen: list[Any] = []
        """What :meth:`call` read before its answer (notifications, other answers)."""

    async def send_bytes(self, data: bytes) -> None:
        await self._send.send_all(data)

    async def send(self, obj: Any) -> None:
        await self.send_bytes(msgspec.json.encode(obj) + b"\n")

    async def receive(self, within: float | None = None) -> Any:
        """The next message (``EOFError`` if the peer closed first)."""
        with trio.fail_after(self._within if within is None else within):
            while b"\n" not in self.buffer:
                chunk = await self._receive.receive_some(65536)
                if not chunk:
                    raise EOFError("the peer closed the stream")
                self.buffer += chunk
        line, _, self.buffer = self.buffer.partition(b"\n")
        return msgspec.json.decode(line)

    def request(self, method: str, params: Any = None) -> dict[str, Any]:
        """A request with the next id."""
        self._next_id += 1
        message: dict[str, Any] = {"jsonrpc": "2.0", "id": self._next_id, "method": method}
        if params is not None:
            message["params"] = params
        return message

    async def call(self, method: str, params: Any = None) -> Any:
        """Send a request; its answer (what is read before it is kept in ``seen``)."""
        message = self.request(method, params)
        await self.send(message)
        while True:
            answer = await self.receive()
            if answer.get("id") == message["id"] and "method" not in answer:
                return answer
            self.seen.append(answer)

    async def aclose(self) -> None:
        await self._send.aclose()
        if self._receive is not self._send:
            await self._receive.aclose()
