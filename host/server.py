"""The host's side of the runtime link: handlers, and what EOF means.

``initialize`` comes first: before a successful one, every method but
``initialize`` and ``shutdown`` is refused (``NOT_INITIALIZED``).
Requests take effect in wire order (``runtime.link``): ``tools.execute`` has taken
its effect once its call is registered, so a ``tools.abort`` written after it
always finds it. ``tools.abort`` never passes through admission, so it is read
and acted on while every execution slot is busy. When the runtime's pipe closes,
every call is stopped as for a stop (process trees killed), every plugin
server's tree is killed, and the host exits, also when a mutating body never
returns (its call is forced, the body abandoned).
"""

from __future__ import annotations

import logging
import os
import signal
from typing import Any

import msgspec
import trio

from host import childenv, limits
from host.manager import CallManager, HostConfig
from host.sandbox import guarantees
from host.tools import TOOLS
from protocol.causes import DisposedCause
from protocol.errors import ErrorCode, RemoteError, RpcError
from protocol.messages.common import Empty, InitializeParams, InitializeResult, PeerInfo
from protocol.messages.host import (
    HooksAbortParams,
    HooksAbortResult,
    HooksRunParams,
    HooksRunResult,
    HostCallInfo,
    HostStatsResult,
    PermissionRequestParams,
    PermissionRequestResult,
    PermissionWithdrawnParams,
    PluginsListParams,
    PluginsListResult,
    SessionCloseHostParams,
    SessionOpenParams,
    SessionOpenResult,
    ToolsAbortParams,
    ToolsAbortResult,
    ToolsExecuteParams,
    ToolsForceParams,
    ToolsForceResult,
    ToolsOutputParams,
    ToolsStartedParams,
)
from protocol.methods import HOST_TO_RUNTIME, RUNTIME_TO_HOST
from protocol.tools import Decision, ToolResult, error_result
from protocol.version import PROTOCOL_VERSION, check_compatible
from runtime.link import (
    ConnectionClosed,
    Effect,
    Endpoint,
    Handler,
    InstantHandler,
    answers_later,
    call_handler,
    marks_effect,
)
from runtime.proc import cgroups

log = logging.getLogger(__name__)

EXIT_GRACE = 1.0
"""Seconds the exiting host waits for bodies of forced calls before leaving without them."""

_encoder = msgspec.json.Encoder()


def sendable(result: ToolResult) -> msgspec.Raw:
    """A call's result encoded, once, on the way to the writer (which sends the bytes as
    they are): one that cannot be encoded (a string UTF-8 cannot carry, such as a file
    name's surrogate escape) becomes that call's ``TOOL_FAILED``, never a failure of the
    link."""
    try:
        return msgspec.Raw(_encoder.encode(result))
    except (UnicodeEncodeError, msgspec.EncodeError, TypeError, OverflowError) as exc:
        log.error("a %s result could not be encoded: %s", result.code or "success", exc)
        return msgspec.Raw(_encoder.encode(error_result(
            ErrorCode.TOOL_FAILED, f"the tool's result could not be encoded: {exc}",
            body_invoked=result.body_invoked)))


class _EndpointPort:
    """The manager's view of the runtime link."""

    def __init__(self, endpoint: Endpoint) -> None:
        self._endpoint = endpoint

    async def request_permission(self, params: PermissionRequestParams) -> Decision | None:
        try:
            result: PermissionRequestResult = await self._endpoint.request(
                "permission.request", params)
        except ConnectionClosed:
            return None  # no answer can come; the call ends as for a stop
        except RemoteError as exc:
            log.warning("permission %s answered with an error (%s): denied",
                        params.request_id, exc)
            return "deny"
        return result.decision

    def permission_withdrawn(self, params: PermissionWithdrawnParams) -> None:
        self._endpoint.notify("permission.withdrawn", params)

    def tool_output(self, params: ToolsOutputParams) -> None:
        self._endpoint.notify("tools.output", params)

    def tool_started(self, params: ToolsStartedParams) -> None:
        self._endpoint.notify("tools.started", params)


