"""The daemon's clients on a socket link (``quiesce serve --listen``): each connection is
one ``Endpoint`` with the daemon's handlers, plus what a renderer needs beside stdio.

- Each connection shakes hands itself (``initialize``); until then it is refused
  everything but ``initialize`` and ``shutdown`` (``NOT_INITIALIZED``), as on stdio.
- A client follows the sessions it opens (``session.new``), loads (``session.load``) or
  attaches (``session.attach``): it hears their events and is asked their permission
  prompts (``client_hub.py``). A client that goes away stops nothing.
- ``session.attach {sessionId, afterSeq?}``: the session's durable events after
  ``afterSeq`` to this client, then its live ones (no event lost or doubled between the
  two: the replay and the start of following happen with no await between them).
- ``stop/waiting``: the session announces what its stop waits on as that changes
  (``runtime/daemon/sessions/stop_waiting.py``), to every client following it; one that
  attaches while a stop waits is sent the current list.
- ``agent.force`` is the daemon's, on every client link (``runtime/daemon/client_force.py``).
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import trio

from protocol.errors import ErrorCode, RpcError
from protocol.messages.client import SessionEventParams, SessionLoadResult
from protocol.messages.renderer import SessionAttachParams, SessionAttachResult
from protocol.methods import CLIENT_TO_RUNTIME, RUNTIME_TO_CLIENT
from runtime.daemon.client_hub import ClientHub
from runtime.link import Effect, Endpoint, Handler, call_handler, marks_effect

if TYPE_CHECKING:
    from runtime.daemon.daemon import Daemon
    from runtime.daemon.sessions.session import Session

log = logging.getLogger(__name__)

_UNGATED = ("initialize", "shutdown")
_FOLLOWED_BY_PARAMS = ("session.load", "session.close", "agent.prompt", "agent.abort",
                       "agent.force")


class SocketClients:
    def __init__(self, daemon: Daemon) -> None:
        self._daemon = daemon
        self.hub = ClientHub()
        self._counter = 0

    async def serve_link(self, receive: trio.abc.ReceiveStream,
                         send: trio.abc.SendStream) -> None:
        """Serve one connection until it closes; its sessions run on."""
        self._counter += 1
        state = {"initialized": False}
        handlers: dict[str, Handler] = {}
        client = Endpoint(f"socket-client-{self._counter}", receive, send,
                          incoming=CLIENT_TO_RUNTIME, outgoing=RUNTIME_TO_CLIENT,
                          handlers=handlers, max_frame_size=self._daemon.max_frame_size)
        for method, handler in self._daemon.handlers.items():
            client.add_handler(method, marks_effect(functools.partial(
                self._gated, client, state, method, handler)))
        client.add_handler("session.attach", marks_effect(functools.partial(
            self._gated, client, state, "session.attach", self._attach_for(client))))
        self.hub.add(client)
        log.info("%s connected", client.name)
        try:
            await client.run()
        finally:
            self.hub.remove(client)
            log.info("%s disconnected: its sessions run on", client.name)

    async def _gated(self, client: Endpoint, state: dict[str, bool], method: str,
                     handler: Handler, params: Any, effect: Effect) -> Any:
        if method not in _UNGATED and not state["initialized"]:
            raise RpcError(ErrorCode.NOT_INITIALIZED, "send initialize first")
        session_id: str | None = getattr(params, "session_id", None)
        if method == "session.load" and session_id is not None:
            loaded = self._replay_loaded(client, session_id)
            if loaded is not None:
                return loaded
        followed = (session_id if method in _FOLLOWED_BY_PARAMS
                    and method != "session.close" else None)
        if followed is not None:
            self.hub.follow(followed, client)  # before a load's replay
        try:
            result = await call_handler(handler, params, effect)  # its effect as it declares
        finally:
            if followed is not None and self._daemon.sessions.find(followed) is None:
                # No such session (or no longer): a client naming missing ids keeps nothing.
                self.hub.unfollow(followed, client)
        if method == "initialize":
            state["initialized"] = True
        elif method == "session.new":
            self.hub.follow(getattr(result, "session_id"), client)  # noqa: B009 -- typed Struct
        elif method == "session.close" and session_id is not None:
            self.hub.forget_session(session_id)
        return result

    def _replay_loaded(self, client: Endpoint, session_id: str) -> SessionLoadResult | None:
        """``session.load`` of a session loaded already and not busy loading or closing:
        its replay goes to this client only (the daemon's own replay would go to every
        client following it). None: the daemon's ``session.load`` does it."""
        session = self._daemon.sessions.find(session_id)
        if session is None or session.closing or session.lock.locked():
            return None
        self.attach(client, SessionAttachParams(session_id))
        return SessionLoadResult(session_id, session.workspace,
                                 len(session.agent.journal.events), False)

    def _attach_for(self, client: Endpoint) -> Callable[[SessionAttachParams], Any]:
        async def attach(params: SessionAttachParams) -> SessionAttachResult:
            return self.attach(client, params)
        return attach

    def _session(self, session_id: str) -> Session:
        session = self._daemon.sessions.find(session_id)
        if session is None or session.closing:
            raise RpcError(ErrorCode.NOT_FOUND,
                           f"session {session_id} is not loaded (session.load it first)")
        return session

    def attach(self, client: Endpoint, params: SessionAttachParams) -> SessionAttachResult:
        session = self._session(params.session_id)
        journal = session.agent.journal
        # No await from here to follow(): nothing can be announced in between.
        for event in journal.events:
            if event.seq > params.after_seq:
                client.notify("session.event", SessionEventParams(session.session_id, event))
        self.hub.follow(session.session_id, client)
        agent = session.agent
        waiting = session.waiting.event()
        if waiting.calls:  # what its stop waits on now (announced before it followed)
            client.notify("session.event", SessionEventParams(session.session_id, waiting))
        return SessionAttachResult(session.session_id, session.workspace, journal.last_seq,
                                   agent.busy or bool(agent.inbox), agent.stopping)
