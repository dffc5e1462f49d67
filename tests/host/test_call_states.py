"""The host's call lifecycle is a table: only its transitions move ``Call.state``."""

from __future__ import annotations

import pytest

from host.calls import TABLE, Call, CallEvent, CallTable, InvalidTransition
from protocol.toolclass import ToolClass


def test_a_call_asked_for_permission_walks_the_table_to_settled() -> None:
    table = CallTable()
    call = Call("s", "t1.c1", "Bash", ToolClass.PROCESS)
    assert table.register(call) and call.state == "admission"
    assert call.fire(CallEvent.ASK_PERMISSION) == "permission-pending"
    assert call.phase == "permission-pending"
    assert call.fire(CallEvent.ADMIT) == "admission"
    assert call.fire(CallEvent.START_BODY) == "running"
    table.settle(call)
    assert call.state == "settled" and call.phase is None and len(table) == 0


WALK_TO = {"admission": (), "permission-pending": (CallEvent.ASK_PERMISSION,),
           "running": (CallEvent.START_BODY,)}


@pytest.mark.parametrize("state", sorted(WALK_TO))
def test_every_state_in_flight_can_settle(state: str) -> None:
    table = CallTable()
    call = Call("s", "t1.c1", "Bash", ToolClass.PROCESS)
    assert table.register(call)
    for event in WALK_TO[state]:
        call.fire(event)
    assert call.state == state
    assert call.fire(CallEvent.SETTLE) == "settled" and call.state == "settled"
    assert TABLE.moves[(state, CallEvent.SETTLE)] == "settled"  # type: ignore[index]


def test_moves_outside_the_table_are_refused() -> None:
    call = Call("s", "c", "Read", ToolClass.READ_ONLY)
    with pytest.raises(InvalidTransition):
        call.fire(CallEvent.ADMIT) and call.fire(CallEvent.START_BODY) and call.fire(
            CallEvent.ASK_PERMISSION)  # a running call is never asked again
    assert call.state == "running"
    call.fire(CallEvent.SETTLE)
    for event in CallEvent:
        with pytest.raises(InvalidTransition):
            call.fire(event)  # settled is final
    assert call.state == "settled"


def test_a_stop_is_not_a_state_but_records_the_one_it_found() -> None:
    from protocol.causes import UserCause

    call = Call("s", "c", "Bash", ToolClass.PROCESS)
    call.fire(CallEvent.ASK_PERMISSION)
    call.request_stop(UserCause())
    assert call.state == "permission-pending" and call.stopped_in == "permission-pending"
    assert call.cause == UserCause()


def test_the_start_body_move_is_the_record_that_the_body_was_called() -> None:
    call = Call("s", "c", "Bash", ToolClass.PROCESS)
    call.fire(CallEvent.ADMIT)
    assert not call.body_invoked
    call.fire(CallEvent.START_BODY)
    call.fire(CallEvent.SETTLE)
    assert call.body_invoked and call.state == "settled"
