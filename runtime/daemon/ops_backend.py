"""The daemon as operators see it: the ``OpsBackend`` behind ``quiesce ops``.

A call's state comes from three places: a step's calls the scheduler has not started are
``queued`` (``plan_step``); calls sent to the host are ``running``, ``aborting`` or
``draining`` as their ``HostTools`` sees them; and the live host's ``host.stats`` says
which of those it still holds before their bodies: one waiting in its admission queue is
``queued`` too, one whose permission prompt is open ``permission-pending``. The host is
asked only if it is alive (never started for it) and for at most ``HOST_ANSWER_LIMIT``;
without its answer the runtime's own view is shown.
"""

from __future__ import annotations

import math
import os
import time
from collections import deque
from collections.abc import Callable

import trio

from protocol.errors import ErrorCode, RpcError
from protocol.messages.client import AgentAbortResult
from protocol.messages.common import Empty
from protocol.messages.events import AnnouncedEvent, ToolCallEvent, TurnEnd
from protocol.messages.host import (
    CallPhase,
    HostStatsResult,
    ToolsForceParams,
    ToolsForceResult,
)
from protocol.messages.ops import (
    OpsCall,
    OpsCallState,
    OpsForceResult,
    OpsRestartHostResult,
    OpsSession,
    OpsSessionsResult,
    OpsStatsResult,
    OpsUnreadableLog,
)
from runtime.agent.hostcall import HostCallState
from runtime.agent.phase import PhaseKind
from runtime.agent.registry import OperatorCause
from runtime.daemon.percentiles import percentile
from runtime.daemon.permission_relay import PermissionRelay
from runtime.daemon.sessions.listing import LogListing
from runtime.daemon.sessions.store import SessionStore
from runtime.supervision.failures import HostError
from runtime.supervision.supervisor import HostSupervisor

EventListener = Callable[[str, AnnouncedEvent], None]

# How long ops.sessions waits for the host's answer before it shows the runtime's own view
# (a hung host is the liveness ping's business; a listing must not hang with it).
HOST_ANSWER_LIMIT = 1.0


_SHOWN: dict[HostCallState, OpsCallState] = {
    HostCallState.RUNNING: "running", HostCallState.ABORTING: "aborting",
    HostCallState.DRAINING: "draining", HostCallState.ABANDONED: "draining"}


def shown_state(runtime_state: HostCallState, host_state: CallPhase | None,
                permission_pending: bool) -> OpsCallState:
    """What ``ops.sessions`` shows of a call sent to the host: the runtime's state
    (running, aborting, draining), unless the runtime thinks it running and the host
    holds it before its body: waiting for admission (``queued``) or for the user."""
    if runtime_state is not HostCallState.RUNNING:
        return _SHOWN[runtime_state]
    if host_state == "permission-pending" or permission_pending:
        return "permission-pending"
    if host_state == "admission":
        return "queued"
    return "running"


