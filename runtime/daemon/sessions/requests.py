"""The client link's requests on sessions: ``session.new``, ``.list``, ``.load`` and
``.close``, ``agent.prompt`` and ``.abort``, ``debug.runTool``; each on its session
(``session.py``), in the session store (``store.py``).

Split from ``daemon.py`` (the link, its lifetime and shutdown), which routes these
methods here; the client link's state (``ClientLinkState``: initialized, the client, the
nursery the agents run in, the shutdown begun) is the daemon's, read here by reference.
The daemon makes this side on its first use, not at start-up: the agent, the registry,
the providers and the session log are imported then, after ``initialize`` is answered, so
they never delay the first answer.
"""

from __future__ import annotations

import dataclasses
import itertools
import logging
import pathlib
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager
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
from runtime.agent.collaborators import DEFAULT_STUCK_AFTER
from runtime.agent.hooks.config import HookConfig
from runtime.agent.hosttools import DEFAULT_PROCESS_GRACE
from runtime.agent.providers.base import Provider
from runtime.agent.providers.factory import ProviderConfigError, open_provider
from runtime.agent.registry.signal import AbortSignal, cancel_on_abort
from runtime.agent.turn import TurnConfig
from runtime.daemon.client_link import ClientLinkState
from runtime.daemon.ops_backend import DaemonOps
from runtime.daemon.permission_relay import PermissionRelay
from runtime.daemon.sessions.listing import LogListing
from runtime.daemon.sessions.order import Place
from runtime.daemon.sessions.session import Session, SessionServices
from runtime.daemon.sessions.store import SessionStore
from runtime.daemon.sessions.tools import SessionTools
from runtime.daemon.trust import DEFAULT_TRUST_TIMEOUT, TrustStore, WorkspaceTrust
from runtime.link import Effect
from runtime.supervision.supervisor import HostSupervisor

log = logging.getLogger(__name__)


