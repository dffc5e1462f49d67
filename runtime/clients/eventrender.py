"""One pure renderer of session events: ``render(event)`` is the ``EventRecord`` every
view lays out.

Chat (``runtime.clients.chat.view``: styled terminal lines, a stop's timeline), ops
(``runtime.clients.ops.render``: a log line per event) and the demo (``runtime.clients.demo``: a
transcript and a stop timeline) each decide only layout and style; what is said about an
event (how a call is named and what it works on, a result's code and what its details
say a stop did, what a host answered to an abort, how a turn ended and why, the one-line
summary, how long text is shortened) is decided here once. ACP (``runtime.clients.acp.translate``)
maps events to ACP's own types with their titles, and takes a result's text from here.
No I/O, no clock, no styling, no state: the same event always renders the same.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from protocol.messages.events import (
    AnnouncedEvent,
    AssistantDeltaEvent,
    AssistantMessageEvent,
    HistoryCompacted,
    HookDecisionEvent,
    MaintenanceEnd,
    MaintenanceStart,
    ModelUsageEvent,
    SessionMeta,
    StopWaitingEvent,
    TokenUsage,
    ToolAbortEvent,
    ToolCallEvent,
    ToolProgressEvent,
    ToolResultEvent,
    ToolStartedEvent,
    TurnEnd,
    TurnStart,
    UserMessageEvent,
)
from protocol.tools import TextContent

LINE_WIDTH = 60  # of a text quoted in a one-line summary
SUBJECT_WIDTH = 60  # of what a call works on
FIRST_LINE_WIDTH = 70  # of a failed result's first line

_SUBJECT = {"Bash": "command", "Read": "path", "Write": "path", "Edit": "path",
            "Glob": "pattern", "Grep": "pattern", "GenerateImages": "prompt"}


@dataclass(frozen=True)
class EventRecord:
    """What a view shows of one event; a field that does not apply is empty."""

    kind: str
    """The event's tag (``tool/result``)."""
    turn_id: str | None
    line: str
    """The event in one plain line, after its kind (ops' tail prints it)."""
    call_id: str = ""
    tool: str = ""
    text: str = ""
    """In full: a prompt's, a message's (reasoning too), a progress chunk's, a result's
    content (one item a line)."""
    reply: str = ""
    """A message's text without its reasoning."""
    subject: str = ""
    """What a call works on, on one line: its command, path or pattern."""
    label: str = ""
    """``<callId> <tool> (<class>)`` of a call; ``<kind> (<cause>)`` of a turn's end."""
    code: str = ""
    """A result's code, ``ok`` on success."""
    first_line: str = ""
    """A result's first line with visible text, shortened."""
    stop_note: str = ""
    """What a stop did to the call, from its result's details."""
    host_found: str = ""
    """``tools.abort <callId> (<tool>): host found it <state>`` of an abort."""
    cause: str = ""
    """A turn end's cause (its kind; ``?`` when none is known)."""
    ran_a_process: bool = False
    abandoned: bool = False
    forced: bool = False


def cut(text: str, width: int) -> str:
    """``text`` if it fits in ``width``, else its start and an ellipsis."""
    return text if len(text) <= width else text[: width - 1] + "…"


def one_line(text: str, width: int) -> str:
    """``text`` on one line (runs of whitespace become one space), cut to ``width``."""
    return cut(" ".join(text.split()), width)


def summarize_args(tool: str, args: Mapping[str, Any], width: int = SUBJECT_WIDTH) -> str:
    """One line naming what a call works on: its command, path or pattern."""
    key = _SUBJECT.get(tool)
    if key is not None and isinstance(args.get(key), str):
        text = str(args[key])
        if tool == "Grep" and isinstance(args.get("path"), str):
            text = f"{text} in {args['path']}"
    else:
        text = json.dumps(dict(args), separators=(",", ":"), default=str)
    return one_line(text, width)


def _snippet(text: str) -> str:
    return repr(one_line(text, LINE_WIDTH))


