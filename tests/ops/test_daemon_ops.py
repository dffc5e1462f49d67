"""``DaemonOps``: the state ``ops.sessions`` lists of each call: planned calls the scheduler
has not started, and calls sent to the host as the host itself sees them."""

from __future__ import annotations

import pathlib
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any, cast

import msgspec
import pytest
import trio

from protocol.messages.events import ToolCallEvent, TurnEnd, TurnOutcome
from protocol.messages.host import HostCallInfo, HostStatsResult
from protocol.toolclass import ToolClass
from runtime.agent.hostcall import HostCallState, InFlightCall
from runtime.daemon.ops_backend import DaemonOps, shown_state
from runtime.daemon.sessions.listing import DiskScan
from runtime.daemon.sessions.ops_view import SessionOpsView
from runtime.supervision.failures import HostLost, HostNotReached


@dataclass
class FakeHost:
    """``request_if_alive`` of the host supervisor: answers ``host.stats`` with ``calls``,
    or raises ``fails``, or never answers (``hangs``)."""

    calls: tuple[HostCallInfo, ...] = ()
    fails: Exception | None = None
    hangs: bool = False
    asked: list[str] = field(default_factory=list)

    async def request_if_alive(self, method: str, params: msgspec.Struct) -> Any:
        self.asked.append(method)
        if self.fails is not None:
            raise self.fails
        if self.hangs:
            await trio.sleep_forever()
        return HostStatsResult(len(self.calls), 0, 0, 0, 0, 0, self.calls)


@dataclass
class FakeTools:
    """``HostTools.in_flight``: the calls waiting on the host."""

    calls: list[InFlightCall]

    def in_flight(self) -> list[InFlightCall]:
        return self.calls


def make_ops(host: FakeHost | None = None, pending: frozenset[str] = frozenset()) -> DaemonOps:
    """A ``DaemonOps`` on fakes of its three collaborators: one session, running."""
    agent = SimpleNamespace(machine=SimpleNamespace(phase=SimpleNamespace(
        kind=SimpleNamespace(value="running"))), current_turn=("t1", 1.0, None),
        stuck_after=30.0, inbox=(), usage=None)
    session = SimpleNamespace(session_id="s-1", workspace="/w", agent=agent,
                              ops=SessionOpsView())
    async def scan_disk() -> DiskScan:
        return DiskScan([], [])

    sessions = SimpleNamespace(all=lambda: [session],
                               find=lambda sid: session if sid == "s-1" else None,
                               get=lambda sid: session)
    listing = SimpleNamespace(scan_disk=scan_disk, dir=pathlib.Path("/data/sessions"))
    return DaemonOps(cast(Any, sessions), cast(Any, listing), cast(Any, host or FakeHost(
        fails=HostNotReached("no live host"))),
        cast(Any, SimpleNamespace(pending_calls=lambda: pending)))


def the_session(ops: DaemonOps) -> SessionOpsView:
    """The ops view of the one session of ``make_ops``."""
    view: SessionOpsView = ops._sessions.get("s-1").ops  # type: ignore[attr-defined]
    return view


async def states(ops: DaemonOps) -> dict[str, tuple[str, str, str]]:
    (session,) = (await ops.ops_sessions()).sessions
    return {c.call_id: (c.tool, c.tool_class, c.state) for c in session.calls}


async def test_planned_calls_are_queued_until_started_or_the_turn_ends() -> None:
    ops = make_ops()
    the_session(ops).plan_step("t1", [("w1", "Write", "mutating"), ("b1", "Bash", "process")])
    assert await states(ops) == {"w1": ("Write", "mutating", "queued"),
                                 "b1": ("Bash", "process", "queued")}
    # Recorded means started: no longer queued (the host tools list it from here).
    ops.announce("s-1", ToolCallEvent(3, "t1", 0, "w1", "Write", "mutating", {}))
    assert await states(ops) == {"b1": ("Bash", "process", "queued")}
    # Another session's or turn's events change nothing.
    ops.announce("s-2", ToolCallEvent(4, "t1", 0, "b1", "Bash", "process", {}))
    ops.announce("s-1", TurnEnd(5, "t0", TurnOutcome("completed"), "end_turn"))
    assert await states(ops) == {"b1": ("Bash", "process", "queued")}
    # A stop's skipped calls get tool/call records too; the end of the turn clears the rest.
    ops.announce("s-1", TurnEnd(6, "t1", TurnOutcome("aborted"), "cancelled"))
    assert await states(ops) == {}