class HostServer:
    def __init__(self, config: HostConfig, receive: trio.abc.ReceiveStream,
                 send: trio.abc.SendStream) -> None:
        self.endpoint = Endpoint("runtime", receive, send, incoming=RUNTIME_TO_HOST,
                                 outgoing=HOST_TO_RUNTIME)
        self.manager = CallManager(config, _EndpointPort(self.endpoint))
        self.initialized = False
        for method, handler in self.handlers.items():
            self.endpoint.add_handler(method, handler)
        for method, instant in self.instant_handlers.items():
            self.endpoint.add_instant_handler(method, instant)

    @property
    def handlers(self) -> dict[str, Handler]:
        after = self._after_handshake
        return {
            "initialize": self.initialize,
            "session.open": after(self.session_open),
            # Taken once the session is forgotten, before its plugin servers' end.
            "session.close": after(marks_effect(self.session_close)),
            # It changes nothing: waiting for plugin servers must not hold the link.
            "plugins.list": after(answers_later(self.plugins_list)),
            # Taken once the call (the hook) is registered: an abort read after finds it.
            "tools.execute": after(marks_effect(self.tools_execute)),
            "tools.abort": after(self.tools_abort),
            "tools.force": after(self.tools_force),
            "hooks.run": after(marks_effect(self.hooks_run)),
            "hooks.abort": after(self.hooks_abort),
            "host.stats": after(self.stats),
            # Begun at once: stopping the calls is waiting.
            "shutdown": answers_later(self.shutdown),
        }

    @property
    def instant_handlers(self) -> dict[str, InstantHandler]:
        """Answered in the link's reader when they can be (each declines before the
        handshake: its ``handlers`` entry then refuses the request)."""
        return {
            "tools.execute": self._execute_now,
            "tools.abort": lambda params: self.manager.abort(params) if self.initialized
            else None,
            "host.stats": lambda params: self._stats() if self.initialized else None,
        }

    def _execute_now(self, params: ToolsExecuteParams) -> msgspec.Raw | None:
        result = self.manager.executor.execute_now(params) if self.initialized else None
        return None if result is None else sendable(result)

    def _after_handshake(self, handler: Handler) -> Handler:
        """``handler``, refused before the handshake; its effect as it declares."""
        async def guarded(params: Any, effect: Effect) -> Any:
            if not self.initialized:
                raise RpcError(ErrorCode.NOT_INITIALIZED, "send initialize first")
            return await call_handler(handler, params, effect)
        return marks_effect(guarded)

    async def serve(self) -> None:
        async with trio.open_nursery() as background:
            self.manager.attach(background)
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self._stop_on_eof)
                nursery.start_soon(self._stop_on_signal)
                await self.endpoint.run()
                nursery.cancel_scope.cancel()
            await self.manager.close_plugins("the host is exiting")
            left = await self.manager.shielded_bodies_after(EXIT_GRACE)
            if left:
                # A forced mutating body (shielded, maybe in a thread stuck in the kernel)
                # would hold this nursery, and so the host, forever: leave without it.
                log.error("%d forced mutating bodies never finished; exiting without them",
                          left)
                logging.shutdown()
                os._exit(0)
            background.cancel_scope.cancel()  # forced plugin bodies still running are abandoned

    async def _stop_on_signal(self) -> None:
        """SIGTERM, SIGHUP or SIGINT: stop every call (trees killed), then exit."""
        with trio.open_signal_receiver(signal.SIGTERM, signal.SIGHUP, signal.SIGINT) as signals:
            async for signum in signals:
                log.info("signal %s: stopping %d calls", signal.Signals(signum).name,
                         len(self.manager.calls))
                await self.manager.stop_all(DisposedCause())
                self.endpoint.stop_reading()
                return

    async def _stop_on_eof(self) -> None:
        await self.endpoint.closed.wait()
        if len(self.manager.calls):
            log.info("runtime link closed: stopping %d calls", len(self.manager.calls))
        await self.manager.stop_all(DisposedCause())

    async def initialize(self, params: InitializeParams) -> InitializeResult:
        check_compatible(params.protocol_version)  # a mismatch leaves the link uninitialized
        self.initialized = True
        tools = {name: spec.tool_class.value for name, spec in TOOLS.items()}
        return InitializeResult(PROTOCOL_VERSION, PeerInfo("quiesce-host", "0.1.0"),
                                {"tools": tools, "pid": os.getpid()})

    async def session_open(self, params: SessionOpenParams) -> SessionOpenResult:
        childenv.hide(params.hidden_env)
        policy = self.manager.open_session(
            params.session_id, params.workspace, params.permission_mode,
            params.mcp_servers, params.trusted_digest, params.sandbox)
        return SessionOpenResult(policy)

    async def session_close(self, params: SessionCloseHostParams, effect: Effect) -> Empty:
        await self.manager.close_session(params.session_id, task_status=effect)
        return Empty()

    async def plugins_list(self, params: PluginsListParams) -> PluginsListResult:
        return await self.manager.list_plugins(params.session_id)

    async def tools_execute(self, params: ToolsExecuteParams, effect: Effect) -> msgspec.Raw:
        return sendable(await self.manager.execute(params, task_status=effect))

    async def tools_abort(self, params: ToolsAbortParams) -> ToolsAbortResult:
        return self.manager.abort(params)

    async def hooks_run(self, params: HooksRunParams, effect: Effect) -> HooksRunResult:
        return await self.manager.hooks.run(params, task_status=effect)

    async def hooks_abort(self, params: HooksAbortParams) -> HooksAbortResult:
        return self.manager.hooks.abort(params)

    async def tools_force(self, params: ToolsForceParams) -> ToolsForceResult:
        forced, detail = self.manager.force(params.session_id, params.call_id, params.tool)
        return ToolsForceResult(forced, detail)

    async def stats(self, params: Empty) -> HostStatsResult:
        return self._stats()

    def _stats(self) -> HostStatsResult:
        m = self.manager
        calls = tuple(HostCallInfo(c.session_id, c.call_id, c.phase) for c in m.calls
                      if c.phase is not None)
        return HostStatsResult(len(m.calls), len(m.tombstones), m.tombstones.expired,
                               m.tombstones.evicted, m.admission.waiting, m.admission.running,
                               calls, cgroups.mechanism(),
                               sandbox=guarantees.report(self.manager.config.sandbox),
                               call_limits=limits.enforcement().describe())

    async def shutdown(self, params: Empty) -> Empty:
        await self.manager.stop_all(DisposedCause())
        self.endpoint.stop_reading()
        return Empty()
