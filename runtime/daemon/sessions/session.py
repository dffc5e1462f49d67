"""One session in the daemon, from the first request that names it to ``close()``:
``Session``, the one owner of everything the daemon holds for it besides the store's entry.

A session owns its requests' wire-order chain (``order.py``) and its load/close lock, from
the moment a ``session.load`` names it, before its log is read (state ``loading``); then
(``attach``, state ``open``) its agent (built here, with the session as its collaborators:
``runtime/agent/collaborators.py``), the task the agent runs in and the cancel scope
``close()`` cancels, its registration with the host (``session.open``, the plugin
servers the host starts for it, ``registration``: what a fresh host is told of the session
after a crash or restart, read by the supervisor through the store), its opening (a
``session.new`` still opening runs under ``opening``, which a ``session.close`` cancels to
undo the open), its top-level turn's hold on a host (the lease), its ops view and its
stop's waiting set. ``close()`` is the one place that drops all of it (state ``closed``);
a load after a close makes the session's ``successor``, which takes over its chain and
lock, so requests read meanwhile keep their order.

What every session of the daemon shares (the host supervisor, the client link, the
workspace trust, the tools factory, the wait before a turn) is its ``SessionServices``,
made once by the session side and held by reference.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

import msgspec
import trio

from protocol.causes import DisposedCause
from protocol.ids import root_turn_id
from protocol.messages.client import PermissionMode, SandboxMode, SessionInfo
from protocol.messages.common import McpServerConfig, PluginServerStatus
from protocol.messages.events import AnnouncedEvent, SessionMeta
from protocol.messages.host import (
    PluginsListParams,
    PluginsListResult,
    PluginTool,
    SessionCloseHostParams,
    SessionOpenParams,
    SessionOpenResult,
)
from protocol.sandbox import SandboxPolicy
from runtime.agent.agent import Agent, ToolsFactory
from runtime.agent.compaction import settings_from_meta
from runtime.agent.journal import Journal
from runtime.agent.providers.base import Provider
from runtime.agent.turn import TurnConfig
from runtime.daemon.client_link import ClientLinkState
from runtime.daemon.sessions.ops_view import SessionOpsView
from runtime.daemon.sessions.order import SessionOrder
from runtime.daemon.sessions.picker import picker_fields
from runtime.daemon.sessions.stop_waiting import StopWaiting
from runtime.link import Effect
from runtime.supervision.failures import HostError, HostUnavailable
from runtime.supervision.supervisor import HostSupervisor

if TYPE_CHECKING:
    from runtime.agent.registry.signal import AbortSignal
    from runtime.daemon.sessions.store import SessionStore
    from runtime.daemon.trust import WorkspaceTrust
    from runtime.supervision.lease import HostLease

log = logging.getLogger(__name__)

CLOSE_TIMEOUT = 10.0  # for the host to stop a closed session's plugin servers


@dataclass(frozen=True)
class SessionServices:
    """What every session of a daemon shares, made once by the session side."""

    host: HostSupervisor
    link: ClientLinkState
    announce: Callable[[str, AnnouncedEvent], None]
    """A session's events, to the clients and operators that hear them."""
    tools: Callable[[str], ToolsFactory]
    """A session's host tools, made per turn (``sessions/tools.py``)."""
    before_turn: Callable[[Session, AbortSignal], Awaitable[None]]
    """The wait before a turn's first step (``SessionRequests.before_turn``)."""
    record_stop: Callable[[float], None]
    """A settled stop, counted for operators (``DaemonOps.record_stop``)."""
    stuck_after: float
    trust: WorkspaceTrust | None = None


@dataclass
class Opening:
    """A ``session.new`` in progress: ``session.close`` of its session cancels it."""

    scope: trio.CancelScope = field(default_factory=trio.CancelScope)
    done: trio.Event = field(default_factory=trio.Event)