def render(event: AnnouncedEvent) -> EventRecord:
    kind = type(event).__struct_config__.tag
    assert isinstance(kind, str)
    turn = event.turn_id
    if isinstance(event, SessionMeta):
        return EventRecord(kind, turn, f"workspace {event.workspace}")
    if isinstance(event, TurnStart):
        return EventRecord(kind, turn, "")
    if isinstance(event, UserMessageEvent):
        return EventRecord(kind, turn, _snippet(event.text), text=event.text)
    if isinstance(event, AssistantMessageEvent):
        reply = " ".join(b.text for b in event.blocks if b.type == "text")
        mark = " INTERRUPTED" if event.interrupted else ""
        return EventRecord(kind, turn, f"step {event.step}{mark} {_snippet(reply)}",
                           text=" ".join(b.text for b in event.blocks), reply=reply)
    if isinstance(event, AssistantDeltaEvent):
        return EventRecord(kind, turn, f"step {event.step} {event.type} {_snippet(event.text)}",
                           text=event.text)
    if isinstance(event, ToolCallEvent):
        label = f"{event.call_id} {event.tool} ({event.tool_class})"
        return EventRecord(kind, turn, label, call_id=event.call_id, tool=event.tool,
                           label=label, subject=summarize_args(event.tool, event.args))
    if isinstance(event, ToolStartedEvent):
        return EventRecord(kind, turn, f"{event.call_id} body started", call_id=event.call_id)
    if isinstance(event, ToolProgressEvent):
        return EventRecord(kind, turn, f"{event.call_id} {event.stream}: {_snippet(event.text)}",
                           call_id=event.call_id, text=event.text)
    if isinstance(event, ToolResultEvent):
        return _result(kind, event)
    if isinstance(event, TurnEnd):
        reason = event.end.reason
        label = event.end.kind + (f" ({reason.kind})" if reason is not None else "")
        error = f": {one_line(event.end.error, LINE_WIDTH)}" if event.end.error else ""
        return EventRecord(kind, turn, f"{label}{error}, stop reason {event.stop_reason}",
                           label=label, text=event.end.error or "",
                           cause=reason.kind if reason is not None else "?")
    if isinstance(event, StopWaitingEvent):
        waits = ", ".join(f"{c.call_id} {c.tool} ({c.tool_class}, {c.state})"
                          for c in event.calls)
        return EventRecord(kind, turn, f"stop waits on {waits}" if waits else
                           "stop waits on no call")
    if isinstance(event, HookDecisionEvent):
        why = f": {_snippet(event.reason)}" if event.reason else ""
        return EventRecord(kind, turn, f"{event.call_id} {event.event}[{event.index}] "
                           f"{event.decision}{why}", call_id=event.call_id,
                           text=event.reason or "")
    if isinstance(event, ModelUsageEvent | MaintenanceStart | MaintenanceEnd | HistoryCompacted):
        return _session_record(kind, event)
    assert isinstance(event, ToolAbortEvent)
    body = "body invoked" if event.body_invoked else "body not invoked"
    return EventRecord(
        kind, turn, f"{event.call_id} {event.tool}: host {event.host_state}, {body}",
        call_id=event.call_id, tool=event.tool,
        host_found=f"tools.abort {event.call_id} ({event.tool}): host found it "
                   f"{event.host_state}")


def usage_text(usage: TokenUsage) -> str:
    """``12,345 in (2,000 cached) / 321 out``, ``~`` before an estimate."""
    mark = "~" if usage.estimated else ""
    cached = f" ({usage.cached_input:,} cached)" if usage.cached_input else ""
    return f"{mark}{usage.input:,} in{cached} / {mark}{usage.output:,} out"


def _session_record(kind: str, event: ModelUsageEvent | MaintenanceStart | MaintenanceEnd
                    | HistoryCompacted) -> EventRecord:
    """Usage and maintenance (a compaction) as one line each; a summary's text whole."""
    if isinstance(event, ModelUsageEvent):
        where = f"step {event.step}" if event.step >= 0 else "compaction summary"
        return EventRecord(kind, event.turn_id, f"{where}: {usage_text(event.usage)}")
    if isinstance(event, MaintenanceStart):
        inside = f", inside turn {event.turn_id}" if event.turn_id else ""
        return EventRecord(kind, event.turn_id, f"{event.job} ({event.trigger}{inside})",
                           label=event.job)
    if isinstance(event, MaintenanceEnd):
        reason = event.end.reason
        label = event.end.kind + (f" ({reason.kind})" if reason is not None else "")
        error = f": {one_line(event.end.error, LINE_WIDTH)}" if event.end.error else ""
        done = ", history compacted" if event.compacted else ", history unchanged"
        return EventRecord(kind, event.turn_id, f"{label}{error}{done}", label=label,
                           text=event.end.error or "",
                           cause=reason.kind if reason is not None else "?")
    return EventRecord(kind, "", f"replaced {', '.join(event.replaced)}: ~{event.tokens_before:,}"
                       f" -> ~{event.tokens_after:,} tokens; summary "
                       f"{_snippet(event.summary)}", text=event.summary)


def _result(kind: str, event: ToolResultEvent) -> EventRecord:
    details = event.details
    forced = bool(details.get("forced"))
    abandoned = bool(details.get("abandoned"))
    note = ""
    if abandoned:
        note = "stopped waiting at once; the host drops its late result"
    elif "processesKilled" in details and (event.code or "").startswith("ABORTED"):
        killed = details.get("processesKilled", 0)
        survivors = details.get("survivors") or []
        note = (f"process tree terminated: {killed} processes killed in "
                f"{details.get('killMs', 0)} ms")
        note += f", {len(survivors)} SURVIVED" if survivors else ""
    elif forced:
        note = "forced by an operator"
    first = ""
    for item in event.content:
        first = next((cut(line.strip(), FIRST_LINE_WIDTH)
                      for line in getattr(item, "text", "").splitlines() if line.strip()), "")
        if first:
            break
    line = (f"{event.call_id} {event.code or ('error' if event.is_error else 'ok')}"
            + (" forced" if forced else ""))
    return EventRecord(
        kind, event.turn_id, line, call_id=event.call_id, code=event.code or "ok",
        text="\n".join(c.text for c in event.content if isinstance(c, TextContent)),
        first_line=first, stop_note=note, forced=forced, abandoned=abandoned,
        ran_a_process="exitStatus" in details or "signal" in details)
