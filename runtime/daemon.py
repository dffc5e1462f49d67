"""The runtime daemon: the client link's handlers, sessions, and the host's lifetime.

``quiesce serve`` runs :meth:`Daemon.serve` on stdin/stdout. EOF on stdin, or a
``shutdown`` request, stops every running turn (cause ``disposed``), stops the
host and ends the daemon with exit status 0.
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
import logging
import pathlib
import signal
from collections.abc import Sequence
from typing import Any

import msgspec
import trio

from protocol.errors import ErrorCode, RpcError
from protocol.framing import DEFAULT_MAX_FRAME_SIZE
from protocol.ids import debug_call_id
from protocol.mcp import PluginConfigError, check_servers
from protocol.messages.client import (
    AgentAbortParams,
    AgentAbortResult,
    AgentPromptParams,
    AgentPromptResult,
    DebugRunToolParams,
    DebugRunToolResult,
    ProviderConfig,
    SessionCloseParams,
    SessionEventParams,
    SessionListResult,
    SessionLoadParams,
    SessionLoadResult,
    SessionNewParams,
    SessionNewResult,
)
from protocol.messages.common import Empty, InitializeParams, InitializeResult, PeerInfo
from protocol.messages.events import AnnouncedEvent
from protocol.messages.host import (
    ToolsExecuteParams,
    ToolsOutputParams,
    ToolsStartedParams,
)
from protocol.methods import CLIENT_TO_RUNTIME, RUNTIME_TO_CLIENT
from protocol.tools import ToolResult
from protocol.version import PROTOCOL_VERSION, check_compatible
from runtime.agent.agent import DEFAULT_STUCK_AFTER
from runtime.agent.hosttools import DEFAULT_PROCESS_GRACE
from runtime.agent.turn import TurnConfig
from runtime.daemon_ops import DaemonOps
from runtime.hooks.config import HookConfig
from runtime.host_supervisor import (
    DEFAULT_LIVENESS_TIMEOUT,
    DEFAULT_PING_INTERVAL,
    HostSupervisor,
)
from runtime.ops.rundir import UnsafeRunDir
from runtime.ops.server import OpsServer
from runtime.permission_relay import PermissionRelay
from runtime.popen_process import PopenProcess
from runtime.providers.base import Provider
from runtime.providers.factory import ProviderConfigError, open_provider
from runtime.registry import DisposedCause
from runtime.session_life import SessionLife
from runtime.session_order import SessionOrder
from runtime.session_tools import SessionTools
from runtime.sessionlog import default_data_dir
from runtime.sessions import Session, SessionStore
from runtime.shared.rpc import Endpoint, Handler, effect_taken

log = logging.getLogger(__name__)

VERSION = "0.1.0"
DRAIN_TIMEOUT = 10.0
DISPOSE_GRACE = 15.0
_provider_decoder = msgspec.json.Decoder(ProviderConfig)


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
                 first_host: PopenProcess | None = None,
                 hooks: HookConfig | None = None) -> None:
        """``first_host``: a host already started for the default command (by ``quiesce
        serve``, before its imports), adopted as the first host; see HostSupervisor.
        ``max_steps``: model steps a turn may take (None: ``turn_config``'s, by default
        ``DEFAULT_MAX_STEPS``)."""
        self.stuck_after = stuck_after
        self.max_frame_size = max_frame_size
        self.data_dir = data_dir or default_data_dir()
        self.default_provider = default_provider
        config = turn_config or TurnConfig()
        if max_steps is not None:
            config = dataclasses.replace(config, max_steps=max_steps)
        if system_prompt is not None:  # the config file's; a session may replace it
            config = dataclasses.replace(config, system_prompt=system_prompt)
        self.sessions = SessionStore(self.data_dir, config)
        self.order = SessionOrder(self.sessions)
        self.permissions = PermissionRelay()
        self.host = HostSupervisor(
            command=host_command,
            handlers={"permission.request": self.permissions.request},
            notification_handlers={"permission.withdrawn": self.permissions.withdrawn,
                                   "tools.output": self._on_tool_output,
                                   "tools.started": self._on_tool_output},
            ping_interval=ping_interval, liveness_timeout=liveness_timeout,
            first_host=first_host,
        )
        self.ops = DaemonOps(self.sessions, self.host, self.permissions)
        self.tools = SessionTools(self.sessions, self.host, process_grace=process_grace,
                                  hooks=hooks)
        self.ops_server = OpsServer(self.ops, data_dir=self.data_dir)
        self._client: Endpoint | None = None
        self._initialized = False
        self._shutdown = trio.Event()
        self._debug_ids = itertools.count(1)
        self._nursery: trio.Nursery | None = None
        self._lives: dict[str, SessionLife] = {}  # each open (or opening) session's owner

    @property
    def handlers(self) -> dict[str, Handler]:
        return {
            "initialize": self.initialize,
            "session.new": self.session_new,
            "session.list": self.session_list,
            "session.load": self.session_load,
            "session.close": self.session_close,
            "agent.prompt": self.agent_prompt,
            "agent.abort": self.agent_abort,
            "debug.runTool": self.debug_run_tool,
            "shutdown": self.shutdown,
        }

    async def serve(self, receive: trio.abc.ReceiveStream, send: trio.abc.SendStream) -> None:
        client = Endpoint("client", receive, send, incoming=CLIENT_TO_RUNTIME,
                          outgoing=RUNTIME_TO_CLIENT, handlers=self.handlers,
                          max_frame_size=self.max_frame_size)
        self._client = self.permissions.client = client
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
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

    def _provider(self, config: ProviderConfig | None
                  ) -> tuple[ProviderConfig | None, Provider]:
        chosen = config or self.default_provider
        try:
            return open_provider(chosen)  # the config as resolved: what the log records
        except ProviderConfigError as exc:
            raise RpcError(ErrorCode.INVALID_PARAMS, str(exc)) from exc

    def _life(self, session: Session) -> SessionLife:
        life = self._lives.get(session.session_id)
        if life is None or life.session is not session:
            life = self._lives[session.session_id] = SessionLife(
                session, sessions=self.sessions, host=self.host)
        return life

    def _start_agent(self, life: SessionLife) -> None:
        assert self._nursery is not None
        if life.running:
            return
        session = life.session
        session.agent.stuck_after = self.stuck_after
        if self._client is not None:
            session.agent.before_turn = functools.partial(self._before_turn, self._client,
                                                          session)
        session.agent.on_step = session.ops.plan_step
        session.agent.on_stop = self.ops.record_stop
        life.start_agent(self._nursery)

    async def _before_turn(self, client: Endpoint, session: Session) -> None:
        """A turn's first step waits until the client link has taken every frame it read,
        and every request on the session has taken its effect (unless the turn is being
        stopped already): a stop written right behind its prompt stops it before a tool."""
        await client.caught_up()
        await self.order.quiet(session.session_id, lambda: session.agent.stopping)

    # -- client methods -------------------------------------------------------------

    async def initialize(self, params: InitializeParams) -> InitializeResult:
        check_compatible(params.protocol_version)
        self._initialized = True
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

    def _require_initialized(self) -> None:
        if not self._initialized:
            raise RpcError(ErrorCode.NOT_INITIALIZED, "send initialize first")

    async def session_new(self, params: SessionNewParams) -> SessionNewResult:
        self._require_initialized()
        config, provider = self._provider(params.provider)
        try:
            check_servers(params.mcp_servers, "mcpServers")
        except PluginConfigError as exc:
            raise RpcError(ErrorCode.INVALID_PARAMS, str(exc)) from exc
        session = self.sessions.create(params.workspace, params.permission_mode, config,
                                       provider, self._announce, self.tools.factory,
                                       params.mcp_servers, params.system_prompt)
        # Until it answers, session.close of it undoes the open (its servers killed).
        life = self._life(session)
        life.begin_open()
        effect_taken()  # the session exists; waiting for the host and plugins follows
        try:
            listed = await life.open_new()
        except BaseException:
            self._lives.pop(session.session_id, None)
            raise
        if listed is None:
            self._lives.pop(session.session_id, None)
            raise RpcError(ErrorCode.REQUEST_CANCELLED,
                           "session.close came while the session opened: it was undone")
        self._start_agent(life)
        log.info("session %s opened on %s", session.session_id, session.workspace)
        return SessionNewResult(session.session_id, listed.servers)

    async def session_list(self, params: Empty) -> SessionListResult:
        self._require_initialized()
        loaded = [s.info() for s in self.sessions.all()]
        effect_taken()  # the loaded sessions are listed as of now; the disk is read after
        listed = {info.session_id for info in loaded}
        on_disk = [info for info in await self.sessions.scan_disk()
                   if info.session_id not in listed]
        return SessionListResult(tuple(loaded + on_disk))

    async def session_load(self, params: SessionLoadParams) -> SessionLoadResult:
        self._require_initialized()

        def provider(saved: dict[str, Any]) -> Provider:
            try:
                config = msgspec.convert(saved, ProviderConfig) if saved else None
            except msgspec.ValidationError:
                config = None
            return self._provider(config)[1]

        self.sessions.path_of(params.session_id)  # a malformed id makes no lock
        async with self.order.place(params.session_id) as place:
            open_now = self.order.loaded(params.session_id)
            if open_now is not None and not self.sessions.lock(params.session_id).locked():
                # Loaded and running already: only its replay (no lock, so nothing waits).
                open_now.agent.journal.replay()
                return SessionLoadResult(open_now.session_id, open_now.workspace,
                                         len(open_now.agent.journal.events), False)
            async with self.order.lock_now_or_mark(params.session_id):
                # Our place in the chain is taken: requests on this session wait for
                # place.started() below; the link reads on (a stop of another session
                # must not wait for this log's read).
                effect_taken()
                loaded = await self.sessions.load(params.session_id, provider=provider,
                                                  announce=self._announce,
                                                  tools=self.tools.factory)
                session = loaded.session
                place.started()  # loaded (the log read): prompts after this one reach it
                life = self._life(session)
                if not life.running:
                    # The agent runs before the host hears of the session: if the host
                    # refuses it (its workspace is gone), prompts still get answered.
                    self._start_agent(life)
                    await life.open()
        session.agent.journal.replay()
        return SessionLoadResult(session.session_id, session.workspace,
                                 len(session.agent.journal.events), loaded.recovered)

    async def session_close(self, params: SessionCloseParams) -> Empty:
        self._require_initialized()
        life = self._lives.get(params.session_id)
        opening = life.opening if life is not None else None
        if opening is not None:  # still opening: undone, its starting servers killed
            opening.scope.cancel()
            effect_taken()  # the open is undone from here; its servers' end is awaited
            await opening.done.wait()
            return Empty()
        self.sessions.path_of(params.session_id)  # a malformed id makes no lock
        async with self.order.place(params.session_id) as place, \
                self.order.lock_now_or_mark(params.session_id):
            session = self.sessions.get(params.session_id)
            life = self._life(session)
            # Closing, it takes no prompt; aborts join this stop and operators still see
            # it (a stuck call may need their force before the close can answer).
            session.closing = True
            try:
                # Shielded: a close that began finishes its stop.
                with trio.CancelScope(shield=True):
                    await session.agent.cancel(DisposedCause(), task_status=place)
            finally:
                self._lives.pop(session.session_id, None)
                await life.close()
        log.info("session %s closed", session.session_id)
        return Empty()

    async def agent_prompt(self, params: AgentPromptParams) -> AgentPromptResult:
        self._require_initialized()
        async with self.order.place(params.session_id):
            session = self.sessions.get(params.session_id)
            if session.closing:
                raise RpcError(ErrorCode.NOT_FOUND, f"session {params.session_id} is closing")
            pending = session.agent.prompt(params.text)
        # Accepted (the block's end took its effect): waiting for the turn's end follows.
        await pending.done.wait()
        assert pending.result is not None
        return pending.result

    async def agent_abort(self, params: AgentAbortParams) -> AgentAbortResult:
        self._require_initialized()
        async with self.order.place(params.session_id) as place:
            agent = self.sessions.get(params.session_id).agent
            return await agent.cancel(params.cause, keep_inbox=params.keep_inbox,
                                      task_status=place)

    async def debug_run_tool(self, params: DebugRunToolParams) -> DebugRunToolResult:
        self._require_initialized()
        session = self.sessions.get(params.session_id)
        call_id = debug_call_id(next(self._debug_ids))
        result: ToolResult = await self.host.request("tools.execute", ToolsExecuteParams(
            session.session_id, call_id, params.tool, dict(params.args)))
        return DebugRunToolResult(call_id, result)

    async def shutdown(self, params: Empty) -> Empty:
        effect_taken()  # the shutdown has begun: settling the turns is waiting
        await self._quiesce()
        self._shutdown.set()
        return Empty()
