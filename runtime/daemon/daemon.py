"""The runtime daemon: the client link, its lifetime, and the host's.

``quiesce serve`` runs :meth:`Daemon.serve` on stdin/stdout. EOF on stdin, or a
``shutdown`` request, stops every running turn (cause ``disposed``), stops the
host and ends the daemon with exit status 0; a request read after a ``shutdown`` is
refused (``SHUTTING_DOWN``; ``agent.abort`` joins the stop instead), and a
``session.new`` read before it finishes opening before the host is stopped. The daemon
wires its parts together,
answers ``initialize`` and ``shutdown``, and routes the host's notifications and the
sessions' events; the requests on sessions are ``sessions/requests.py``'s.
"""

from __future__ import annotations

import functools
import logging
import pathlib
import signal
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any

import trio

from protocol.causes import DisposedCause
from protocol.errors import ErrorCode, RpcError
from protocol.framing import DEFAULT_MAX_FRAME_SIZE
from protocol.messages.client import AgentAbortResult, ProviderConfig, SessionEventParams
from protocol.messages.common import Empty, InitializeParams, InitializeResult, PeerInfo
from protocol.messages.events import AnnouncedEvent
from protocol.messages.host import SessionOpenParams, ToolsOutputParams, ToolsStartedParams
from protocol.messages.ops import (
    OpsForceResult,
    OpsRestartHostResult,
    OpsSessionsResult,
    OpsStatsResult,
)
from protocol.messages.renderer import AgentForceParams, AgentForceResult
from protocol.methods import CLIENT_TO_RUNTIME, RUNTIME_TO_CLIENT
from protocol.version import PROTOCOL_VERSION, check_compatible
from runtime.daemon.client_link import ClientLinkState
from runtime.daemon.config_file import default_data_dir
from runtime.daemon.ops.backend import EventListener
from runtime.daemon.ops.rundir import UnsafeRunDir
from runtime.daemon.ops.server import OpsServer
from runtime.daemon.permission_relay import PermissionRelay
from runtime.link import Effect, Endpoint, Handler, answers_later, marks_effect
from runtime.link.writer import MAX_QUEUED
from runtime.supervision.failures import HostUnavailable
from runtime.supervision.popen_process import PopenProcess
from runtime.supervision.supervisor import (
    DEFAULT_LIVENESS_TIMEOUT,
    DEFAULT_PING_INTERVAL,
    HostSupervisor,
)

if TYPE_CHECKING:  # the session side is imported on its first use (``Daemon.requests``)
    from runtime.agent.hooks.config import HookConfig
    from runtime.agent.turn import TurnConfig
    from runtime.daemon.ops_backend import DaemonOps
    from runtime.daemon.sessions.requests import SessionRequests
    from runtime.daemon.sessions.session import Session
    from runtime.daemon.sessions.store import SessionStore
    from runtime.daemon.socket_clients import SocketClients
    from runtime.daemon.socketlink.listener import Listening, ServeLink

log = logging.getLogger(__name__)

VERSION = "0.1.0"
DRAIN_TIMEOUT = 10.0
DISPOSE_GRACE = 15.0


