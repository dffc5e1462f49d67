"""The transcript rulebook: its reading of a log, its rules, and the repair of a cut log.

The property tests write logs as the agent does (turns, steps of calls and results, a
subagent's turn inside its parent's ``Task`` call, a compaction at a step boundary or
between turns), cut them anywhere (the crash), and check that the repair closes every cut
log into one that keeps every rule, and needs no second repair."""

from __future__ import annotations

from collections.abc import Callable

import msgspec
from hypothesis import given, settings
from hypothesis import strategies as st

from protocol.messages.events import (
    DurableEvent,
    HistoryCompacted,
    MaintenanceEnd,
    MaintenanceStart,
    SessionMeta,
    TokenUsage,
    ToolCallEvent,
    ToolResultEvent,
    TurnEnd,
    TurnOutcome,
    TurnStart,
)
from protocol.tools import ABORTED_TEXT, TextContent
from protocol.transcript import (
    INTERRUPTED,
    Transcript,
    balance_problems,
    repair_problems,
)

META = SessionMeta(0, "", "s-1", "/w", "auto", 0.0)


class Writer:
    """Appends events numbered as the session log numbers them."""

    def __init__(self) -> None:
        self.events: list[DurableEvent] = [META]

    def add(self, make: Callable[[int], DurableEvent]) -> None:
        self.events.append(make(len(self.events)))

    def compaction(self, inside: str, compacted: bool) -> None:
        self.add(lambda seq: MaintenanceStart(seq, inside, "compact", "auto"))
        if compacted:
            self.add(lambda seq: HistoryCompacted(seq, inside, (), "sum", 10, 2, TokenUsage()))
        self.add(lambda seq: MaintenanceEnd(seq, inside, TurnOutcome("completed"), compacted))

    def turn(self, draw: st.DrawFn, turn_id: str, *, depth: int) -> None:
        self.add(lambda seq: TurnStart(seq, turn_id))
        for step in range(draw(st.integers(0, 3))):
            calls = [f"c{step}.{n}" for n in range(draw(st.integers(0, 3)))]
            for call in calls:
                self.add(lambda seq, c=call, s=step: ToolCallEvent(  # type: ignore[misc]
                    seq, turn_id, s, c, "Task" if depth == 0 else "Read", "read-only", {}))
            for call in draw(st.permutations(calls)):
                if depth == 0 and draw(st.booleans()):  # a subagent's turn in a Task call
                    self.turn(draw, f"{turn_id}~{call}", depth=depth + 1)
                self.add(lambda seq, c=call, s=step: ToolResultEvent(  # type: ignore[misc]
                    seq, turn_id, s, c, False, None, ()))
            if draw(st.integers(0, 4)) == 0:
                self.compaction(turn_id, draw(st.booleans()))
        self.add(lambda seq: TurnEnd(seq, turn_id, TurnOutcome("completed"), "end_turn"))


@st.composite
def whole_logs(draw: st.DrawFn) -> list[DurableEvent]:
    writer = Writer()
    for n in range(draw(st.integers(0, 3))):
        if draw(st.integers(0, 3)) == 0:
            writer.compaction("", draw(st.booleans()))
        writer.turn(draw, f"t{n}", depth=0)
    return writer.events


@st.composite
def cut_logs(draw: st.DrawFn) -> list[DurableEvent]:
    events = draw(whole_logs())
    return events[:draw(st.integers(1, len(events)))]


@settings(max_examples=300, deadline=None)
@given(whole_logs())
def test_a_whole_log_keeps_every_rule_and_needs_no_repair(events: list[DurableEvent]) -> None:
    transcript = Transcript(events)
    assert transcript.problems() == []
    assert transcript.repair() == ()
    assert transcript.open_turns() == [] and transcript.open_maintenance() is None


@settings(max_examples=300, deadline=None)
@given(cut_logs())
def test_the_repair_closes_every_cut_log(events: list[DurableEvent]) -> None:
    repair = Transcript(events).repair()
    repaired = [*events, *repair]
    assert Transcript(repaired).problems() == []
    assert Transcript(repaired).repair() == ()
    assert repair_problems(events, repaired) == []
    # The calls rule of a cut log holds in the turns that have ended.
    assert balance_problems(events, ended_only=True) == []


@settings(max_examples=200, deadline=None)
@given(cut_logs(), st.data())
def test_a_lost_or_doubled_event_breaks_a_rule(events: list[DurableEvent],
                                               data: st.DataObject) -> None:
    repaired = [*events, *Transcript(events).repair()]
    kinds = (TurnStart, TurnEnd, ToolCallEvent, ToolResultEvent)
    places = [i for i, e in enumerate(repaired) if isinstance(e, kinds)]
    if not places:
        return
    i = data.draw(st.sampled_from(places))
    lost = repaired[:i] + repaired[i + 1:]
    assert Transcript(lost).turn_problems() + Transcript(lost).call_problems()
    doubled = repaired[:i + 1] + repaired[i:]
    assert Transcript(doubled).turn_problems() + Transcript(doubled).call_problems()


