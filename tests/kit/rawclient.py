"""A byte-level client of ``quiesce serve``: send any bytes, read answer lines."""

from __future__ import annotations

import subprocess
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from typing import Any

import trio

from runtime.clients.daemon_client import serve_command
from tests.kit.lineclient import LineClient


class RawClient(LineClient):
    """Frames on the daemon's stdin and stdout. Its :meth:`call` sends one request at a
    time: only notifications (dropped) may come before the answer."""

    def __init__(self, process: trio.Process) -> None:
        assert process.stdin is not None and process.stdout is not None
        super().__init__(process.stdin, process.stdout, first_id=1000)
        self.process = process
        self._stdin = process.stdin

    async def call(self, method: str, params: Any = None) -> Any:
        answer = await super().call(method, params)
        others = [m for m in self.seen if "method" not in m]
        self.seen.clear()
        assert not others, (answer, others)
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