class Daemon:
    def __init__(self, *, host_command: Sequence[str] | None = None,
                 max_frame_size: int = DEFAULT_MAX_FRAME_SIZE,
                 data_dir: pathlib.Path | None = None,
                 default_provider: ProviderConfig | None = None,
                 process_grace: float | None = None,
                 turn_config: TurnConfig | None = None,
                 max_steps: int | None = None,
                 system_prompt: str | None = None,
                 ping_interval: float = DEFAULT_PING_INTERVAL,
                 liveness_timeout: float = DEFAULT_LIVENESS_TIMEOUT,
                 stuck_after: float | None = None,
                 first_host: PopenProcess | None = None,
                 hooks: HookConfig | None = None,
                 trusted_workspaces: tuple[str, ...] = (),
                 trust_timeout: float | None = None) -> None:
        """``first_host``: a host already started for the default command (by ``quiesce
        serve``, before its imports), adopted as the first host; see HostSupervisor.
        ``max_steps``: model steps a turn may take (None: ``turn_config``'s, by default
        ``DEFAULT_MAX_STEPS``). ``process_grace``, ``stuck_after``: None for the
        defaults (``DEFAULT_PROCESS_GRACE``, ``DEFAULT_STUCK_AFTER``).
        ``trusted_workspaces``: workspaces whose declarations run without asking;
        ``trust_timeout``: how long the client is given to answer ``workspace.trust``
        (None: ``runtime.daemon.trust.DEFAULT_TRUST_TIMEOUT``)."""
        self.max_frame_size = max_frame_size
        self.data_dir = data_dir or default_data_dir()
        self.client_link = ClientLinkState()
        """The client link's state: this daemon's, read by the session side and the
        permission relay by reference."""
        self.permissions = PermissionRelay(self.client_link)
        self.host = HostSupervisor(
            command=host_command,
            # Registered (a withdrawal finds it), the host link reads on while it waits.
            handlers={"permission.request": answers_later(self.permissions.request)},
            notification_handlers={"permission.withdrawn": self.permissions.withdrawn,
                                   "tools.output": self._on_tool_output,
                                   "tools.started": self._on_tool_output},
            ping_interval=ping_interval, liveness_timeout=liveness_timeout,
            first_host=first_host, registrations=self._registrations,
        )
        self.ops_server = OpsServer(_OpsOnFirstUse(self), data_dir=self.data_dir,
                                    refuse_own_descendants=True)
        self._session_side = functools.partial(
            _session_side, data_dir=self.data_dir, host=self.host, link=self.client_link,
            permissions=self.permissions, announce=self._announce,
            default_provider=default_provider, turn_config=turn_config, max_steps=max_steps,
            system_prompt=system_prompt, stuck_after=stuck_after,
            process_grace=process_grace, hooks=hooks,
            trusted_workspaces=trusted_workspaces, trust_timeout=trust_timeout)
        self._requests: SessionRequests | None = None
        self._shutdown = trio.Event()
        self.socket_clients: SocketClients | None = None
        """Set while serving a socket link (``serve_listening``) instead of stdio."""

    @property
    def requests(self) -> SessionRequests:
        """The session side (sessions, their tools, the ops view), made on first use: at
        start-up its imports would delay the first answer."""
        if self._requests is None:
            self._requests = self._session_side()
        return self._requests

    @property
    def sessions(self) -> SessionStore:
        return self.requests.sessions

    def _loaded_sessions(self) -> tuple[Session, ...]:
        return self._requests.sessions.all() if self._requests is not None else ()

    def _registrations(self) -> Iterable[SessionOpenParams]:
        return self._requests.registrations() if self._requests is not None else ()

    @property
    def handlers(self) -> dict[str, Handler]:
        on_sessions = {name: declare(functools.partial(self._on_sessions, attribute))
                       for name, (attribute, declare) in _SESSION_REQUESTS.items()}
        # agent.force: forcing is the host's, waited for; shutdown: it has begun once
        # later requests are refused, settling the turns is waiting.
        return {"initialize": self.initialize, **on_sessions,
                "agent.force": answers_later(self._agent_force),
                "shutdown": answers_later(self.shutdown)}

    async def _agent_force(self, params: AgentForceParams) -> AgentForceResult:
        from runtime.daemon.client_force import agent_force  # the session side's, on first use

        self.requests.require_initialized()
        return await agent_force(self.requests, params)

    async def _on_sessions(self, attribute: str, params: Any, *effect: Effect) -> Any:
        """A request on sessions, to the session side (made by the first); ``effect``:
        the request's, for a method that marks it."""
        if attribute != "agent_abort":  # a stop joins the shutdown's; nothing else starts
            self._refuse_if_closing()
        try:
            return await getattr(self.requests, attribute)(params, *effect)
        except HostUnavailable as exc:  # no host could take what the request asked of it
            if self.client_link.closing:  # the shutdown stopped it under the request
                raise RpcError(ErrorCode.SHUTTING_DOWN,
                               f"the daemon shut down during the request: {exc}") from exc
            raise RpcError(ErrorCode.HOST_CRASHED, f"no host for the request: {exc}") from exc

    def _refuse_if_closing(self) -> None:
        if self.client_link.closing:
            raise RpcError(ErrorCode.SHUTTING_DOWN,
                           "the daemon is shutting down: the request came after shutdown")

    def _begin_closing(self) -> None:
        """``shutdown`` (at its effect), a signal or the end of input: later requests are
        refused."""
        self.client_link.closing = True

    async def serve(self, receive: trio.abc.ReceiveStream, send: trio.abc.SendStream) -> None:
        client = Endpoint("client", receive, send, incoming=CLIENT_TO_RUNTIME,
                          outgoing=RUNTIME_TO_CLIENT, handlers=self.handlers,
                          max_frame_size=self.max_frame_size, max_queued=MAX_QUEUED)
        self.client_link.client = client
        async with trio.open_nursery() as nursery:
            await self._start_services(nursery)
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

    async def _start_services(self, nursery: trio.Nursery) -> None:
        """What every link's daemon runs in its outer nursery (so none holds a client's
        drain open): the signal handler, the host (ready when it returns) and the ops
        socket (or a logged reason it is off)."""
        self.client_link.nursery = nursery
        nursery.start_soon(self._shutdown_on_signal)
        await nursery.start(self.host.run)
        try:
            await nursery.start(self.ops_server.serve)
        except (UnsafeRunDir, OSError) as exc:  # raised before it listens
            log.error("ops control socket disabled: %s", exc)

    async def serve_listening(
            self, listen: Callable[[ServeLink], Callable[..., Any]],
            announce: Callable[[Listening], Any]) -> None:
        """Serve a socket link (``quiesce serve --listen``) instead of stdio: any number of
        clients, none of whose departure stops anything (``runtime/daemon/socket_clients.py``).
        ``listen(serve_link)`` is the listener's ``run``; ``announce`` is given where it
        listens. A signal or a client's ``shutdown`` ends it as EOF ends stdio."""
        from runtime.daemon.socket_clients import SocketClients

        clients = self.socket_clients = SocketClients(self)
        self.client_link.hub = clients.hub
        async with trio.open_nursery() as nursery:
            await self._start_services(nursery)
            async with trio.open_nursery() as links:
                listening = await links.start(listen(clients.serve_link))
                await announce(listening)
                await self._shutdown.wait()
                await self._quiesce()
                # Answers still running are written (each client's link ends once they
                # are); past the deadline they are cancelled.
                with trio.move_on_after(DRAIN_TIMEOUT):
                    for client in list(clients.hub.clients):
                        client.stop_reading()
                    await clients.hub.all_gone()
                links.cancel_scope.cancel()
            nursery.cancel_scope.cancel()
        log.info("daemon stopped")

    async def _shutdown_on_signal(self) -> None:
        """SIGTERM, SIGHUP (a closed terminal) or SIGINT: the same orderly shutdown as EOF."""
        with trio.open_signal_receiver(signal.SIGTERM, signal.SIGHUP, signal.SIGINT) as signals:
            async for signum in signals:
                log.info("signal %s: shutting down", signal.Signals(signum).name)
                self._begin_closing()
                self._shutdown.set()

    async def _shutdown_on_eof(self, client: Endpoint) -> None:
        await client.closed.wait()
        log.info("client closed the link")
        self._begin_closing()
        self._shutdown.set()

    async def _quiesce(self) -> None:
        """Let every ``session.new`` already taken finish opening, stop every running turn
        (cause ``disposed``), then the host.

        A turn that has not settled within ``DISPOSE_GRACE`` (a mutating call stuck in
        the host), or a session still opening then, does not hold the shutdown: the host
        is stopped under it, which ends its calls ``HOST_CRASHED`` and so the turn (an
        open cut so is answered ``SHUTTING_DOWN``).
        """
        with trio.CancelScope(shield=True):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self._stop_host_after, DISPOSE_GRACE)
                if self._requests is not None:  # in wire order, before the shutdown
                    await self._requests.opened()
                async with trio.open_nursery() as disposals:
                    for session in self._loaded_sessions():
                        if session.agent.busy or session.agent.inbox:
                            disposals.start_soon(self._dispose, session)
                nursery.cancel_scope.cancel()  # every turn settled: no watchdog needed
            for session in self._loaded_sessions():  # ends a failing log still owes: a last try
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
        self.requests.ops.announce(session_id, event)
        if self.socket_clients is not None:
            self.socket_clients.hub.notify_session(
                session_id, "session.event", SessionEventParams(session_id, event))
        elif self.client_link.client is not None:
            self.client_link.client.notify("session.event", SessionEventParams(session_id, event))

    def _on_tool_output(self, params: ToolsOutputParams | ToolsStartedParams) -> None:
        if self._requests is not None:  # else no session is open: nobody listens
            self._requests.tools.on_tool_output(params)

    # -- client methods -------------------------------------------------------------

    async def initialize(self, params: InitializeParams) -> InitializeResult:
        self._refuse_if_closing()
        check_compatible(params.protocol_version)
        self.client_link.initialized = True
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
        self._begin_closing()  # what the reader takes next is refused
        await self._quiesce()
        self._shutdown.set()
        return Empty()


