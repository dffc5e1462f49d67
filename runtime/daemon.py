"""The runtime daemon: the client link, its lifetime, and the host's.

``quiesce serve`` runs :meth:`Daemon.serve` on stdin/stdout. EOF on stdin, or a
``shutdown`` request, stops every running turn (cause ``disposed``), stops the
host and ends the daemon with exit status 0. The daemon wires its parts together,
answers ``initialize`` and ``shutdown``, and routes the host's notifications and the
sessions' events; the requests on sessions are ``session_requests.py``'s.
"""

from __future__ import annotations

import dataclasses
import logging
import pathlib
import signal
from collections.abc import Sequence
from typing import Any

import trio

from protocol.errors import RpcError
from protocol.framing import DEFAULT_MAX_FRAME_SIZE
from protocol.messages.client import ProviderConfig, SessionEventParams
from protocol.messages.common import Empty, InitializeParams, InitializeResult, PeerInfo
from protocol.messages.events import AnnouncedEvent
from protocol.messages.host import ToolsOutputParams, ToolsStartedParams
from protocol.methods import CLIENT_TO_RUNTIME, RUNTIME_TO_CLIENT
from protocol.version import PROTOCOL_VERSION, check_compatible
from runtime.agent.agent import DEFAULT_STUCK_AFTER
from runtime.agent.hosttools import DEFAULT_PROCESS_GRACE
from runtime.agent.turn import TurnConfig
from runtime.daemon_ops import DaemonOps
from runtime.host_supervisor import (
    DEFAULT_LIVENESS_TIMEOUT,
    DEFAULT_PING_INTERVAL,
    HostSupervisor,
)
from runtime.ops.rundir import UnsafeRunDir
from runtime.ops.server import OpsServer
from runtime.permission_relay import PermissionRelay
from runtime.popen_process import PopenProcess
from runtime.registry import DisposedCause
from runtime.session_order import SessionOrder
from runtime.session_requests import SessionRequests
from runtime.session_tools import SessionTools
from runtime.sessionlog import default_data_dir
from runtime.sessions import Session, SessionStore
from runtime.shared.rpc import Endpoint, Handler, effect_taken

log = logging.getLogger(__name__)

VERSION = "0.1.0"
DRAIN_TIMEOUT = 10.0
DISPOSE_GRACE = 15.0


