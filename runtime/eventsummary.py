"""What a session event says, as plain text pieces: the pure part every view shares.

Chat (``runtime.chat.view``), ops (``runtime.ops.render``) and the demo
(``runtime.demo``) each lay out their own lines (styled terminal text, a log line
per event, a timeline), but what they say about an event is decided here once:
how a call is named and summarized, a result's code and what its details say a
stop did, what a host answered to an abort, how a turn ended and why, and how
long text is shortened. ACP (``runtime.acp.translate``) maps events to ACP's own
types and uses the same result text. No I/O, no clock, no styling.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from protocol.causes import Cause
from protocol.messages.events import (
    AssistantMessageEvent,
    ToolAbortEvent,
    ToolCallEvent,
    ToolResultEvent,
    TurnEnd,
)
from protocol.tools import TextContent

_SUBJECT = {"Bash": "command", "Read": "path", "Write": "path", "Edit": "path",
            "Glob": "pattern", "Grep": "pattern", "GenerateImages": "prompt"}


def cut(text: str, width: int) -> str:
    """``text`` if it fits in ``width``, else its start and an ellipsis."""
    return text if len(text) <= width else text[: width - 1] + "…"


def one_line(text: str, width: int) -> str:
    """``text`` on one line (runs of whitespace become one space), cut to ``width``."""
    return cut(" ".join(text.split()), width)


def summarize_args(tool: str, args: Mapping[str, Any], width: int) -> str:
    """One line naming what a call works on: its command, path or pattern."""
    key = _SUBJECT.get(tool)
    if key is not None and isinstance(args.get(key), str):
        text = str(args[key])
        if tool == "Grep" and isinstance(args.get("path"), str):
            text = f"{text} in {args['path']}"
    else:
        text = json.dumps(dict(args), separators=(",", ":"), default=str)
    return one_line(text, width)


def call_label(event: ToolCallEvent) -> str:
    """``<callId> <tool> (<class>)``."""
    return f"{event.call_id} {event.tool} ({event.tool_class})"


def message_text(event: AssistantMessageEvent, *, reasoning: bool = True) -> str:
    """The message's blocks' text joined by spaces (without reasoning if not ``reasoning``)."""
    return " ".join(b.text for b in event.blocks if reasoning or b.type == "text")


def result_code(event: ToolResultEvent) -> str:
    """The result's code, ``ok`` on success."""
    return event.code or "ok"


def result_text(event: ToolResultEvent) -> str:
    """The text of the result's content, one item a line."""
    return "\n".join(c.text for c in event.content if isinstance(c, TextContent))


def first_line(event: ToolResultEvent, width: int) -> str:
    """The first line of the result with visible text, cut to ``width``."""
    for item in event.content:
        for line in getattr(item, "text", "").splitlines():
            if line.strip():
                return cut(line.strip(), width)
    return ""


def forced(event: ToolResultEvent) -> bool:
    """An operator stopped waiting for the call (``quiesce ops force``)."""
    return bool(event.details.get("forced"))


def abandoned(event: ToolResultEvent) -> bool:
    """The runtime stopped waiting for a read-only call at once; the host drops its result."""
    return bool(event.details.get("abandoned"))


def ran_a_process(event: ToolResultEvent) -> bool:
    """The call ran a process tree (its result says how it exited)."""
    return "exitStatus" in event.details or "signal" in event.details


def stop_note(event: ToolResultEvent) -> str:
    """What a stop did to the call, from its result's details; empty if nothing to say."""
    details = event.details
    if abandoned(event):
        return "stopped waiting at once; the host drops its late result"
    if "processesKilled" in details and (event.code or "").startswith("ABORTED"):
        killed = details.get("processesKilled", 0)
        survivors = details.get("survivors") or []
        note = (f"process tree terminated: {killed} processes killed in "
                f"{details.get('killMs', 0)} ms")
        return note + (f", {len(survivors)} SURVIVED" if survivors else "")
    if forced(event):
        return "forced by an operator"
    return ""


def host_found(event: ToolAbortEvent) -> str:
    """``tools.abort <callId> (<tool>): host found it <state>``."""
    return f"tools.abort {event.call_id} ({event.tool}): host found it {event.host_state}"


def cause_label(cause: Cause | None) -> str:
    """A stop's cause as a word: its kind (``?`` when none is known)."""
    return cause.kind if cause is not None else "?"


def turn_end_label(event: TurnEnd) -> str:
    """``<kind>``, and `` (<cause>)`` when the turn ended for a cause."""
    reason = event.end.reason
    return event.end.kind + (f" ({reason.kind})" if reason is not None else "")
