"""The runtime daemon: the client link's handlers and the lifetime of the host.

``quiesce serve`` runs :func:`serve` on stdin/stdout. EOF on stdin, or a
``shutdown`` request, stops the host and ends the daemon with exit status 0.
"""

from __future__ import annotations

import itertools
import logging
from collections.abc import Sequence

import trio

from protocol.errors import ErrorCode, RpcError
from protocol.framing import DEFAULT_MAX_FRAME_SIZE
from protocol.messages.client import (
    DebugRunToolParams,
    DebugRunToolResult,
    SessionListResult,
    SessionNewParams,
    SessionNewResult,
)
from protocol.messages.common import Empty, InitializeParams, InitializeResult, PeerInfo
from protocol.messages.host import SessionOpenParams, ToolsExecuteParams
from protocol.methods import CLIENT_TO_RUNTIME, RUNTIME_TO_CLIENT
from protocol.tools import ToolResult
from protocol.version import PROTOCOL_VERSION, check_compatible
from runtime.host_link import HostLink
from runtime.rpc import Endpoint, Handler
from runtime.sessions import SessionTable

log = logging.getLogger(__name__)

VERSION = "0.1.0"
DRAIN_TIMEOUT = 10.0


class Daemon:
    def __init__(self, *, host_command: Sequence[str] | None = None,
                 max_frame_size: int = DEFAULT_MAX_FRAME_SIZE) -> None:
        self.max_frame_size = max_frame_size
        self.sessions = SessionTable()
        self.host = HostLink(command=host_command)
        self._initialized = False
        self._shutdown = trio.Event()
        self._debug_ids = itertools.count(1)

    @property
    def handlers(self) -> dict[str, Handler]:
        return {
            "initialize": self.initialize,
            "session.new": self.session_new,
            "session.list": self.session_list,
            "debug.runTool": self.debug_run_tool,
            "shutdown": self.shutdown,
        }

    async def serve(self, receive: trio.abc.ReceiveStream, send: trio.abc.SendStream) -> None:
        client = Endpoint("client", receive, send, incoming=CLIENT_TO_RUNTIME,
                          outgoing=RUNTIME_TO_CLIENT, handlers=self.handlers,
                          max_frame_size=self.max_frame_size)
        async with trio.open_nursery() as nursery:
            await self.host.start(nursery)
            async with trio.open_nursery() as client_nursery:
                client_nursery.start_soon(client.run)
                client_nursery.start_soon(self._shutdown_on_eof, client)
                await self._shutdown.wait()
                client.stop_reading()
                await self.host.stop()
                # Running handlers answer (the host is gone under them), then the
                # writer drains; past the deadline they are cancelled.
                client_nursery.cancel_scope.deadline = trio.current_time() + DRAIN_TIMEOUT
            nursery.cancel_scope.cancel()
        log.info("daemon stopped")

    async def _shutdown_on_eof(self, client: Endpoint) -> None:
        await client.closed.wait()
        log.info("client closed the link")
        self._shutdown.set()

    # -- client methods -------------------------------------------------------------

    async def initialize(self, params: InitializeParams) -> InitializeResult:
        check_compatible(params.protocol_version)
        self._initialized = True
        host_info = self.host.info
        return InitializeResult(
            PROTOCOL_VERSION,
            PeerInfo("quiesce", VERSION),
            {"host": {"pid": self.host.pid,
                      "tools": host_info.capabilities.get("tools", {}) if host_info else {}}},
        )

    def _require_initialized(self) -> None:
        if not self._initialized:
            raise RpcError(ErrorCode.NOT_INITIALIZED, "send initialize first")

    async def session_new(self, params: SessionNewParams) -> SessionNewResult:
        self._require_initialized()
        session = self.sessions.create(params.workspace, params.permission_mode)
        await self.host.request("session.open", SessionOpenParams(
            session.session_id, session.workspace, session.permission_mode))
        log.info("session %s opened on %s", session.session_id, session.workspace)
        return SessionNewResult(session.session_id)

    async def session_list(self, params: Empty) -> SessionListResult:
        self._require_initialized()
        return SessionListResult(tuple(s.info() for s in self.sessions.all()))

    async def debug_run_tool(self, params: DebugRunToolParams) -> DebugRunToolResult:
        self._require_initialized()
        session = self.sessions.get(params.session_id)
        call_id = f"dbg-{next(self._debug_ids)}"
        result: ToolResult = await self.host.request("tools.execute", ToolsExecuteParams(
            session.session_id, call_id, params.tool, dict(params.args)))
        return DebugRunToolResult(call_id, result)

    async def shutdown(self, params: Empty) -> Empty:
        await self.host.stop()
        self._shutdown.set()
        return Empty()