SessionState = Literal["loading", "open", "closed"]
"""``loading``: named by a ``session.load`` whose log is not read yet (or whose load failed):
no agent, nothing visible but its chain and lock. ``open``: its agent made (``attach``),
until ``close()`` drops it: ``closed``. The store keeps a session that is not open only
while a request on it is pending (``SessionStore.let_go``)."""


class Session:
    # From its log's first line (SessionMeta), set by ``attach``.
    workspace: str
    permission_mode: PermissionMode
    created_at: float
    mcp_servers: tuple[McpServerConfig, ...]
    hidden_env: tuple[str, ...]
    """The variable its provider configuration names for its key (``apiKeyEnv``): the
    host keeps it from every child process."""
    sandbox: SandboxMode | None
    """The sandbox mode the session narrowed to (``session.new``), or None."""

    def __init__(self, session_id: str, *, services: SessionServices, store: SessionStore,
                 order: SessionOrder | None = None, lock: trio.Lock | None = None) -> None:
        """A session in state ``loading``; ``order`` and ``lock``: a closed predecessor's,
        which a session loaded again after a close takes over (``successor``)."""
        self.session_id = session_id
        self.state: SessionState = "loading"
        self.order = order if order is not None else SessionOrder()
        """Its requests' wire-order chain (``order.py``)."""
        self.lock = lock if lock is not None else trio.Lock()
        """Held by a load or a close of the session for its whole length: two loads make
        one session, not two agents, and a close and a load never interleave (the host
        would see their ``session.open`` and ``session.close`` in either order)."""
        self.plugin_tools: tuple[PluginTool, ...] = ()
        """The plugin tools the host listed for this session (what the model is offered)."""
        self.sandbox_policy: SandboxPolicy | None = None
        """The session's sandbox as the host enforces it (``session.open``'s answer): what
        the Bash specification the model receives states."""
        self.closing = False
        """``close()`` is settling its turn: no new prompt; still visible to ``agent.abort``
        and operators (who may have to force a stuck call for the close to finish)."""
        self.ops = SessionOpsView()
        """What operators see of its calls."""
        self.registration: SessionOpenParams | None = None
        """Set from ``open()`` until the session closes or its open is undone: every fresh
        host is told of the session with it."""
        self.opening: Opening | None = None
        """Set while ``session.new`` opens the session (``open_new``)."""
        self._services = services
        self._store = store
        self._agent: Agent | None = None
        self._waiting: StopWaiting | None = None
        self._agent_scope: trio.CancelScope | None = None
        self._lease: tuple[str, HostLease] | None = None
        """Its current top-level turn and that turn's hold on a host, which the turn's
        subagents share: nothing of a turn reaches a host started after its own died."""

    def attach(self, meta: SessionMeta, journal: Journal, provider: Provider,
               config: TurnConfig) -> None:
        """Its log read (or just written, for ``session.new``): its agent made; ``open``."""
        assert self.state == "loading" and meta.session_id == self.session_id
        self.workspace = meta.workspace
        self.permission_mode = meta.permission_mode  # type: ignore[assignment]
        self.created_at = meta.created_at
        self.mcp_servers = meta.mcp_servers
        key_env = meta.provider.get("apiKeyEnv") if isinstance(meta.provider, dict) else None
        self.hidden_env = (key_env,) if isinstance(key_env, str) else ()
        self.sandbox = meta.sandbox  # type: ignore[assignment]
        self._agent = Agent(meta.session_id, journal, provider,
                            self._services.tools(meta.session_id), config,
                            collaborators=self, context=settings_from_meta(meta.provider))
        self._waiting = StopWaiting(self._agent, self.ops)
        self.state = "open"

    def successor(self) -> Session:
        """A closed session's next life, to load it again: its chain and lock go with it."""
        assert self.state == "closed"
        return Session(self.session_id, services=self._services, store=self._store,
                       order=self.order, lock=self.lock)

    def lock_now_or_mark(self, effect: Effect) -> trio.Lock:
        """Its load/close lock; if it is held, the request about to wait for it takes its
        ``effect`` first (the link reads on)."""
        if self.lock.locked():
            effect.take()
        return self.lock

    def announce(self, event: AnnouncedEvent) -> None:
        """One of its events, to the clients and operators that hear them."""
        self._services.announce(self.session_id, event)

    @property
    def agent(self) -> Agent:
        assert self._agent is not None, "an open session's"
        return self._agent

    @property
    def waiting(self) -> StopWaiting:
        """What a stop of it waits on, announced as ``stop/waiting`` when it changes."""
        assert self._waiting is not None, "an open session's"
        return self._waiting

    @property
    def idle(self) -> bool:
        """Not open, and no request on it pending or holding its lock: the store lets it
        go."""
        return (self.state != "open" and self.order.idle and not self.lock.locked()
                and not self.lock.statistics().tasks_waiting)

    def info(self) -> SessionInfo:
        agent = self.agent
        return SessionInfo(self.session_id, self.workspace, self.permission_mode,
                           self.created_at, usage=self.agent.usage,
                           phase=self.agent.machine.phase.kind.value,
                           **picker_fields(
                               agent.journal.events, agent.journal.log_path,
                               running=agent.busy or bool(agent.inbox),
                               stopping=agent.stopping))

    # -- the agent's collaborators (AgentCollaborators) ----------------------------------

    @property
    def stuck_after(self) -> float:
        return self._services.stuck_after

    async def before_turn(self, stopped: AbortSignal) -> None:
        await self._services.before_turn(self, stopped)

    def hold_turn(self, turn_id: str) -> AbstractAsyncContextManager[None]:
        """A top-level turn's run: the lease it and its subagents share is held, so what
        outlives a call is awaited in the lease's own nursery."""
        return self.lease_for(turn_id).held()

    def on_step(self, turn_id: str, calls: Sequence[tuple[str, str, str]]) -> None:
        self.ops.plan_step(turn_id, calls)

    def on_stop(self, settled_ms: float) -> None:
        self._services.record_stop(settled_ms)

    def on_stopping(self) -> None:
        self.waiting.changed()

    def lease_for(self, turn_id: str) -> HostLease:
        """The session's lease for this turn: its top-level turn's."""
        top = root_turn_id(turn_id)
        held = self._lease
        if held is None or held[0] != top:
            held = self._lease = (top, self._services.host.lease())
        return held[1]

    # -- the agent's task ---------------------------------------------------------------

    @property
    def running(self) -> bool:
        """Whether the agent's task was started."""
        return self._agent_scope is not None

    def start_agent(self) -> None:
        """Run the agent in the daemon's nursery under a scope ``close()`` cancels."""
        if self._agent_scope is not None:
            return
        nursery = self._services.link.nursery
        assert nursery is not None, "the daemon serves"
        scope = self._agent_scope = trio.CancelScope()  # cancellable before it starts
        nursery.start_soon(self._serve_agent, scope)

    async def _serve_agent(self, scope: trio.CancelScope) -> None:
        with scope:
            await self.agent.run()

    # -- open ---------------------------------------------------------------------------

    async def open(self) -> PluginsListResult:
        """Register the session with the host and start its plugin servers: those its
        workspace declares only once their content is trusted (``runtime/daemon/trust.py``:
        the host lists them ``untrusted``, the decision is made, and a trusted digest is
        registered, so the host starts them, and a fresh host after a crash too)."""
        host = self._services.host
        params = self.registration = SessionOpenParams(
            self.session_id, self.workspace, self.permission_mode,
            self.mcp_servers, self.hidden_env, sandbox=self.sandbox)
        opened: SessionOpenResult = await host.request("session.open", params)
        self.sandbox_policy = opened.sandbox
        listed = await self._list_plugins()
        trust = self._services.trust
        if trust is None:
            return listed
        digest = await trust.decide(self.session_id, self.workspace, listed)
        if digest is None or self.registration is not params:
            return listed
        params = self.registration = msgspec.structs.replace(params, trusted_digest=digest)
        await host.request("session.open", params)  # a re-open: what runs keeps running
        return await self._list_plugins()

    async def open_or_defer(self) -> tuple[PluginServerStatus, ...]:
        """``open()`` for a session whose load or mode change has taken effect: if no host
        can take it now (the host died, or the shutdown stopped it), the session stays as
        it is and a fresh host is told of it by its registration; no plugin server runs
        until then."""
        try:
            return (await self.open()).servers
        except HostUnavailable as exc:
            log.warning("session %s: the host was not told of it now (%s); a fresh host "
                        "will be", self.session_id, exc)
            return ()

    def begin_open(self) -> None:
        """A new session's open begins: from here ``session.close`` undoes it."""
        self.opening = Opening()

    async def open_new(self) -> PluginsListResult | None:
        """``open()`` for a new session (after ``begin_open``), undone if it fails or
        ``session.close`` cancels it (``opening``): None if cancelled so. Never leaves a
        session that can accept a prompt nobody would run, nor plugin servers the host
        started for it."""
        opening = self.opening
        assert opening is not None, "begin_open() first"
        try:
            with opening.scope:
                try:
                    listed = await self.open()
                except BaseException:
                    await self._undo_open()
                    raise
            if opening.scope.cancel_called:
                if not opening.scope.cancelled_caught:
                    # session.close came after the open's last checkpoint: undone all the
                    # same (before ``done``, so the close waits for it).
                    await self._undo_open()
                return None  # cancelled by session.close
            return listed
        finally:
            self.opening = None
            opening.done.set()

    async def _undo_open(self) -> None:
        """The session forgotten, unregistered, and closed in the host (its servers too)."""
        self._store.discard(self, forget=True)
        self.registration = None
        await self._close_in_host()

    async def _list_plugins(self) -> PluginsListResult:
        """Start the session's plugin servers; their tools are offered from the next turn."""
        listed: PluginsListResult = await self._services.host.request(
            "plugins.list", PluginsListParams(self.session_id))
        self.plugin_tools = listed.tools
        for server in listed.servers:
            if server.error is not None:
                log.warning("session %s: plugin server %s unavailable: %s",
                            self.session_id, server.name, server.error)
        return listed

    # -- close --------------------------------------------------------------------------

    async def close(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
                    ) -> None:
        """``session.close`` (the caller holds ``lock``): no new prompt from here; its turn
        stopped (cause ``disposed``: aborts join the stop, operators still see it, as a
        stuck call may need their force); then, whatever the stop's outcome, everything the
        daemon holds for it dropped and the host told, which stops its plugin servers.
        ``task_status`` is told when the stop has begun. Shielded: a close that began
        finishes."""
        self.closing = True
        try:
            with trio.CancelScope(shield=True):
                await self.agent.cancel(DisposedCause(), task_status=task_status)
        finally:
            await self._drop()

    async def _drop(self) -> None:
        with trio.CancelScope(shield=True):
            await self.agent.record_owed()  # a last try, while the log is open
            if self._agent_scope is not None:
                self._agent_scope.cancel()
            self.agent.journal.close()
            self.state = "closed"  # no longer found; the store lets it go (``idle``)
            self.registration = None
            # Also when the stop failed (its turn/end not durable: INTERNAL): the session
            # is closed all the same, its plugin servers with it.
            await self._close_in_host()

    async def _close_in_host(self) -> None:
        """Tell a live host to drop the session and stop its plugin servers (a dead host's
        servers were swept with it)."""
        with trio.CancelScope(shield=True), trio.move_on_after(CLOSE_TIMEOUT):
            try:
                await self._services.host.request_if_alive(
                    "session.close", SessionCloseHostParams(self.session_id))
            except HostError as exc:
                log.info("session %s: the host was not told of its close (%s)",
                         self.session_id, exc)