class DaemonOps:
    """``sessions``: the loaded sessions; ``listing``: the logs not loaded (the unreadable
    ones are shown); ``host``: the host supervisor (asked for ``host.stats``,
    ``tools.force``, a restart); ``permissions``: the prompts open."""

    def __init__(self, sessions: SessionStore, listing: LogListing, host: HostSupervisor,
                 permissions: PermissionRelay) -> None:
        self._sessions = sessions
        self._listing = listing
        self._host = host
        self._permissions = permissions
        self._listeners: list[EventListener] = []
        self._started = time.monotonic()
        self.host_answer_limit = HOST_ANSWER_LIMIT
        self.stop_latencies_ms: deque[float] = deque(maxlen=1000)
        self.stops = 0

    # -- fed by the daemon (each session's calls are its own ``Session.ops``) -----------

    def record_stop(self, settled_ms: float) -> None:
        """A stop that settled (``Session.on_stop``): asked by a client, an operator, a
        close or the shutdown, counted once however many aborts joined it."""
        self.stops += 1
        self.stop_latencies_ms.append(settled_ms)

    def announce(self, session_id: str, event: AnnouncedEvent) -> None:
        if isinstance(event, ToolCallEvent | TurnEnd):
            session = self._sessions.find(session_id)
            if session is not None:
                session.ops.unplan(event)
        for listener in list(self._listeners):
            listener(session_id, event)

    # -- OpsBackend -------------------------------------------------------------------

    def add_event_listener(self, listener: EventListener) -> Callable[[], None]:
        self._listeners.append(listener)

        def remove() -> None:
            if listener in self._listeners:
                self._listeners.remove(listener)

        return remove

    async def ops_sessions(self) -> OpsSessionsResult:
        stats = await self._host_stats(self.host_answer_limit)
        host_states: dict[tuple[str, str], CallPhase] = {
            (c.session_id, c.call_id): c.state for c in stats.calls} if stats else {}
        pending = self._permissions.pending_calls()
        now = time.monotonic()
        out = []
        for session in self._sessions.all():
            agent = session.agent
            current = agent.current_turn
            calls = []
            for tools in session.ops.tools():
                for call in tools.in_flight():
                    shown = shown_state(call.state, host_states.get(
                        (session.session_id, call.host_call_id)),
                        call.host_call_id in pending)
                    calls.append(OpsCall(call.call_id, call.tool, call.tool_class.value, shown,
                                         round(call.age, 3)))
            calls += session.ops.queued(now) + session.ops.hooks(now)
            waiting = current[2] if current else None
            out.append(OpsSession(
                session.session_id, session.workspace,
                agent.machine.phase.kind.value,
                current[0] if current else None,
                round(current[1], 3) if current else None,
                round(waiting, 3) if waiting is not None else None,
                waiting is not None and waiting > agent.stuck_after,
                len(agent.inbox), tuple(calls), agent.usage))
        # The scan session.list uses (off the event loop, shared by listings at once).
        broken = [i for i in (await self._listing.scan_disk()).found if i.error is not None]
        return OpsSessionsResult(os.getpid(), tuple(out), tuple(
            OpsUnreadableLog(i.session_id, i.error or "", str(self._listing.dir /
                                                              f"{i.session_id}.jsonl"),
                             i.workspace) for i in broken))

    async def _host_stats(self, limit: float = math.inf) -> HostStatsResult | None:
        """The live host's ``host.stats``, or None: no live host (none is started for
        it), a link that closed, or no answer within ``limit`` (without one, a hung host
        is bounded by the liveness ping, which kills it)."""
        with trio.move_on_after(limit):
            try:
                stats: HostStatsResult = await self._host.request_if_alive(
                    "host.stats", Empty())
            except HostError:  # no live host included
                return None
            return stats
        return None

    async def ops_abort(self, session_id: str, *,
                        task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
                        ) -> AgentAbortResult:
        return await self._sessions.get(session_id).agent.cancel(
            OperatorCause(), task_status=task_status)

    async def ops_force(self, session_id: str, call_id: str) -> OpsForceResult:
        for tools in self._sessions.get(session_id).ops.tools():
            call = tools.find(call_id)
            if call is None:
                continue
            try:
                answer: ToolsForceResult = await self._host.request(
                    "tools.force", ToolsForceParams(session_id, call.host_call_id, call.tool))
            except HostError as exc:
                return OpsForceResult(False, f"the host could not force it: {exc}")
            return OpsForceResult(answer.forced, answer.detail)
        raise RpcError(ErrorCode.NOT_FOUND, f"no call {call_id!r} waiting on the host in "
                                            f"session {session_id}")

    async def ops_restart_host(self) -> OpsRestartHostResult:
        old, new = await self._host.restart()
        return OpsRestartHostResult(old, new)

    async def ops_stats(self) -> OpsStatsResult:
        host = self._host
        stats = await self._host_stats()
        latencies = list(self.stop_latencies_ms)
        now = time.monotonic()
        settling = [(since, s.agent.stuck_after) for s in self._sessions.all()
                    if (since := s.agent.stopping_since) is not None]
        return OpsStatsResult(
            os.getpid(), round(time.monotonic() - self._started, 3),
            len(self._sessions.all()),
            sum(s.agent.turns for s in self._sessions.all()), self.stops,
            round(percentile(latencies, 50), 3) if latencies else None,
            round(percentile(latencies, 90), 3) if latencies else None,
            round(max(latencies), 3) if latencies else None,
            host.pid, host.restarts, host.crashes,
            stats.tombstones if stats else 0, stats.calls_in_flight if stats else 0,
            process_isolation=stats.process_isolation if stats else None,
            sandbox=stats.sandbox if stats else None,
            call_limits=stats.call_limits if stats else {},
            turns_running=sum(1 for s in self._sessions.all()
                              if s.agent.machine.phase.kind is PhaseKind.RUNNING),
            stops_settling=len(settling),
            stops_stuck=sum(1 for since, limit in settling if now - since >= limit))
