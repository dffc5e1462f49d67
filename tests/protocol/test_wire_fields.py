"""Fields the client contract requires are on the wire even when they hold a default.

msgspec's ``omit_defaults`` would leave them out; a client must not have to know which
value an absent field stands for."""

from __future__ import annotations

from typing import Any

import msgspec

from protocol.causes import UserCause
from protocol.envelope import encode_notification
from protocol.messages.client import (
    AbortedCall,
    AgentAbortResult,
    ClientPermissionRequestParams,
    SessionEventParams,
)
from protocol.messages.events import ToolCallEvent, ToolResultEvent
from protocol.tools import TextContent
from runtime.link.dispatch import encode_response


def _result(value: msgspec.Struct) -> Any:
    return msgspec.json.decode(encode_response(1, value))["result"]


def _event(event: ToolCallEvent | ToolResultEvent) -> Any:
    frame = encode_notification("session.event", SessionEventParams("s", event))
    return msgspec.json.decode(frame)["params"]["event"]


def test_an_idle_abort_answer_carries_every_field() -> None:
    assert _result(AgentAbortResult("idle")) == {
        "outcome": "idle", "turnId": None, "cause": None, "settledMs": 0.0, "toolCalls": [],
        "error": None}


def test_an_aborted_answer_carries_every_field_and_each_calls_code() -> None:
    quiet = _result(AgentAbortResult("aborted", "t1", UserCause(), 2.5))
    assert quiet["toolCalls"] == [] and quiet["turnId"] == "t1"
    answer = _result(AgentAbortResult("aborted", "t1", UserCause(), 2.5, (
        AbortedCall("c1", "Read", "read-only"),
        AbortedCall("c2", "Bash", "process", "ABORTED"))))
    assert answer["toolCalls"] == [
        {"callId": "c1", "tool": "Read", "class": "read-only", "code": None},
        {"callId": "c2", "tool": "Bash", "class": "process", "code": "ABORTED"}]


def test_a_tool_call_always_has_args() -> None:
    assert _event(ToolCallEvent(4, "t1", 0, "c1", "Glob", "read-only"))["args"] == {}


def test_a_tool_result_always_has_code_content_and_details() -> None:
    event = _event(ToolResultEvent(5, "t1", 0, "c1", False, None, ()))
    assert {k: event[k] for k in ("code", "content", "details")} == {
        "code": None, "content": [], "details": {}}
    event = _event(ToolResultEvent(5, "t1", 0, "c1", False, None, (TextContent("x"),),
                                   {"n": 1}))
    assert event["details"] == {"n": 1} and event["code"] is None


def test_a_permission_request_carries_every_field() -> None:
    params = ClientPermissionRequestParams("s", "perm-1", None, "dbg-1", "Write", "{}",
                                           "medium")
    assert msgspec.json.decode(msgspec.json.encode(params)) == {
        "sessionId": "s", "requestId": "perm-1", "turnId": None, "callId": "dbg-1",
        "tool": "Write", "argsPreview": "{}", "risk": "medium"}