RUNNING, ABORTING = HostCallState.RUNNING, HostCallState.ABORTING
SENT = [InFlightCall("b1", "t1.b1", "Bash", ToolClass.PROCESS, RUNNING, 2.0),
        InFlightCall("b2", "t1.b2", "Bash", ToolClass.PROCESS, RUNNING, 1.0),
        InFlightCall("w1", "t1.w1", "Write", ToolClass.MUTATING, RUNNING, 1.0),
        InFlightCall("r1", "t1.r1", "Read", ToolClass.READ_ONLY, ABORTING, 0.5),
        InFlightCall("g1", "t1.g1", "Grep", ToolClass.READ_ONLY, RUNNING, 0.1)]


async def test_calls_the_host_holds_before_their_bodies_are_shown_so() -> None:
    host = FakeHost(calls=(
        HostCallInfo("s-1", "t1.b1", "running"),
        HostCallInfo("s-1", "t1.b2", "admission"),  # waits for a process slot
        HostCallInfo("s-1", "t1.w1", "permission-pending"),
        HostCallInfo("s-1", "t1.r1", "admission"),  # aborting already: the runtime's state
        HostCallInfo("s-2", "t1.g1", "admission")))  # another session's call of that id
    ops = make_ops(host)
    the_session(ops).track_tools("t1", cast(Any, FakeTools(SENT)))
    assert await states(ops) == {"b1": ("Bash", "process", "running"),
                                 "b2": ("Bash", "process", "queued"),
                                 "w1": ("Write", "mutating", "permission-pending"),
                                 "r1": ("Read", "read-only", "aborting"),
                                 "g1": ("Grep", "read-only", "running")}
    assert host.asked == ["host.stats"]


@pytest.mark.parametrize("host", [
    FakeHost(fails=HostNotReached("no live host")),  # none is started for a listing
    FakeHost(fails=HostLost("the host died")),
    FakeHost(hangs=True),
], ids=["absent", "died", "hung"])
async def test_without_the_hosts_answer_the_runtimes_view_is_shown(host: FakeHost) -> None:
    ops = make_ops(host, pending=frozenset({"t1.w1"}))
    ops.host_answer_limit = 0.05
    the_session(ops).track_tools("t1", cast(Any, FakeTools(SENT)))
    with trio.fail_after(5):
        shown = await states(ops)
    assert shown == {"b1": ("Bash", "process", "running"),
                     "b2": ("Bash", "process", "running"),
                     "w1": ("Write", "mutating", "permission-pending"),
                     "r1": ("Read", "read-only", "aborting"),
                     "g1": ("Grep", "read-only", "running")}


def test_the_state_mapping() -> None:
    assert shown_state(RUNNING, "admission", False) == "queued"
    assert shown_state(RUNNING, "permission-pending", False) == "permission-pending"
    assert shown_state(RUNNING, None, True) == "permission-pending"
    assert shown_state(RUNNING, "running", False) == "running"
    assert shown_state(RUNNING, None, False) == "running"
    # A stop reached it: what the runtime did about it is the news.
    assert shown_state(ABORTING, "admission", False) == "aborting"
    assert shown_state(HostCallState.DRAINING, "admission", False) == "draining"


async def test_stats_with_two_stops_puts_the_p90_above_the_median() -> None:
    host = FakeHost()
    host.pid, host.restarts, host.crashes = 1, 0, 0  # type: ignore[attr-defined]
    sessions = SimpleNamespace(all=list)
    ops = DaemonOps(cast(Any, sessions), cast(Any, None), cast(Any, host), cast(Any, None))
    ops.record_stop(36_911.2)
    ops.record_stop(35.8)
    stats = await ops.ops_stats()
    assert stats.stops == 2
    assert stats.stop_latency_ms_median == pytest.approx(18_473.5)
    assert stats.stop_latency_ms_median is not None and stats.stop_latency_ms_p90 is not None
    assert stats.stop_latency_ms_median <= stats.stop_latency_ms_p90 <= 36_911.2
    assert stats.stop_latency_ms_max == 36_911.2
