"""One operator's connection to the ops socket: handshake, methods, tails.

Each method maps to the daemon's :class:`OpsBackend`; errors it raises (``RpcError``
and anything unexpected) become JSON-RPC errors in the endpoint's one place
(``runtime.link.dispatch``), never here.
"""

from __future__ import annotations

import logging
import os
import pathlib

import trio

from protocol.errors import ErrorCode, RpcError
from protocol.messages.client import AgentAbortResult
from protocol.messages.common import Empty, InitializeParams, InitializeResult, PeerInfo
from protocol.messages.events import AnnouncedEvent
from protocol.messages.ops import (
    OpsEventParams,
    OpsForceParams,
    OpsForceResult,
    OpsRestartHostResult,
    OpsSessionParams,
    OpsSessionsResult,
    OpsStatsResult,
    OpsTailParams,
    OpsTailResult,
)
from protocol.methods import OPS_TO_RUNTIME, RUNTIME_TO_OPS
from protocol.version import PROTOCOL_VERSION, check_compatible
from runtime.daemon.ops.backend import OpsBackend
from runtime.link import ConnectionClosed, Endpoint, Handler, effect_taken

log = logging.getLogger(__name__)

SERVER_NAME = "quiesce"
SERVER_VERSION = "0.1.0"
# Events a tail may have queued but not yet written before it skips (and counts) more:
# a stalled operator terminal must not grow the daemon's memory.
MAX_TAIL_LAG = 1000
MAX_OPS_FRAME = 64 * 1024
"""The longest line an operator may send (an ops request is a few hundred bytes): a
connection holds at most this much of an unfinished line (8 MiB each, the general frame
limit, before this bound)."""
MAX_OPS_QUEUED = 16 * 1024 * 1024
"""Output one operator connection may leave unread (see ``Endpoint``'s ``max_queued``)."""
HANDSHAKE_TIMEOUT = 10.0
"""A connection that has not sent ``initialize`` by then is closed: an idle or hostile
one cannot keep a place among the server's ``MAX_OPS_CONNECTIONS``."""


class OpsConnection:
    def __init__(self, name: str, backend: OpsBackend, stream: trio.abc.Stream, *,
                 data_dir: pathlib.Path | None = None,
                 max_tail_lag: int = MAX_TAIL_LAG,
                 handshake_timeout: float = HANDSHAKE_TIMEOUT) -> None:
        self.backend = backend
        self.endpoint = Endpoint(name, stream, stream, incoming=OPS_TO_RUNTIME,
                                 outgoing=RUNTIME_TO_OPS, handlers=self.handlers,
                                 max_read_frame_size=MAX_OPS_FRAME,
                                 max_queued=MAX_OPS_QUEUED)
        self._handshake_timeout = handshake_timeout
        self._data_dir = data_dir
        self._max_tail_lag = max_tail_lag
        self._initialized = False
        self._notified = 0  # ops.event notifications queued on this connection

    @property
    def handlers(self) -> dict[str, Handler]:
        return {
            "initialize": self.initialize,
            "ops.sessions": self.sessions,
            "ops.abort": self.abort,
            "ops.force": self.force,
            "ops.restartHost": self.restart_host,
            "ops.stats": self.stats,
            "ops.tail": self.tail,
        }

    async def run(self) -> None:
        """Serve the connection; end it if it sends no ``initialize`` in time."""
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self._handshake_deadline, nursery.cancel_scope)
            await self.endpoint.run()
            nursery.cancel_scope.cancel()

    async def _handshake_deadline(self, scope: trio.CancelScope) -> None:
        await trio.sleep(self._handshake_timeout)
        if not self._initialized:
            log.warning("%s: no initialize within %g s; connection closed",
                        self.endpoint.name, self._handshake_timeout)
            scope.cancel()

    def _require_initialized(self) -> None:
        if not self._initialized:
            raise RpcError(ErrorCode.NOT_INITIALIZED, "send initialize first")

    async def initialize(self, params: InitializeParams) -> InitializeResult:
        check_compatible(params.protocol_version)
        self._initialized = True
        capabilities: dict[str, object] = {"pid": os.getpid()}
        if self._data_dir is not None:
            capabilities["dataDir"] = str(self._data_dir)
        return InitializeResult(PROTOCOL_VERSION, PeerInfo(SERVER_NAME, SERVER_VERSION),
                                capabilities)

    async def sessions(self, params: Empty) -> OpsSessionsResult:
        self._require_initialized()
        return await self.backend.ops_sessions()

    async def abort(self, params: OpsSessionParams) -> AgentAbortResult:
        self._require_initialized()
        log.info("ops: operator stop of session %s", params.session_id)
        return await self.backend.ops_abort(params.session_id)

    async def force(self, params: OpsForceParams) -> OpsForceResult:
        self._require_initialized()
        log.warning("ops: operator forces call %s of session %s", params.call_id,
                    params.session_id)
        return await self.backend.ops_force(params.session_id, params.call_id)

    async def restart_host(self, params: Empty) -> OpsRestartHostResult:
        self._require_initialized()
        log.warning("ops: operator restarts the host")
        effect_taken()  # the old host's stop and the new one's start are waits
        return await self.backend.ops_restart_host()

    async def stats(self, params: Empty) -> OpsStatsResult:
        self._require_initialized()
        return await self.backend.ops_stats()

    async def tail(self, params: OpsTailParams) -> OpsTailResult:
        """Forward events until the client closes its sending side (or we are cancelled)."""
        self._require_initialized()
        tail = _Tail(self, params.session_id)
        remove = self.backend.add_event_listener(tail.on_event)
        effect_taken()  # listening: forwarding until the client closes follows
        try:
            await self.endpoint.closed.wait()
        finally:
            remove()
        return OpsTailResult(tail.events, tail.dropped)

    def send_event(self, params: OpsEventParams) -> bool | None:
        """Queue one ``ops.event``: True if queued, False if the reader is too far behind
        (skipped), None if the connection is gone. Never blocks, never raises."""
        if self.endpoint.closed.is_set():
            return None
        # Every ops.event queued minus every frame written; frames_out also counts the
        # (few) responses of this connection, so the lag may be underestimated by as many.
        if self._notified - self.endpoint.frames_out >= self._max_tail_lag:
            return False
        try:
            self.endpoint.notify("ops.event", params)
        except (ConnectionClosed, trio.BrokenResourceError, trio.ClosedResourceError):
            return None  # torn down (cancelled) before closed was set
        self._notified += 1
        return True


class _Tail:
    """The event listener of one ``ops.tail``: filter, bound, forward, count."""

    def __init__(self, conn: OpsConnection, session_id: str | None) -> None:
        self._conn = conn
        self._session_id = session_id
        self._skipped = 0  # since the last event sent
        self._gone = False
        self.events = 0
        self.dropped = 0

    def on_event(self, session_id: str, event: AnnouncedEvent) -> None:
        # Runs synchronously in the daemon's announcing task: it must not block or raise.
        if self._gone or (self._session_id is not None and session_id != self._session_id):
            return
        sent = self._conn.send_event(OpsEventParams(session_id, event, self._skipped))
        if sent is None:
            self._gone = True
        elif sent:
            self.events += 1
            self._skipped = 0
        else:
            self.dropped += 1
            self._skipped += 1
