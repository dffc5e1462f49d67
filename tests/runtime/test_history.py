from __future__ import annotations

from protocol.messages.events import (
    AssistantMessageEvent,
    Block,
    DurableEvent,
    ToolCallEvent,
    ToolResultEvent,
    TurnStart,
    UserMessageEvent,
)
from protocol.tools import TextContent
from runtime.agent.history import ModelHistory, model_messages
from runtime.agent.providers.base import AssistantMessage, ToolCallChunk, ToolMessage, UserMessage


def index(events: list[DurableEvent]) -> tuple[dict[str, list[DurableEvent]], list[str]]:
    by_turn: dict[str, list[DurableEvent]] = {}
    order: list[str] = []
    for e in events:
        if e.turn_id not in by_turn:
            by_turn[e.turn_id] = []
            order.append(e.turn_id)
        by_turn[e.turn_id].append(e)
    return by_turn, order


def test_a_step_becomes_one_assistant_message_then_its_results() -> None:
    events: list[DurableEvent] = [
        UserMessageEvent(1, "t1", "go"),
        AssistantMessageEvent(2, "t1", 0, (Block("text", "looking"),)),
        ToolCallEvent(3, "t1", 0, "a", "Read", "read-only", {"path": "x"}),
        ToolCallEvent(4, "t1", 0, "b", "Read", "read-only", {"path": "y"}),
        ToolResultEvent(5, "t1", 0, "a", False, None, (TextContent("A"),)),
        ToolCallEvent(6, "t1", 0, "c", "Glob", "read-only", {"pattern": "*"}),
        ToolResultEvent(7, "t1", 0, "b", False, None, (TextContent("B"),)),
        ToolResultEvent(8, "t1", 0, "c", True, "ABORTED", (TextContent("stopped"),)),
    ]
    assert model_messages(events) == [
        UserMessage("go"),
        AssistantMessage("looking", "", (ToolCallChunk("a", "Read", {"path": "x"}),
                                         ToolCallChunk("b", "Read", {"path": "y"}),
                                         ToolCallChunk("c", "Glob", {"pattern": "*"}))),
        ToolMessage("a", "A"), ToolMessage("b", "B"), ToolMessage("c", "stopped", True),
    ]


def test_turns_see_earlier_turns_and_subagents_only_themselves() -> None:
    events: list[DurableEvent] = [
        TurnStart(1, "t1"), UserMessageEvent(2, "t1", "one"),
        AssistantMessageEvent(3, "t1", 0, (Block("text", "first"),)),
        ToolCallEvent(4, "t1", 0, "task", "Task", "local", {"prompt": "sub"}),
        TurnStart(5, "t1~task"), UserMessageEvent(6, "t1~task", "sub"),
        AssistantMessageEvent(7, "t1~task", 0, (Block("text", "child says"),)),
        ToolResultEvent(8, "t1", 0, "task", False, None, (TextContent("child says"),)),
        TurnStart(9, "t2"), UserMessageEvent(10, "t2", "two"),
    ]
    by_turn, order = index(events)
    history = ModelHistory(by_turn, order)
    assert history.for_turn("t1~task") == [UserMessage("sub"), AssistantMessage("child says")]
    second = history.for_turn("t2")
    assert second[0] == UserMessage("one") and second[-1] == UserMessage("two")
    assert all("child" not in str(m) or isinstance(m, ToolMessage) for m in second)
    # Asking again (a later step) gives the same, and new events of t2 show up.
    by_turn["t2"].append(AssistantMessageEvent(11, "t2", 0, (Block("text", "ok"),)))
    assert history.for_turn("t2") == [*second, AssistantMessage("ok")]
