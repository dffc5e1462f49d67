"""The one renderer of session events: what the views take from a record is decided there
(every kind's one-line summary: ``tests/ops/test_render.py``)."""

from __future__ import annotations

from protocol.causes import UserCause
from protocol.messages.events import (
    AssistantMessageEvent,
    Block,
    ToolAbortEvent,
    ToolResultEvent,
    TurnEnd,
    TurnOutcome,
)
from protocol.tools import TextContent
from runtime.clients.eventrender import render
from tests.ops.support import tool_call


def test_records_say_what_the_views_show() -> None:
    call = render(tool_call(4))
    assert (call.kind, call.label, call.call_id) == (
        "tool/call", "t-7.write-1 Write (mutating)", "t-7.write-1")
    result = render(ToolResultEvent(8, "t-7", 1, "r", True, "ABORTED",
                                    (TextContent("\n  late\nmore"),), {"abandoned": True}))
    assert (result.code, result.first_line, result.text) == ("ABORTED", "late", "\n  late\nmore")
    assert result.abandoned and not result.ran_a_process
    assert result.stop_note == "stopped waiting at once; the host drops its late result"
    assert render(ToolResultEvent(9, "t-7", 1, "r", False, None, (), {})).code == "ok"
    abort = render(ToolAbortEvent(6, "t-7", "c", "Bash", "running", True))
    assert abort.host_found == "tools.abort c (Bash): host found it running"
    assert abort.line == "c Bash: host running, body invoked"
    end = render(TurnEnd(9, "t-7", TurnOutcome("aborted", UserCause()), "cancelled"))
    assert (end.label, end.cause) == ("aborted (user)", "user")
    message = render(AssistantMessageEvent(3, "t-7", 1, (
        Block("reasoning", "hmm"), Block("text", "done"))))
    assert (message.text, message.reply) == ("hmm done", "done")
    assert render(tool_call(4)) == call  # pure: the same event, the same record
