"""A byte-level client of ``quiesce serve``: send any bytes, read answer lines."""

from __future__ import annotations

import subprocess
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from typing import Any

import msgspec
import trio

from runtime.clients.daemon_client import serve_command


class RawClient:
    def __init__(self, process: trio.Process) -> None:
        assert process.stdin is not None and process.stdout is not None
        self.process = process
        self._stdin = process.stdin
        self._stdout = process.stdout
        self._buffer = b""
        self._next_id = 1000

    async def send_bytes(self, data: bytes) -> None:
        await self._stdin.send_all(data)

    async def send(self, obj: Any) -> None:
        await self.send_bytes(msgspec.json.encode(obj) + b"\n")

    async def receive(self, within: float = 20.0) -> Any:
        with trio.fail_after(within):
            while b"\n" not in self._buffer:
                chunk = await self._stdout.receive_some(65536)
                if not chunk:
                    raise EOFError("daemon closed stdout")
                self._buffer += chunk
        line, _, self._buffer = self._buffer.partition(b"\n")
        return msgspec.json.decode(line)

    async def call(self, method: str, params: Any = None) -> Any:
        self._next_id += 1
        message: dict[str, Any] = {"jsonrpc": "2.0", "id": self._next_id, "method": method}
        if params is not None:
            message["params"] = params
        await self.send(message)
        while True:
            answer = await self.receive()
            if "method" not in answer:  # skip notifications (session.event)
                break
        assert answer.get("id") == self._next_id, answer
        return answer

    async def close(self) -> int:
        await self._stdin.aclose()
        with trio.fail_after(20):
            return await self.process.wait()


@asynccontextmanager
async def raw_daemon(env: Mapping[str, str]) -> AsyncIterator[RawClient]:
    process = await trio.lowlevel.open_process(
        serve_command(), stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=dict(env))
    try:
        yield RawClient(process)
    finally:
        if process.returncode is None:
            with trio.CancelScope(shield=True):
                assert process.stdin is not None
                await process.stdin.aclose()
                with trio.move_on_after(15):
                    await process.wait()
                if process.returncode is None:
                    process.kill()
                    await process.wait()
