"""Logs written before the one cause type (issue 17) still load, and say the same.

``tests/fixtures/log_before_issue17.jsonl`` was written by the daemon as it was before
``protocol.causes`` (a scripted session: Bash stopped by a hook, a Read turn that
completed, Bash stopped by the user, by an operator, and by ``session.close``)."""

from __future__ import annotations

import pathlib

import msgspec

from protocol.causes import (
    Cause,
    DisposedCause,
    HookCause,
    OperatorCause,
    TimeoutCause,
    UserCause,
)
from protocol.messages.events import DurableEvent, ToolResultEvent, TurnEnd, TurnOutcome
from protocol.messages.host import ToolsAbortParams
from runtime.agent.sessionlog import read_log

FIXTURE = pathlib.Path(__file__).parent.parent / "fixtures" / "log_before_issue17.jsonl"


def test_a_log_written_before_the_one_cause_type_loads_whole() -> None:
    contents = read_log(FIXTURE)
    assert contents.torn_bytes == 0
    assert contents.meta.session_id == "s-404776d2b6ce"
    assert contents.open_turns() == []
    ends = [(e.turn_id, e.end) for e in contents.events if isinstance(e, TurnEnd)]
    assert ends == [
        ("t1", TurnOutcome("aborted", HookCause("lint"))),
        ("t2", TurnOutcome("completed")),
        ("t3", TurnOutcome("aborted", UserCause())),
        ("t4", TurnOutcome("aborted", OperatorCause())),
        ("t5", TurnOutcome("aborted", DisposedCause())),
    ]
    codes = [(e.call_id, e.code) for e in contents.events if isinstance(e, ToolResultEvent)]
    assert codes == [("b1", "ABORTED"), ("r1", None), ("b2", "ABORTED"), ("b3", "ABORTED"),
                     ("b4", "ABORTED")]


def test_every_old_line_encodes_back_byte_for_byte() -> None:
    """The causes an old log holds have the same shape in the new type."""
    decoder = msgspec.json.Decoder(DurableEvent)
    for line in FIXTURE.read_bytes().splitlines():
        assert msgspec.json.encode(decoder.decode(line)) == line


def test_an_old_timeout_stop_loads_as_the_hook_cause_it_recorded() -> None:
    # Before issue 17 a timeout's turn/end was written as a hook cause named "timeout".
    old = (b'{"kind":"turn/end","seq":5,"turnId":"t1","end":{"kind":"aborted","reason":'
           b'{"kind":"hook","reason":"timeout"}},"stopReason":"cancelled"}')
    end = msgspec.json.decode(old, type=DurableEvent)
    assert isinstance(end, TurnEnd) and end.end.reason == HookCause("timeout")


def test_timeout_is_its_own_kind_on_the_log_and_the_host_link() -> None:
    """``timeout`` is decided once: the same Struct on ``turn/end`` and ``tools.abort``."""
    cause: Cause = TimeoutCause(2.5)
    end = TurnEnd(5, "t1", TurnOutcome("aborted", cause), "cancelled")
    assert b'"reason":{"kind":"timeout","seconds":2.5}' in msgspec.json.encode(end)
    abort = msgspec.json.encode(ToolsAbortParams("s", "t1.c", "Bash", cause))
    assert b'"cause":{"kind":"timeout","seconds":2.5}' in abort
    assert msgspec.json.decode(abort, type=ToolsAbortParams).cause == cause