_SESSION_REQUESTS: dict[str, tuple[str, Callable[[Any], Handler]]] = {
    # method: (SessionRequests' method, when its effect is taken: runtime.link.effects)
    # The session exists at once; waiting for the host and plugins follows.
    "session.new": ("session_new", answers_later),
    # The disk is read off the event loop; the open sessions are listed as of its end.
    "session.list": ("session_list", answers_later),
    # These take their place in the session's chain (runtime.daemon.sessions.order).
    "session.load": ("session_load", marks_effect),
    "session.close": ("session_close", marks_effect),
    "session.setMode": ("session_set_mode", marks_effect),
    "agent.prompt": ("agent_prompt", marks_effect),
    "agent.abort": ("agent_abort", marks_effect),
    "session.compact": ("session_compact", marks_effect),
    # The tool runs on the host: waiting for it follows.
    "debug.runTool": ("debug_run_tool", answers_later),
}


def _session_side(**kwargs: Any) -> SessionRequests:
    from runtime.daemon.sessions.requests import SessionRequests  # on first use (start-up)

    return SessionRequests(**kwargs)


class _OpsOnFirstUse:
    """The ops backend: the session side's ``DaemonOps``, made by an operator's first
    request if no session made it before."""

    def __init__(self, daemon: Daemon) -> None:
        self._daemon = daemon

    def _ops(self) -> DaemonOps:
        return self._daemon.requests.ops

    async def ops_sessions(self) -> OpsSessionsResult:
        return await self._ops().ops_sessions()

    async def ops_abort(self, session_id: str, *,
                        task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
                        ) -> AgentAbortResult:
        return await self._ops().ops_abort(session_id, task_status=task_status)

    async def ops_force(self, session_id: str, call_id: str) -> OpsForceResult:
        return await self._ops().ops_force(session_id, call_id)

    async def ops_restart_host(self) -> OpsRestartHostResult:
        return await self._ops().ops_restart_host()

    async def ops_stats(self) -> OpsStatsResult:
        return await self._ops().ops_stats()

    def add_event_listener(self, listener: EventListener) -> Callable[[], None]:
        return self._ops().add_event_listener(listener)
