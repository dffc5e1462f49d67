"""A client of ``quiesce serve`` as a subprocess: what the demo, tests and tools use.

It speaks the client link through the same endpoint the daemon uses, so the
requests it sends are typed and its answers decoded.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager
from typing import IO, Any

import msgspec
import trio

from protocol.messages.common import InitializeParams, InitializeResult, PeerInfo
from protocol.methods import CLIENT_TO_RUNTIME, RUNTIME_TO_CLIENT
from protocol.version import PROTOCOL_VERSION
from runtime.link import Endpoint, Handler, NotificationHandler

SHUTDOWN_TIMEOUT = 15.0


def serve_command(*extra: str) -> list[str]:
    return [sys.executable, "-m", "runtime", "serve", *extra]


class DaemonClient:
    def __init__(self, process: trio.Process, endpoint: Endpoint) -> None:
        self.process = process
        self.endpoint = endpoint
        self.info: InitializeResult | None = None

    async def request(self, method: str, params: msgspec.Struct) -> Any:
        return await self.endpoint.request(method, params)

    async def initialize(self) -> InitializeResult:
        self.info = await self.request(
            "initialize", InitializeParams(PROTOCOL_VERSION, PeerInfo("quiesce-client", "0.1.0")))
        return self.info


@asynccontextmanager
async def spawn_daemon(
    command: Sequence[str] | None = None,
    *,
    handlers: Mapping[str, Handler] | None = None,
    notification_handlers: Mapping[str, NotificationHandler] | None = None,
    env: Mapping[str, str] | None = None,
    stderr: int | IO[bytes] | None = None,
    start_new_session: bool = False,
) -> AsyncIterator[DaemonClient]:
    """Run ``quiesce serve``; on exit close its stdin and wait for it (kill past a deadline).

    ``start_new_session`` keeps the daemon out of the caller's terminal process group
    (a terminal's Ctrl-C must never signal it: the chat stops turns itself)."""
    process = await trio.lowlevel.open_process(
        list(command or serve_command()), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
        stderr=stderr, env=dict(env) if env is not None else None,
        start_new_session=start_new_session,
    )
    assert process.stdin is not None and process.stdout is not None
    endpoint = Endpoint("daemon", process.stdout, process.stdin, incoming=RUNTIME_TO_CLIENT,
                        outgoing=CLIENT_TO_RUNTIME, handlers=handlers,
                        notification_handlers=notification_handlers)
    try:
        async with trio.open_nursery() as nursery:
            await nursery.start(endpoint.run)
            try:
                yield DaemonClient(process, endpoint)
            finally:
                with trio.CancelScope(shield=True):
                    await process.stdin.aclose()
                    with trio.move_on_after(SHUTDOWN_TIMEOUT):
                        await process.wait()
                nursery.cancel_scope.cancel()
    finally:
        if process.returncode is None:
            process.kill()
            with trio.CancelScope(shield=True):
                await process.wait()
