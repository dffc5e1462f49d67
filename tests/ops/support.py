"""A fake in-process daemon behind the ops socket."""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field

import trio

from protocol.causes import OperatorCause
from protocol.errors import ErrorCode, RpcError
from protocol.messages.client import AbortedCall, AgentAbortResult
from protocol.messages.events import AnnouncedEvent, ToolCallEvent, TurnStart
from protocol.messages.ops import (
    OpsCall,
    OpsForceResult,
    OpsRestartHostResult,
    OpsSession,
    OpsSessionsResult,
    OpsStatsResult,
)
from runtime.daemon.ops.backend import EventListener

STUCK = OpsSession("s-stuck", "/work/a", "running", turn_id="t-7", turn_age_s=95.0,
                   stop_waiting_s=64.0, stuck=True, inbox=1, calls=(
                       OpsCall("t-7.write-1", "Write", "mutating", "aborting", 63.5),
                       OpsCall("t-7.grep-2", "Grep", "read-only", "queued", 0.2)))
IDLE = OpsSession("s-idle", "/work/b", "idle")


@dataclass
class FakeBackend:
    """Implements ``OpsBackend`` with canned answers, recording what it was asked."""

    sessions: list[OpsSession] = field(default_factory=lambda: [STUCK, IDLE])
    listeners: list[EventListener] = field(default_factory=list)
    aborts: list[str] = field(default_factory=list)
    forced: list[tuple[str, str]] = field(default_factory=list)
    restarts: int = 0
    abort_gate: trio.Event | None = None  # set: ops_abort waits for it
    fail_stats: bool = False

    def _known(self, session_id: str) -> None:
        if session_id not in {s.session_id for s in self.sessions}:
            raise RpcError(ErrorCode.NOT_FOUND, f"unknown session {session_id}")

    async def ops_sessions(self) -> OpsSessionsResult:
        return OpsSessionsResult(os.getpid(), tuple(self.sessions))

    async def ops_abort(self, session_id: str, *,
                        task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
                        ) -> AgentAbortResult:
        self._known(session_id)
        self.aborts.append(session_id)
        if self.abort_gate is not None:
            await self.abort_gate.wait()
        if session_id == IDLE.session_id:
            return AgentAbortResult("idle")
        return AgentAbortResult("aborted", "t-7", OperatorCause(), 12.5, (
            AbortedCall("t-7.grep-2", "Grep", "read-only", "ABORTED_BEFORE_DISPATCH"),))

    async def ops_force(self, session_id: str, call_id: str) -> OpsForceResult:
        self._known(session_id)
        self.forced.append((session_id, call_id))
        if call_id != "t-7.write-1":
            return OpsForceResult(False, f"{call_id} is not stuck")
        return OpsForceResult(True, "host killed the operation; recorded ABORTED, forced")

    async def ops_restart_host(self) -> OpsRestartHostResult:
        self.restarts += 1
        return OpsRestartHostResult(4100, 4200)

    async def ops_stats(self) -> OpsStatsResult:
        if self.fail_stats:
            raise RuntimeError("stats broke")
        return OpsStatsResult(
            os.getpid(), uptime_s=125.0, sessions=2, turns=9, stops=4,
            stop_latency_ms_median=21.0, stop_latency_ms_p90=48.5,
            stop_latency_ms_max=64000.0, host_pid=4200, host_restarts=1, tombstones=3,
            calls_in_flight=2)

    def add_event_listener(self, listener: EventListener) -> Callable[[], None]:
        self.listeners.append(listener)
        return lambda: self.listeners.remove(listener)

    def emit(self, session_id: str, event: AnnouncedEvent) -> None:
        for listener in list(self.listeners):
            listener(session_id, event)

    async def wait_listeners(self, count: int, within: float = 5.0) -> None:
        with trio.fail_after(within):
            while len(self.listeners) != count:
                await trio.sleep(0.005)


def turn_start(seq: int, turn: str = "t-7") -> TurnStart:
    return TurnStart(seq, turn)


def tool_call(seq: int, call: str = "t-7.write-1") -> ToolCallEvent:
    return ToolCallEvent(seq, "t-7", 1, call, "Write", "mutating", {"path": "a.txt"})