class SessionRequests:
    """The session side of the daemon, made on its first use (``Daemon.requests``): the
    session store, each session's tools, the ops view and the requests on sessions."""

    def __init__(self, *, data_dir: pathlib.Path, host: HostSupervisor,
                 link: ClientLinkState, permissions: PermissionRelay,
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
        self.listing = LogListing(self.sessions.dir,
                                  loaded=lambda session_id: session_id in self.sessions)
        self.host = host
        self.ops = DaemonOps(self.sessions, self.listing, host, permissions)
        self.tools = SessionTools(self.sessions, process_grace=(
            DEFAULT_PROCESS_GRACE if process_grace is None else process_grace), hooks=hooks)
        self.default_provider = default_provider
        self.link = link
        self._debug_ids = itertools.count(1)
        self.trust = WorkspaceTrust(
            TrustStore(data_dir), trusted_workspaces=trusted_workspaces,
            timeout=DEFAULT_TRUST_TIMEOUT if trust_timeout is None else trust_timeout,
            client=lambda: link.client)
        self.services = SessionServices(
            host=host, link=link, announce=announce, tools=self.tools.factory,
            before_turn=self.before_turn, record_stop=self.ops.record_stop,
            stuck_after=DEFAULT_STUCK_AFTER if stuck_after is None else stuck_after,
            trust=self.trust)
        """What every session shares (each session holds it)."""

    async def opened(self) -> None:
        """Return once no session is opening (a ``session.new`` taken before now)."""
        while waiting := [session.opening for session in self.sessions.all()
                          if session.opening is not None]:
            await waiting[0].done.wait()

    def registrations(self) -> Iterator[SessionOpenParams]:
        """The sessions registered with the host (a fresh host is told of each, in order)."""
        for session in self.sessions.all():
            if session.registration is not None:
                yield session.registration

    def _provider(self, config: ProviderConfig | None
                  ) -> tuple[ProviderConfig | None, Provider]:
        chosen = config or self.default_provider
        try:
            return open_provider(chosen)  # the config as resolved: what the log records
        except ProviderConfigError as exc:
            raise RpcError(ErrorCode.INVALID_PARAMS, str(exc)) from exc

    async def before_turn(self, session: Session, stopped: AbortSignal) -> None:
        """A turn's first step waits until the client link has taken every frame it read,
        and every request on the session has taken its effect (unless the turn is being
        stopped already): a stop written right behind its prompt stops it before a tool.
        Without a client link (none served yet), it does not wait."""
        caught_up = self.link.caught_up()
        if caught_up is None:
            return
        # A client that leaves its output unread holds its link's reader (backpressure):
        # a stop from elsewhere (an operator, shutdown's dispose) must not wait for it.
        with cancel_on_abort(stopped):
            await caught_up()
        await session.order.quiet(stopped)

    @asynccontextmanager
    async def _in_order(self, session: Session, effect: Effect) -> AsyncIterator[Place]:
        """A request's place in its session's chain (``order.py``); once it ends, a session
        no longer open is let go if nothing else is pending on it. Inside, the request finds
        the session again by id: a load may have made it anew (``Session.successor``)."""
        try:
            async with session.order.place(effect) as place:
                yield place
        finally:
            self.sessions.let_go(session.session_id)

    # -- client methods -------------------------------------------------------------

    def require_initialized(self) -> None:
        if not self.link.initialized:
            raise RpcError(ErrorCode.NOT_INITIALIZED, "send initialize first")

    async def session_new(self, params: SessionNewParams) -> SessionNewResult:
        self.require_initialized()
        config, provider = self._provider(params.provider)
        try:
            check_servers(params.mcp_servers, "mcpServers")
        except PluginConfigError as exc:
            raise RpcError(ErrorCode.INVALID_PARAMS, str(exc)) from exc
        session = self.sessions.create(params.workspace, params.permission_mode, config,
                                       provider, self.services, params.mcp_servers,
                                       params.system_prompt, params.sandbox)
        # Until it answers, session.close of it undoes the open (its servers killed).
        session.begin_open()
        listed = await session.open_new()  # a host unavailable: mapped by the daemon
        if listed is None:
            raise RpcError(ErrorCode.REQUEST_CANCELLED,
                           "session.close came while the session opened: it was undone")
        session.start_agent()
        log.info("session %s opened on %s", session.session_id, session.workspace)
        return SessionNewResult(session.session_id, listed.servers)

    async def session_list(self, params: Empty) -> SessionListResult:
        self.require_initialized()
        scan = await self.listing.scan_disk()
        # The open sessions as they are after the scan: one that opened or closed during
        # it is listed once, from the session or from its log.
        loaded = [s.info() for s in self.sessions.all()]
        listed = {info.session_id for info in loaded}
        on_disk = [info for info in scan.found if info.session_id not in listed]
        closed = [path for path in scan.loaded if path.stem not in listed]
        if closed:
            on_disk += await trio.to_thread.run_sync(self.listing.read, closed)
        return SessionListResult(tuple(loaded + on_disk))

    async def session_load(self, params: SessionLoadParams, effect: Effect
                           ) -> SessionLoadResult:
        self.require_initialized()
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

        claimed = self.sessions.claim(params.session_id, self.services)
        async with self._in_order(claimed, effect) as place:
            open_now = self.sessions.find(params.session_id)
            if (open_now is not None and not open_now.closing
                    and not open_now.lock.locked()):
                # Loaded and running already: only its replay (no lock, so nothing waits),
                # and the servers the client names now, if they differ.
                if (params.mcp_servers is not None
                        and params.mcp_servers != open_now.mcp_servers):
                    open_now.mcp_servers = params.mcp_servers
                    effect.take()  # the servers are the session's: the host is waited for
                    await open_now.open_or_defer()
                open_now.agent.journal.replay()
                return SessionLoadResult(open_now.session_id, open_now.workspace,
                                         len(open_now.agent.journal.events), False)
            async with claimed.lock_now_or_mark(effect):
                # Our place in the chain is taken: requests on this session wait for
                # place.started() below; the link reads on (a stop of another session
                # must not wait for this log's read).
                effect.take()
                loaded = await self.sessions.load(params.session_id, provider=provider)
                session = loaded.session
                if params.mcp_servers is not None:  # the client's, not the stored ones
                    session.mcp_servers = params.mcp_servers
                place.started()  # loaded (the log read): prompts after this reach it
                servers: tuple[PluginServerStatus, ...] = ()
                if not session.running:
                    # The agent runs before the host hears of the session: if the host
                    # refuses it (its workspace is gone), prompts still get answered.
                    session.start_agent()
                    servers = await session.open_or_defer()
        session.agent.journal.replay()
        return SessionLoadResult(session.session_id, session.workspace,
                                 len(session.agent.journal.events), loaded.recovered, servers)

    async def session_set_mode(self, params: SessionSetModeParams, effect: Effect) -> Empty:
        """A new permission mode: the host hears it by the session's registration (the
        host keeps the session's plugin servers and its allow/deny answers)."""
        self.require_initialized()
        async with self._in_order(self.sessions.pending(params.session_id), effect):
            session = self.sessions.get(params.session_id)
            session.permission_mode = params.permission_mode
        if session.registration is not None:
            await session.open_or_defer()
        return Empty()

    async def session_close(self, params: SessionCloseParams, effect: Effect) -> Empty:
        self.require_initialized()
        opening_now = self.sessions.find(params.session_id)
        opening = opening_now.opening if opening_now is not None else None
        if opening is not None:  # still opening: undone, its starting servers killed
            opening.scope.cancel()
            effect.take()  # the open is undone from here; its servers' end is awaited
            await opening.done.wait()
            return Empty()
        self.sessions.path_of(params.session_id)  # malformed: INVALID_PARAMS, not NOT_FOUND
        pending = self.sessions.pending(params.session_id)
        async with self._in_order(pending, effect) as place:
            async with pending.lock_now_or_mark(effect):
                session = self.sessions.get(params.session_id)  # a load may have made it anew
                await session.close(task_status=place)
        log.info("session %s closed", session.session_id)
        return Empty()

    async def agent_prompt(self, params: AgentPromptParams, effect: Effect
                           ) -> AgentPromptResult:
        self.require_initialized()
        async with self._in_order(self.sessions.pending(params.session_id), effect):
            session = self.sessions.get(params.session_id)
            if session.closing:
                raise RpcError(ErrorCode.NOT_FOUND, f"session {params.session_id} is closing")
            pending = session.agent.prompt(params.text)
        # Accepted (the block's end took its effect): waiting for the turn's end follows.
        await pending.done.wait()
        assert pending.result is not None
        return pending.result

    async def agent_abort(self, params: AgentAbortParams, effect: Effect
                          ) -> AgentAbortResult:
        self.require_initialized()
        async with self._in_order(self.sessions.pending(params.session_id), effect) as place:
            agent = self.sessions.get(params.session_id).agent
            return await agent.cancel(params.cause, keep_inbox=params.keep_inbox,
                                      task_status=place)

    async def session_compact(self, params: SessionCompactParams, effect: Effect
                              ) -> SessionCompactResult:
        """Compact the session's history now, in its maintenance phase (a stop stops it)."""
        self.require_initialized()
        async with self._in_order(self.sessions.pending(params.session_id), effect):
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
        self.require_initialized()
        session = self.sessions.get(params.session_id)
        call_id = debug_call_id(next(self._debug_ids))
        result: ToolResult = await self.host.request("tools.execute", ToolsExecuteParams(
            session.session_id, call_id, params.tool, dict(params.args)))
        return DebugRunToolResult(call_id, result)
