"""The human-readable lines of ``quiesce ops``: every event kind, durations, tables."""

from __future__ import annotations

import typing

from protocol.causes import UserCause
from protocol.messages.events import (
    AnnouncedEvent,
    AssistantDeltaEvent,
    AssistantMessageEvent,
    Block,
    HistoryCompacted,
    HookDecisionEvent,
    MaintenanceEnd,
    MaintenanceStart,
    ModelUsageEvent,
    SessionMeta,
    StopWaitingEvent,
    TokenUsage,
    ToolAbortEvent,
    ToolProgressEvent,
    ToolResultEvent,
    ToolStartedEvent,
    TurnEnd,
    TurnOutcome,
    UserMessageEvent,
    WaitingCall,
)
from protocol.messages.ops import OpsEventParams
from runtime.clients.ops.render import duration, event_line, event_summary, table
from tests.ops.support import tool_call, turn_start


def test_durations() -> None:
    assert [duration(x) for x in (None, 0.0123, 4.25, 125.0, 7322.0)] == [
        "-", "12ms", "4.2s", "2m05s", "2h02m"]


def test_table_aligns_columns() -> None:
    assert table(["A", "BB"], [["xxx", "y"], ["z", ""]]).splitlines() == [
        "A    BB", "xxx  y", "z"]


def test_every_event_kind_has_a_summary() -> None:
    long = "word " * 40
    assert event_summary(SessionMeta(0, "", "s-1", "/w", "ask", 0.0)) == "workspace /w"
    assert event_summary(turn_start(1)) == ""
    assert event_summary(UserMessageEvent(2, "t-1", long)).endswith("…'")
    assert event_summary(AssistantMessageEvent(
        3, "t-1", 1, (Block("reasoning", "hmm"), Block("text", "Hello")), interrupted=True)
    ) == "step 1 INTERRUPTED 'Hello'"
    assert event_summary(tool_call(4)) == "t-7.write-1 Write (mutating)"
    assert event_summary(ToolProgressEvent(5, "t-7", "c", "stdout", "a\nb")) == "c stdout: 'a b'"
    assert event_summary(ToolAbortEvent(6, "t-7", "c", "Bash", "running", True)) == (
        "c Bash: host running, body invoked")
    assert event_summary(AssistantDeltaEvent(7, "t-7", 2, "text", "Hel")) == "step 2 text 'Hel'"
    assert event_summary(ToolStartedEvent(7, "t-7", "c")) == "c body started"
    assert event_summary(ToolResultEvent(8, "t-7", 1, "c", True, "ABORTED", (),
                                         {"forced": True})) == "c ABORTED forced"
    assert event_summary(TurnEnd(9, "t-7", TurnOutcome("aborted", UserCause()),
                                 "cancelled")) == "aborted (user), stop reason cancelled"
    assert event_summary(StopWaitingEvent(9, "t-7", (WaitingCall(
        "w1", "mcp__s__wait", "plugin", "aborting", 1.0),))) == (
        "stop waits on w1 mcp__s__wait (plugin, aborting)")
    assert event_summary(StopWaitingEvent(9, "t-7", ())) == "stop waits on no call"
    assert event_summary(HookDecisionEvent(10, "t-7", "c", "pre_tool_use", 1, ("chk",), "deny",
                                           "no rm -rf")) == "c pre_tool_use[1] deny: 'no rm -rf'"
    assert event_summary(ModelUsageEvent(11, "t-7", 2, TokenUsage(1200, 30, 1000))) == (
        "step 2: 1,200 in (1,000 cached) / 30 out")
    assert event_summary(ModelUsageEvent(12, "", -1, TokenUsage(90, 9, estimated=True))) == (
        "compaction summary: ~90 in / ~9 out")
    assert event_summary(MaintenanceStart(13, "", "compact", "auto")) == "compact (auto)"
    assert event_summary(HistoryCompacted(14, "", ("t1", "t2"), "They fixed it.", 5000, 300,
                                          TokenUsage(5000, 40))) == (
        "replaced t1, t2: ~5,000 -> ~300 tokens; summary 'They fixed it.'")
    assert event_summary(MaintenanceEnd(15, "", TurnOutcome("aborted", UserCause()))) == (
        "aborted (user), history unchanged")


def test_the_summary_test_covers_every_announced_kind() -> None:
    # A new event kind must get a summary (and a line above), not an assertion error in
    # an operator's tail.
    covered = {"SessionMeta", "TurnStart", "UserMessageEvent", "AssistantMessageEvent",
               "ToolCallEvent", "ToolProgressEvent", "ToolAbortEvent", "AssistantDeltaEvent",
               "ToolResultEvent", "TurnEnd", "ToolStartedEvent", "HookDecisionEvent",
               "ModelUsageEvent", "MaintenanceStart", "MaintenanceEnd", "HistoryCompacted",
               "StopWaitingEvent"}
    assert {kind.__name__ for kind in typing.get_args(AnnouncedEvent)} == covered


def test_event_line_reports_drops() -> None:
    line = event_line(42, OpsEventParams("s-1", turn_start(9), dropped=5), 0.5)
    first, second = line.splitlines()
    assert "(5 event(s) dropped" in first
    assert second.split()[1:] == ["42", "s-1", "t-7", "turn/start"]