def test_the_repair_of_a_cut_turn_with_a_subagent_and_a_compaction() -> None:
    """Byte for byte what the daemon has always appended: the compaction's end first, then
    the innermost turn's results and end, then its parent's."""
    events: list[DurableEvent] = [
        META, TurnStart(1, "t1"), ToolCallEvent(2, "t1", 0, "task", "Task", "read-only", {}),
        ToolCallEvent(3, "t1", 0, "r1", "Read", "read-only", {}),
        ToolResultEvent(4, "t1", 0, "r1", False, None, ()),
        TurnStart(5, "t1~task"), ToolCallEvent(6, "t1~task", 0, "g", "Grep", "read-only", {}),
        MaintenanceStart(7, "t1~task", "compact", "auto"),
        HistoryCompacted(8, "t1~task", (), "sum", 10, 2, TokenUsage()),
    ]
    transcript = Transcript(events)
    assert [t.turn_id for t in transcript.open_turns()] == ["t1", "t1~task"]
    assert [c.call_id for c in transcript.unanswered_calls("t1")] == ["task"]
    assert transcript.open_maintenance() == ("t1~task", True)
    encoded = [msgspec.json.encode(e).decode() for e in transcript.repair()]
    aborted = ('"isError":true,"code":"ABORTED","content":[{"type":"text","text":'
               + msgspec.json.encode(ABORTED_TEXT).decode() + '}],'
               '"details":{"recovered":"the runtime stopped mid-call"}')
    interrupted = ('"end":{"kind":"interrupted","error":"the runtime stopped before this '
                   'turn\'s end was recorded"},"stopReason":"error"')
    assert encoded == [
        '{"kind":"maintenance/end","seq":9,"turnId":"t1~task","end":{"kind":"interrupted"},'
        '"compacted":true}',
        '{"kind":"tool/result","seq":10,"turnId":"t1~task","step":0,"callId":"g",' + aborted + '}',
        '{"kind":"turn/end","seq":11,"turnId":"t1~task",' + interrupted + '}',
        '{"kind":"tool/result","seq":12,"turnId":"t1","step":0,"callId":"task",' + aborted + '}',
        '{"kind":"turn/end","seq":13,"turnId":"t1",' + interrupted + '}',
    ]
    assert transcript.repair()[1] == ToolResultEvent(
        10, "t1~task", 0, "g", True, "ABORTED", (TextContent(ABORTED_TEXT),),
        {"recovered": "the runtime stopped mid-call"})
    assert INTERRUPTED in encoded[2]


def test_a_compaction_between_turns_is_closed_in_the_maintenance_phase() -> None:
    events: list[DurableEvent] = [META, MaintenanceStart(1, "", "compact", "manual")]
    assert Transcript(events).repair() == (
        MaintenanceEnd(2, "", TurnOutcome("interrupted"), False),)


def test_the_rules_say_what_is_wrong() -> None:
    start, call = TurnStart(1, "t1"), ToolCallEvent(2, "t1", 0, "c1", "Read", "read-only", {})
    result = ToolResultEvent(3, "t1", 0, "c1", False, None, ())
    end = TurnEnd(4, "t1", TurnOutcome("completed"), "end_turn")
    assert Transcript([META, start, call, result, end]).problems() == []
    assert Transcript([META, start, call, end]).call_problems() == [
        "call ('t1', 0, 'c1'): 1 tool/call, 0 tool/result"]
    assert Transcript([META, start, call, result]).turn_problems() == [
        "turn t1: 1 turn/start, 0 turn/end"]
    late = ToolResultEvent(4, "t1", 0, "c1", False, None, ())
    assert Transcript([META, start, call, TurnEnd(3, "t1", end.end, "end_turn"), late]
                      ).after_end_problems() == ["ToolResultEvent seq 4 after the end of t1"]
    assert Transcript([META, start, call, result, TurnEnd(5, "t1", end.end, "end_turn")]
                      ).seq_problems() == ["seqs are not 0, 1, 2, …"]
    wrong_step = ToolResultEvent(3, "t1", 1, "c1", False, None, ())
    assert len(Transcript([META, start, call, wrong_step, end]).call_problems()) == 2
    # A turn still running may wait on a call: only the ended turns' calls count then.
    assert balance_problems([META, start, call], ended_only=True) == []
    assert balance_problems([META, start, call]) != []