class Daemon:
    def __init__(self, *, host_command: Sequence[str] | None = None,
                 max_frame_size: int = DEFAULT_MAX_FRAME_SIZE,
                 data_dir: pathlib.Path | None = None,
                 default_provider: ProviderConfig | None = None,
                 process_grace: float = DEFAULT_PROCESS_GRACE,
                 turn_config: TurnConfig | None = None,
                 max_steps: int | None = None,
                 system_prompt: str | None = None,
                 ping_interval: float = DEFAULT_PING_INTERVAL,
                 liveness_timeout: float = DEFAULT_LIVENESS_TIMEOUT,
                 stuck_after: float = DEFAULT_STUCK_AFTER,
                 first_host: PopenProcess | None = None) -> None:
        """``first_host``: a host already started for the default command (by ``quiesce
        serve``, before its imports), adopted as the first host; see HostSupervisor.
        ``max_steps``: model steps a turn may take (None: ``turn_config``'s, by default
        ``DEFAULT_MAX_STEPS``)."""
        self.max_frame_size = max_frame_size
        self.data_dir = data_dir or default_data_dir()
        config = turn_config or TurnConfig()
        if max_steps is not None:
            config = dataclasses.replace(config, max_steps=max_steps)
        if system_prompt is not None:  # the config file's; a session may replace it
            config = dataclasses.replace(config, system_prompt=system_prompt)
        self.sessions = SessionStore(self.data_dir, config)
        self.permissions = PermissionRelay()
        self.host = HostSupervisor(
            command=host_command,
            handlers={"permission.request": self.permissions.request},
            notification_handlers={"permission.withdrawn": self.permissions.withdrawn,
                                   "tools.output": self._on_tool_output,
                                   "tools.started": self._on_tool_output},
            ping_interval=ping_interval, liveness_timeout=liveness_timeout,
            first_host=first_host, registrations=lambda: self.requests.registrations(),
        )
        self.ops = DaemonOps(self.sessions, self.host, self.permissions)
        self.tools = SessionTools(self.sessions, self.host, process_grace=process_grace)
        self.ops_server = OpsServer(self.ops, data_dir=self.data_dir)
        self.requests = SessionRequests(
            sessions=self.sessions, order=SessionOrder(self.sessions), host=self.host,
            tools=self.tools, ops=self.ops, announce=self._announce,
            default_provider=default_provider, stuck_after=stuck_after)
        self._client: Endpoint | None = None
        self._shutdown = trio.Event()

    @property
    def handlers(self) -> dict[str, Handler]:
        requests = self.requests
        return {
            "initialize": self.initialize,
            "session.new": requests.session_new,
            "session.list": requests.session_list,
            "session.load": requests.session_load,
            "session.close": requests.session_close,
            "agent.prompt": requests.agent_prompt,
            "agent.abort": requests.agent_abort,
            "debug.runTool": requests.debug_run_tool,
            "shutdown": self.shutdown,
        }

    async def serve(self, receive: trio.abc.ReceiveStream, send: trio.abc.SendStream) -> None:
        client = Endpoint("client", receive, send, incoming=CLIENT_TO_RUNTIME,
                          outgoing=RUNTIME_TO_CLIENT, handlers=self.handlers,
                          max_frame_size=self.max_frame_size)
        self._client = self.permissions.client = self.requests.client = client
        async with trio.open_nursery() as nursery:
            self.requests.nursery = nursery
            # In the outer nursery: it must not hold the client's drain open.
            nursery.start_soon(self._shutdown_on_signal)
            await nursery.start(self.host.run)
            try:
                await nursery.start(self.ops_server.serve)
            except (UnsafeRunDir, OSError) as exc:  # raised before it listens
                log.error("ops control socket disabled: %s", exc)
            async with trio.open_nursery() as client_nursery:
                client_nursery.start_soon(client.run)
                client_nursery.start_soon(self._shutdown_on_eof, client)
                await self._shutdown.wait()
                client.stop_reading()
                await self._quiesce()
                # Running handlers answer (turns are settled, the host is gone), then
                # the writer drains; past the deadline they are cancelled.
                client_nursery.cancel_scope.deadline = trio.current_time() + DRAIN_TIMEOUT
            nursery.cancel_scope.cancel()
        log.info("daemon stopped")

    async def _shutdown_on_signal(self) -> None:
        """SIGTERM, SIGHUP (a closed terminal) or SIGINT: the same orderly shutdown as EOF."""
        with trio.open_signal_receiver(signal.SIGTERM, signal.SIGHUP, signal.SIGINT) as signals:
            async for signum in signals:
                log.info("signal %s: shutting down", signal.Signals(signum).name)
                self._shutdown.set()

    async def _shutdown_on_eof(self, client: Endpoint) -> None:
        await client.closed.wait()
        log.info("client closed the link")
        self._shutdown.set()

    async def _quiesce(self) -> None:
        """Stop every running turn (cause ``disposed``), then the host.

        A turn that has not settled within ``DISPOSE_GRACE`` (a mutating call stuck in
        the host) does not hold the shutdown: the host is stopped under it, which ends
        its calls ``HOST_CRASHED`` and so the turn.
        """
        with trio.CancelScope(shield=True):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self._stop_host_after, DISPOSE_GRACE)
                async with trio.open_nursery() as disposals:
                    for session in self.sessions.all():
                        if session.agent.busy or session.agent.inbox:
                            disposals.start_soon(self._dispose, session)
                nursery.cancel_scope.cancel()  # every turn settled: no watchdog needed
            for session in self.sessions.all():  # ends a failing log still owes: a last try
                await session.agent.record_owed()
            await self.host.stop()

    async def _stop_host_after(self, delay: float) -> None:
        await trio.sleep(delay)
        log.warning("turns still unsettled after %.0f s: stopping the host under them", delay)
        await self.host.stop()

    @staticmethod
    async def _dispose(session: Session) -> None:
        try:
            await session.agent.cancel(DisposedCause())
        except RpcError as exc:  # its turn/end is not durable: said in the log, go on
            log.error("session %s: %s", session.session_id, exc)

    # -- events and host notifications ---------------------------------------------------

    def _announce(self, session_id: str, event: AnnouncedEvent) -> None:
        self.ops.announce(session_id, event)
        if self._client is not None:
            self._client.notify("session.event", SessionEventParams(session_id, event))

    def _on_tool_output(self, params: ToolsOutputParams | ToolsStartedParams) -> None:
        self.tools.on_tool_output(params)  # (the host's handlers are made before the tools)

    # -- client methods -------------------------------------------------------------

    async def initialize(self, params: InitializeParams) -> InitializeResult:
        check_compatible(params.protocol_version)
        self.requests.initialized = True
        link = self.host.link
        host_info = link.info if link is not None else None
        capabilities: dict[str, Any] = {
            "host": {"pid": self.host.pid,
                     "tools": host_info.capabilities.get("tools", {}) if host_info else {}},
            "dataDir": str(self.data_dir),
        }
        if self.ops_server.socket_path is not None:
            capabilities["ops"] = {"socket": str(self.ops_server.socket_path),
                                   "pidFile": str(self.ops_server.pid_file)}
        return InitializeResult(PROTOCOL_VERSION, PeerInfo("quiesce", VERSION), capabilities)

    async def shutdown(self, params: Empty) -> Empty:
        effect_taken()  # the shutdown has begun: settling the turns is waiting
        await self._quiesce()
        self._shutdown.set()
        return Empty()
