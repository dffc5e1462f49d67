"""The host's side of the runtime link: handlers, and what EOF means.

``tools.abort`` is handled in its own task like every request, and never
passes through admission, so it is read and acted on while every execution
slot is busy. When the runtime's pipe closes, every call is stopped as for a
stop (process trees killed), every plugin server's tree is killed, and the host
exits.
"""

from __future__ import annotations

import logging
import os
import signal

import trio

from host.manager import CallManager, HostConfig
from host.tools import TOOLS
from protocol.messages.common import Empty, InitializeParams, InitializeResult, PeerInfo
from protocol.messages.host import (
    HostStatsResult,
    PermissionRequestParams,
    PermissionRequestResult,
    PermissionWithdrawnParams,
    PluginsListParams,
    PluginsListResult,
    SessionCloseHostParams,
    SessionOpenParams,
    ToolsAbortParams,
    ToolsAbortResult,
    ToolsExecuteParams,
    ToolsForceParams,
    ToolsForceResult,
    ToolsOutputParams,
)
from protocol.methods import HOST_TO_RUNTIME, RUNTIME_TO_HOST
from protocol.tools import Decision, ToolResult
from protocol.version import PROTOCOL_VERSION, check_compatible
from runtime.rpc import Endpoint, Handler

log = logging.getLogger(__name__)


class _EndpointPort:
    """The manager's view of the runtime link."""

    def __init__(self, endpoint: Endpoint) -> None:
        self._endpoint = endpoint

    async def request_permission(self, params: PermissionRequestParams) -> Decision:
        result: PermissionRequestResult = await self._endpoint.request("permission.request",
                                                                       params)
        return result.decision

    def permission_withdrawn(self, params: PermissionWithdrawnParams) -> None:
        self._endpoint.notify("permission.withdrawn", params)

    def tool_output(self, params: ToolsOutputParams) -> None:
        self._endpoint.notify("tools.output", params)


class HostServer:
    def __init__(self, config: HostConfig, receive: trio.abc.ReceiveStream,
                 send: trio.abc.SendStream) -> None:
        self.endpoint = Endpoint("runtime", receive, send, incoming=RUNTIME_TO_HOST,
                                 outgoing=HOST_TO_RUNTIME)
        self.manager = CallManager(config, _EndpointPort(self.endpoint))
        for method, handler in self.handlers.items():
            self.endpoint.add_handler(method, handler)

    @property
    def handlers(self) -> dict[str, Handler]:
        return {
            "initialize": self.initialize,
            "session.open": self.session_open,
            "session.close": self.session_close,
            "plugins.list": self.plugins_list,
            "tools.execute": self.tools_execute,
            "tools.abort": self.tools_abort,
            "tools.force": self.tools_force,
            "host.stats": self.stats,
            "shutdown": self.shutdown,
        }

    async def serve(self) -> None:
        async with trio.open_nursery() as background:
            self.manager.attach(background)
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self._stop_on_eof)
                nursery.start_soon(self._stop_on_signal)
                await self.endpoint.run()
                nursery.cancel_scope.cancel()
            await self.manager.close_plugins("the host is exiting")
            background.cancel_scope.cancel()  # forced bodies still running are abandoned

    async def _stop_on_signal(self) -> None:
        """SIGTERM, SIGHUP or SIGINT: stop every call (trees killed), then exit."""
        with trio.open_signal_receiver(signal.SIGTERM, signal.SIGHUP, signal.SIGINT) as signals:
            async for signum in signals:
                log.info("signal %s: stopping %d calls", signal.Signals(signum).name,
                         len(self.manager.calls))
                await self.manager.stop_all("disposed")
                self.endpoint.stop_reading()
                return

    async def _stop_on_eof(self) -> None:
        await self.endpoint.closed.wait()
        if len(self.manager.calls):
            log.info("runtime link closed: stopping %d calls", len(self.manager.calls))
        await self.manager.stop_all("disposed")

    async def initialize(self, params: InitializeParams) -> InitializeResult:
        check_compatible(params.protocol_version)
        tools = {name: spec.tool_class.value for name, spec in TOOLS.items()}
        return InitializeResult(PROTOCOL_VERSION, PeerInfo("quiesce-host", "0.1.0"),
                                {"tools": tools, "pid": os.getpid()})

    async def session_open(self, params: SessionOpenParams) -> Empty:
        self.manager.open_session(params.session_id, params.workspace, params.permission_mode,
                                  params.mcp_servers)
        return Empty()

    async def session_close(self, params: SessionCloseHostParams) -> Empty:
        await self.manager.close_session(params.session_id)
        return Empty()

    async def plugins_list(self, params: PluginsListParams) -> PluginsListResult:
        return await self.manager.list_plugins(params.session_id)

    async def tools_execute(self, params: ToolsExecuteParams) -> ToolResult:
        return await self.manager.execute(params)

    async def tools_abort(self, params: ToolsAbortParams) -> ToolsAbortResult:
        return self.manager.abort(params)

    async def tools_force(self, params: ToolsForceParams) -> ToolsForceResult:
        forced, detail = self.manager.force(params.session_id, params.call_id, params.tool)
        return ToolsForceResult(forced, detail)

    async def stats(self, params: Empty) -> HostStatsResult:
        m = self.manager
        return HostStatsResult(len(m.calls), len(m.tombstones), m.tombstones.expired,
                               m.tombstones.evicted, m.admission.waiting, m.admission.running)

    async def shutdown(self, params: Empty) -> Empty:
        await self.manager.stop_all("disposed")
        self.endpoint.stop_reading()
        return Empty()
