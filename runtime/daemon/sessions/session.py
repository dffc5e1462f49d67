"""One session's life in the daemon, from ``open()`` to ``close()``: the one owner of
what the daemon holds for a session besides its log.

A ``SessionLife`` owns the session's agent task and the cancel scope it runs under and its
registration with the host (``session.open``, the plugin servers the host starts for it,
``registration``: what a fresh host is told of the session after a crash or restart, read
by the supervisor through the daemon's lives, ``session.close``). The rest
of what is kept per session is the ``Session``'s own (``store.py``: its agent, its turn's
hold on a host ``lease``, its ops view ``ops``), so ``close()`` drops it by removing the
session from the ``SessionStore``. A ``session.new`` still opening runs under ``opening``, which a
``session.close`` cancels to undo the open.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

import msgspec
import trio

from protocol.errors import ErrorCode, RpcError
from protocol.messages.host import (
    PluginsListParams,
    PluginsListResult,
    SessionCloseHostParams,
    SessionOpenParams,
    SessionOpenResult,
)
from runtime.daemon.sessions.store import Session, SessionStore
from runtime.daemon.trust import WorkspaceTrust
from runtime.link import ConnectionClosed, NotSent
from runtime.supervision.supervisor import HostSupervisor

log = logging.getLogger(__name__)

CLOSE_TIMEOUT = 10.0  # for the host to stop a closed session's plugin servers


@dataclass
class Opening:
    """A ``session.new`` in progress: ``session.close`` of its session cancels it."""

    scope: trio.CancelScope = field(default_factory=trio.CancelScope)
    done: trio.Event = field(default_factory=trio.Event)


class SessionLife:
    def __init__(self, session: Session, *, sessions: SessionStore,
                 host: HostSupervisor, trust: WorkspaceTrust | None = None) -> None:
        self.session = session
        self._sessions = sessions
        self._host = host
        self._trust = trust
        self._agent_scope: trio.CancelScope | None = None
        self.registration: SessionOpenParams | None = None
        """Set from ``open()`` until the session closes or its open is undone: every fresh
        host is told of the session with it."""
        self.opening: Opening | None = None
        """Set while ``session.new`` opens the session (``open_new``)."""

    @property
    def session_id(self) -> str:
        return self.session.session_id

    @property
    def running(self) -> bool:
        """Whether the agent's task was started (and the session not closed)."""
        return self._agent_scope is not None

    def start_agent(self, nursery: trio.Nursery) -> None:
        """Run the session's agent in ``nursery`` under a scope ``close()`` cancels."""
        if self._agent_scope is not None:
            return
        scope = self._agent_scope = trio.CancelScope()  # cancellable before it starts
        nursery.start_soon(self._serve_agent, scope)

    async def _serve_agent(self, scope: trio.CancelScope) -> None:
        with scope:
            await self.session.agent.run()

    # -- open ---------------------------------------------------------------------------

    async def open(self) -> PluginsListResult:
        """Register the session with the host and start its plugin servers: those its
        workspace declares only once their content is trusted (``runtime/daemon/trust.py``: the
        host lists them ``untrusted``, the decision is made, and a trusted digest is
        registered, so the host starts them, and a fresh host after a crash too)."""
        session = self.session
        params = self.registration = SessionOpenParams(
            session.session_id, session.workspace, session.permission_mode,
            session.mcp_servers, session.hidden_env, sandbox=session.sandbox)
        opened: SessionOpenResult = await self._host.request("session.open", params)
        session.sandbox_policy = opened.sandbox
        listed = await self._list_plugins()
        if self._trust is None:
            return listed
        digest = await self._trust.decide(session.session_id, session.workspace, listed)
        if digest is None or self.registration is not params:
            return listed
        params = self.registration = msgspec.structs.replace(params, trusted_digest=digest)
        await self._host.request("session.open", params)  # a re-open: what runs keeps running
        return await self._list_plugins()

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
                    try:
                        listed = await self.open()
                    except ConnectionClosed as exc:  # no host could take it (not our bug)
                        raise RpcError(ErrorCode.HOST_CRASHED,
                                       f"no host for the session: {exc}") from exc
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
        self._sessions.discard(self.session_id, forget=True)
        self.registration = None
        await self._close_in_host()

    async def _list_plugins(self) -> PluginsListResult:
        """Start the session's plugin servers; their tools are offered from the next turn."""
        session = self.session
        listed: PluginsListResult = await self._host.request(
            "plugins.list", PluginsListParams(session.session_id))
        session.plugin_tools = listed.tools
        for server in listed.servers:
            if server.error is not None:
                log.warning("session %s: plugin server %s unavailable: %s",
                            session.session_id, server.name, server.error)
        return listed

    # -- close --------------------------------------------------------------------------

    async def close(self) -> None:
        """After the session's stop (whatever its outcome): drop everything the daemon
        holds for it, and tell the host, which stops its plugin servers. Shielded: a close
        that began finishes."""
        with trio.CancelScope(shield=True):
            session = self.session
            await session.agent.record_owed()  # a last try, while the log is open
            if self._agent_scope is not None:
                self._agent_scope.cancel()
            session.agent.journal.close()
            self._sessions.remove(session.session_id)  # its lease and ops view with it
            self.registration = None
            # Also when the stop failed (its turn/end not durable: INTERNAL): the session
            # is closed all the same, its plugin servers with it.
            await self._close_in_host()

    async def _close_in_host(self) -> None:
        """Tell a live host to drop the session and stop its plugin servers (a dead host's
        servers were swept with it)."""
        with trio.CancelScope(shield=True), trio.move_on_after(CLOSE_TIMEOUT):
            try:
                await self._host.request_if_alive("session.close",
                                                  SessionCloseHostParams(self.session_id))
            except (NotSent, ConnectionClosed, RpcError) as exc:
                log.info("session %s: the host was not told of its close (%s)",
                         self.session_id, exc)
