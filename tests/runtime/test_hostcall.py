"""The runtime's host call as a state table: only its moves happen (any other raises
``InvalidTransition``), and only a running call takes the abort, so a call has one
``tools.abort`` sender, started by the stop itself, in the task that aborts the signal."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, cast

import pytest

from protocol.statetable import InvalidTransition
from protocol.toolclass import ToolClass
from runtime.agent.hostcall import TABLE, CallContext, HostCall, HostCallEvent, HostCallState
from runtime.agent.registry import UserCause

S, E = HostCallState, HostCallEvent


class _Lease:
    """Only what a stop needs: where its abort's sender is started (not run here)."""

    def __init__(self) -> None:
        self.started: list[Callable[[], Awaitable[None]]] = []

    def start_soon(self, fn: Callable[[], Awaitable[None]]) -> None:
        self.started.append(fn)


def call(lease: _Lease | None = None, changes: list[str] | None = None) -> HostCall:
    context = CallContext(cast(Any, lease or _Lease()), "s-1",
                          on_changed=lambda: changes.append("changed") if changes is not None
                          else None)
    return HostCall(context, "c1", "t1.c1", "Bash", ToolClass.PROCESS)


def test_the_abort_moves_a_call_once() -> None:
    c = call()
    assert c.fire(E.ABORT) and c.state is S.ABORTING and c.stopped
    assert not TABLE.allows(c.state, E.ABORT)  # a second stop: no second sender
    assert c.fire(E.ABORT_DONE) and c.state is S.DRAINING
    assert not TABLE.allows(c.state, E.ABORT)
    assert c.fire(E.ABANDON) and c.abandoned
    assert not c.fire(E.ABORT_DONE) and c.state is S.ABANDONED  # its answer comes late


def test_a_stop_starts_one_abort_sender_however_often_it_comes() -> None:
    lease, changes = _Lease(), []
    c = call(lease, changes)
    c.stop(UserCause())
    c.stop(UserCause())
    assert c.state is S.ABORTING and len(lease.started) == 1 and changes == ["changed"]


@pytest.mark.parametrize(("state", "event"), [
    (s, e) for s in S for e in E if (s, e) not in TABLE.moves])
def test_a_transition_not_in_the_table_raises_and_changes_nothing(
        state: HostCallState, event: HostCallEvent) -> None:
    c = call()
    c.state = state
    with pytest.raises(InvalidTransition):
        c.fire(event)
    assert c.state is state


def test_a_record_of_a_call_in_flight() -> None:
    c = call()
    c.fire(E.ABORT)
    view = c.view(c.started_at + 2.5)
    assert (view.call_id, view.host_call_id, view.tool, view.state, view.age) == (
        "c1", "t1.c1", "Bash", S.ABORTING, 2.5)
