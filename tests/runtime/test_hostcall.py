"""The runtime's host call as a state table: only its moves happen (any other raises
``InvalidTransition``), and only a running call takes the abort, so a call has one
``tools.abort`` sender."""

from __future__ import annotations

import pytest

from protocol.statetable import InvalidTransition
from protocol.toolclass import ToolClass
from runtime.agent.hostcall import TABLE, HostCall, HostCallEvent, HostCallState

S, E = HostCallState, HostCallEvent


def call() -> HostCall:
    return HostCall("c1", "t1.c1", "Bash", ToolClass.PROCESS)


def test_the_abort_moves_a_call_once() -> None:
    c = call()
    assert c.fire(E.ABORT) and c.state is S.ABORTING and c.stopped
    assert not TABLE.allows(c.state, E.ABORT)  # a second stop: no second sender
    assert c.fire(E.ABORT_DONE) and c.state is S.DRAINING
    assert not TABLE.allows(c.state, E.ABORT)
    assert c.fire(E.ABANDON) and c.abandoned
    assert not c.fire(E.ABORT_DONE) and c.state is S.ABANDONED  # its answer comes late


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
