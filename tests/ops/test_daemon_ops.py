"""``DaemonOps``: what ``ops.sessions`` lists of a step's calls the scheduler has not started."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any, cast

from protocol.messages.events import ToolCallEvent, TurnEnd, TurnOutcome
from runtime.daemon_ops import DaemonOps


def fake_daemon() -> Any:
    agent = SimpleNamespace(machine=SimpleNamespace(phase=SimpleNamespace(
        kind=SimpleNamespace(value="running"))), current_turn=("t1", 1.0, None),
        stuck_after=30.0, inbox=())
    session = SimpleNamespace(session_id="s-1", workspace="/w", agent=agent)
    return SimpleNamespace(permissions=SimpleNamespace(pending_calls=lambda: set()),
                           sessions=SimpleNamespace(all=lambda: [session]))


def states(ops: DaemonOps) -> dict[str, tuple[str, str, str]]:
    (session,) = ops.ops_sessions().sessions
    return {c.call_id: (c.tool, c.tool_class, c.state) for c in session.calls}


def test_planned_calls_are_queued_until_started_or_the_turn_ends() -> None:
    ops = DaemonOps(cast(Any, fake_daemon()))
    ops.plan_step("s-1", "t1", [("w1", "Write", "mutating"), ("b1", "Bash", "process")])
    assert states(ops) == {"w1": ("Write", "mutating", "queued"),
                           "b1": ("Bash", "process", "queued")}
    # Recorded means started: no longer queued (the host tools list it from here).
    ops.announce("s-1", ToolCallEvent(3, "t1", 0, "w1", "Write", "mutating", {}))
    assert states(ops) == {"b1": ("Bash", "process", "queued")}
    # Another session's or turn's events change nothing.
    ops.announce("s-2", ToolCallEvent(4, "t1", 0, "b1", "Bash", "process", {}))
    ops.announce("s-1", TurnEnd(5, "t0", TurnOutcome("completed"), "end_turn"))
    assert states(ops) == {"b1": ("Bash", "process", "queued")}
    # A stop's skipped calls get tool/call records too; the end of the turn clears the rest.
    ops.announce("s-1", TurnEnd(6, "t1", TurnOutcome("aborted"), "cancelled"))
    assert states(ops) == {}


def test_a_forgotten_session_lists_no_planned_call() -> None:
    ops = DaemonOps(cast(Any, fake_daemon()))
    ops.plan_step("s-1", "t1", [("g1", "Grep", "read-only")])
    ops.forget_session("s-1")
    assert states(ops) == {}
