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
- ``stop/waiting``: while a stop waits on calls, the session announces them (checked
  every ``WATCH_INTERVAL``; sent when the list changes, an empty list once it is over).
- ``agent.force`` is the daemon's, on every client link (``runtime/client_force.py``).
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import trio

from protocol.errors import ErrorCode, RpcError
from protocol.messages.client import SessionEventParams, SessionLoadResult
from protocol.messages.events import StopWaitingEvent, WaitingCall
from protocol.messages.renderer import SessionAttachParams, SessionAttachResult
from protocol.methods import CLIENT_TO_RUNTIME, RUNTIME_TO_CLIENT
from runtime.client_force import WaitingRow, waiting_calls
from runtime.client_hub import ClientHub
from runtime.shared.rpc import Endpoint, Handler

if TYPE_CHECKING:
    from runtime.daemon import Daemon
    from runtime.sessions import Session

log = logging.getLogger(__name__)

WATCH_INTERVAL = 0.05
"""How often the stops' waiting lists are looked at (stop/waiting)."""
_UNGATED = ("initialize", "shutdown")
_FOLLOWED_BY_PARAMS = ("session.load", "session.close", "agent.prompt", "agent.abort",
                       "agent.force")


class SocketClients:
    def __init__(self, daemon: Daemon) -> None:
        self._daemon = daemon
        self.hub = ClientHub()
        self._counter = 0
        self._waiting: dict[str, tuple[WaitingRow, ...]] = {}
        self._since: dict[tuple[str, str], float] = {}

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
            client.add_handler(method, functools.partial(
                self._gated, client, state, method, handler))
        client.add_handler("session.attach", functools.partial(
            self._gated, client, state, "session.attach", self._attach_for(client)))
        self.hub.add(client)
        log.info("%s connected", client.name)
        try:
            await client.run()
        finally:
            self.hub.remove(client)
            log.info("%s disconnected: its sessions run on", client.name)

    async def _gated(self, client: Endpoint, state: dict[str, bool], method: str,
                     handler: Handler, params: Any) -> Any:
        if method not in _UNGATED and not state["initialized"]:
            raise RpcError(ErrorCode.NOT_INITIALIZED, "send initialize first")
        session_id: str | None = getattr(params, "session_id", None)
        if method == "session.load" and session_id is not None:
            loaded = self._replay_loaded(client, session_id)
            if loaded is not None:
                return loaded
        if method in _FOLLOWED_BY_PARAMS and session_id is not None \
                and method != "session.close":
            self.hub.follow(session_id, client)  # before a load's replay
        result = await handler(params)
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
        requests = self._daemon.requests
        session = requests.sessions.find(session_id)
        if session is None or session.closing or requests.sessions.lock(session_id).locked():
            return None
        self.attach(client, SessionAttachParams(session_id))
        return SessionLoadResult(session_id, session.workspace,
                                 len(session.agent.journal.events), False)

    def _attach_for(self, client: Endpoint) -> Callable[[SessionAttachParams], Any]:
        async def attach(params: SessionAttachParams) -> SessionAttachResult:
            return self.attach(client, params)
        return attach

    def _session(self, session_id: str) -> Session:
        requests = self._daemon.requests
        session = requests.sessions.find(session_id)
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
        waiting = self._waiting.get(session.session_id)
        if waiting:
            client.notify("session.event", SessionEventParams(
                session.session_id, self._waiting_event(session, waiting)))
        return SessionAttachResult(session.session_id, session.workspace, journal.last_seq,
                                   agent.busy or bool(agent.inbox), agent.stopping)

    # -- stop/waiting -------------------------------------------------------------

    def _waiting_event(self, session: Session,
                       calls: tuple[WaitingRow, ...]) -> StopWaitingEvent:
        current = session.agent.current_turn
        turn_id = current[0] if current else ""
        now = time.time()
        return StopWaitingEvent(session.agent.journal.last_seq, turn_id, tuple(
            WaitingCall(call_id, tool, tool_class, state,
                        self._since.get((session.session_id, call_id), now))
            for call_id, tool, tool_class, state in calls))

    async def watch_stops(self) -> None:
        """Announce each stop's waiting list when it changes (socket links only)."""
        while True:
            await trio.sleep(WATCH_INTERVAL)
            requests = self._daemon._requests
            if requests is None:
                continue
            sessions = requests.sessions.all()
            gone = set(self._waiting) - {s.session_id for s in sessions}
            for sid in gone:  # closed while a stop waited: nothing left to tell
                del self._waiting[sid]
            for key in [k for k in self._since if k[0] in gone]:
                del self._since[key]
            for session in sessions:
                sid = session.session_id
                calls = waiting_calls(session)
                if calls == self._waiting.get(sid, ()):
                    continue
                now = time.time()
                for call in calls:
                    self._since.setdefault((sid, call[0]), now)
                event = self._waiting_event(session, calls)
                if calls:
                    self._waiting[sid] = calls
                else:
                    self._waiting.pop(sid, None)
                    for key in [k for k in self._since if k[0] == sid]:
                        del self._since[key]
                self.hub.notify_session(sid, "session.event", SessionEventParams(sid, event))
