"""The client link's requests on sessions: ``session.new``, ``.list``, ``.load`` and
``.close``, ``agent.prompt`` and ``.abort``, ``debug.runTool``; and each open session's
``SessionLife`` (``lives``), made when it opens and dropped when it closes.

Split from ``daemon.py`` (the link, its lifetime and shutdown), which routes these
methods here and hands over the client link and the nursery the agents run in when it
serves (``client``, ``nursery``). The daemon makes this side on its first use, not at
start-up: the agent, the registry, the providers and the session log are imported then,
after ``initialize`` is answered (issue 20).
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
import logging
import pathlib
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

import msgspec
import trio

from protocol.errors import ErrorCode, RpcError
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
    SessionCompactParams,
    SessionCompactResult,
    SessionListResult,
    SessionLoadParams,
    SessionLoadResult,
    SessionNewParams,
    SessionNewResult,
    SessionSetModeParams,
)
from protocol.messages.common import Empty, PluginServerStatus
from protocol.messages.events import AnnouncedEvent
from protocol.messages.host import SessionOpenParams, ToolsExecuteParams
from protocol.tools import ToolResult
from runtime.agent.agent import DEFAULT_STUCK_AFTER
from runtime.agent.hooks.config import HookConfig
from runtime.agent.hosttools import DEFAULT_PROCESS_GRACE
from runtime.agent.providers.base import Provider
from runtime.agent.providers.factory import ProviderConfigError, open_provider
from runtime.agent.registry import DisposedCause
from runtime.agent.turn import TurnConfig
from runtime.daemon.ops_backend import DaemonOps
from runtime.daemon.permission_relay import PermissionRelay
from runtime.daemon.session_order import STOPPING_POLL, SessionOrder
from runtime.daemon.sessions.session import SessionLife
from runtime.daemon.sessions.store import Session, SessionStore
from runtime.daemon.sessions.tools import SessionTools
from runtime.daemon.trust import DEFAULT_TRUST_TIMEOUT, TrustStore, WorkspaceTrust
from runtime.link import Endpoint, effect_taken
from runtime.supervision.supervisor import HostSupervisor

log = logging.getLogger(__name__)


class SessionRequests:
    """The session side of the daemon, made on its first use (``Daemon.requests``): the
    session store, each session's tools, the ops view and the requests on sessions."""

    def __init__(self, *, data_dir: pathlib.Path, host: HostSupervisor,
                 permissions: PermissionRelay,
                 announce: Callable[[str, AnnouncedEvent], None],
                 default_provider: ProviderConfig | None,
                 turn_config: TurnConfig | None = None, max_steps: int | None = None,
                 system_prompt: str | None = None, stuck_after: float | None = None,
                 process_grace: float | None = None,
                 hooks: HookConfig | None = None,
                 trusted_workspaces: tuple[str, ...] = (),
                 trust_timeout: float | None = None) -> None:
        config = turn_config or TurnConfig()
        if max_steps is not None:
            config = dataclasses.replace(config, max_steps=max_steps)
        if system_prompt is not None:  # the config file's; a session may replace it
            config = dataclasses.replace(config, system_prompt=system_prompt)
        self.sessions = SessionStore(data_dir, config)
        self.order = SessionOrder(self.sessions)
        self.host = host
        self.ops = DaemonOps(self.sessions, host, permissions)
        self.tools = SessionTools(self.sessions, host, process_grace=(
            DEFAULT_PROCESS_GRACE if process_grace is None else process_grace), hooks=hooks)
        self._announce = announce
        self.default_provider = default_provider
        self.stuck_after = DEFAULT_STUCK_AFTER if stuck_after is None else stuck_after
        self.initialized = False
        """Set by the daemon's ``initialize``: until then every request here is refused."""
        self.client: Endpoint | None = None
        self.caught_up: Callable[[], Awaitable[None]] | None = None
        """Without a stdio client (a socket link): every socket client caught up."""
        self.nursery: trio.Nursery | None = None
        """Where the sessions' agents run: the daemon's, while it serves."""
        self._debug_ids = itertools.count(1)
        self.trust = WorkspaceTrust(
            TrustStore(data_dir), trusted_workspaces=trusted_workspaces,
            timeout=DEFAULT_TRUST_TIMEOUT if trust_timeout is None else trust_timeout,
            client=lambda: self.client)
        self.lives: dict[str, SessionLife] = {}  # each open (or opening) session's owner
        self.closing = False
        """Set by the daemon once it shuts down: an open the host's stop cut short is
        answered ``SHUTTING_DOWN``, not ``HOST_CRASHED``."""

    async def opened(self) -> None:
        """Return once no session is opening (a ``session.new`` taken before now)."""
        while waiting := [life.opening for life in self.lives.values()
                          if life.opening is not None]:
            await waiting[0].done.wait()

    def registrations(self) -> Iterator[SessionOpenParams]:
        """The sessions registered with the host (a fresh host is told of each, in order)."""
        for life in list(self.lives.values()):
            if life.registration is not None:
                yield life.registration

    def _provider(self, config: ProviderConfig | None
                  ) -> tuple[ProviderConfig | None, Provider]:
        chosen = config or self.default_provider
        try:
            return open_provider(chosen)  # the config as resolved: what the log records
        except ProviderConfigError as exc:
            raise RpcError(ErrorCode.INVALID_PARAMS, str(exc)) from exc

    def life(self, session: Session) -> SessionLife:
        life = self.lives.get(session.session_id)
        if life is None or life.session is not session:
            life = self.lives[session.session_id] = SessionLife(
                session, sessions=self.sessions, host=self.host, trust=self.trust)
        return life

    def _start_agent(self, life: SessionLife) -> None:
        assert self.nursery is not None
        if life.running:
            return
        session = life.session
        session.agent.stuck_after = self.stuck_after
        caught_up = self.client.caught_up if self.client is not None else self.caught_up
        if caught_up is not None:
            session.agent.before_turn = functools.partial(self._before_turn, caught_up,
                                                          session)
        session.agent.on_step = session.ops.plan_step
        session.agent.hold_turn = functools.partial(self.tools.hold, session)
        session.agent.on_stop = self.ops.record_stop
        life.start_agent(self.nursery)

    async def _before_turn(self, caught_up: Callable[[], Awaitable[None]],
                           session: Session) -> None:
        """A turn's first step waits until the client link has taken every frame it read,
        and every request on the session has taken its effect (unless the turn is being
        stopped already): a stop written right behind its prompt stops it before a tool."""
        # A client that leaves its output unread holds its link's reader (backpressure):
        # a stop from elsewhere (an operator, shutdown's dispose) must not wait for it.
        while not session.agent.stopping:
            with trio.move_on_after(STOPPING_POLL):
                await caught_up()
                break
        await self.order.quiet(session.session_id, lambda: session.agent.stopping)

    # -- client methods -------------------------------------------------------------

    def _require_initialized(self) -> None:
        if not self.initialized:
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
                                       params.mcp_servers, params.system_prompt,
                                       params.sandbox)
        # Until it answers, session.close of it undoes the open (its servers killed).
        life = self.life(session)
        life.begin_open()
        effect_taken()  # the session exists; waiting for the host and plugins follows
        try:
            listed = await life.open_new()
        except RpcError as exc:
            self.lives.pop(session.session_id, None)
            if self.closing and exc.code == ErrorCode.HOST_CRASHED:
                raise RpcError(ErrorCode.SHUTTING_DOWN,
                               "the daemon shut down while the session opened") from exc
            raise
        except BaseException:
            self.lives.pop(session.session_id, None)
            raise
        if listed is None:
            self.lives.pop(session.session_id, None)
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
        if params.mcp_servers is not None:
            try:
                check_servers(params.mcp_servers, "mcpServers")
            except PluginConfigError as exc:
                raise RpcError(ErrorCode.INVALID_PARAMS, str(exc)) from exc

        def provider(saved: dict[str, Any]) -> Provider:
            try:
                config = msgspec.convert(saved, ProviderConfig) if saved else None
            except msgspec.ValidationError:
                config = None
            return self._provider(config)[1]

        self.sessions.path_of(params.session_id)  # a malformed id makes no lock
        async with self.order.place(params.session_id) as place:
            open_now = self.sessions.find(params.session_id)
            if (open_now is not None and not open_now.closing
                    and not self.sessions.lock(params.session_id).locked()):
                # Loaded and running already: only its replay (no lock, so nothing waits),
                # and the servers the client names now, if they differ.
                life = self.lives.get(open_now.session_id)
                if (params.mcp_servers is not None and life is not None
                        and params.mcp_servers != open_now.mcp_servers):
                    open_now.mcp_servers = params.mcp_servers
                    await life.open()
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
                if params.mcp_servers is not None:  # the client's, not only the stored ones
                    session.mcp_servers = params.mcp_servers
                place.started()  # loaded (the log read): prompts after this one reach it
                life = self.life(session)
                servers: tuple[PluginServerStatus, ...] = ()
                if not life.running:
                    # The agent runs before the host hears of the session: if the host
                    # refuses it (its workspace is gone), prompts still get answered.
                    self._start_agent(life)
                    servers = (await life.open()).servers
        session.agent.journal.replay()
        return SessionLoadResult(session.session_id, session.workspace,
                                 len(session.agent.journal.events), loaded.recovered, servers)

    async def session_set_mode(self, params: SessionSetModeParams) -> Empty:
        """A new permission mode: the host hears it by the session's registration (the
        host keeps the session's plugin servers and its allow/deny answers)."""
        self._require_initialized()
        async with self.order.place(params.session_id):
            session = self.sessions.get(params.session_id)
            session.permission_mode = params.permission_mode
            life = self.lives.get(session.session_id)
        if life is not None and life.registration is not None:
            await life.open()
        return Empty()

    async def session_close(self, params: SessionCloseParams) -> Empty:
        self._require_initialized()
        life = self.lives.get(params.session_id)
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
            life = self.life(session)
            # Closing, it takes no prompt; aborts join this stop and operators still see
            # it (a stuck call may need their force before the close can answer).
            session.closing = True
            try:
                # Shielded: a close that began finishes its stop.
                with trio.CancelScope(shield=True):
                    await session.agent.cancel(DisposedCause(), task_status=place)
            finally:
                self.lives.pop(session.session_id, None)
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

    async def session_compact(self, params: SessionCompactParams) -> SessionCompactResult:
        """Compact the session's history now, in its maintenance phase (a stop stops it)."""
        self._require_initialized()
        async with self.order.place(params.session_id):
            session = self.sessions.get(params.session_id)
            if session.closing:
                raise RpcError(ErrorCode.NOT_FOUND, f"session {params.session_id} is closing")
            job = session.agent.compact()
        # Begun (its phase entered: a stop after this stops it); its end follows.
        if job is None:
            return SessionCompactResult("busy", error="a turn or maintenance is running")
        await job.done.wait()
        return job.result()

    async def debug_run_tool(self, params: DebugRunToolParams) -> DebugRunToolResult:
        self._require_initialized()
        session = self.sessions.get(params.session_id)
        call_id = debug_call_id(next(self._debug_ids))
        result: ToolResult = await self.host.request("tools.execute", ToolsExecuteParams(
            session.session_id, call_id, params.tool, dict(params.args)))
        return DebugRunToolResult(call_id, result)
