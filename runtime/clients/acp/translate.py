"""Native session events to ACP ``session/update`` payloads, sans-IO.

One :class:`Translator` per ACP session. It keeps the tool calls it opened so that each
gets exactly one final ``tool_call_update`` (``completed`` or ``failed``), and the tail
of their progress output (ACP replaces a call's ``content`` on every update, so each
update carries the whole, bounded, text so far).

| native event | ACP update |
|---|---|
| ``user/message`` (replay only; live, the client showed it) | ``user_message_chunk`` |
| ``assistant/delta`` text / reasoning (live) | ``agent_message_chunk`` / ``agent_thought_chunk`` |
| ``assistant/message`` blocks | the same chunks, unless the step streamed them |
| ``tool/call`` | ``tool_call`` (``pending``, kind, title, rawInput; Edit and Write a ``diff``) |
| ``tool/started`` (its body started) | ``tool_call_update`` (``in_progress``) |
| ``tool/progress`` | ``tool_call_update`` (``in_progress``, output so far) |
| ``tool/result`` | ``tool_call_update`` (``completed`` / ``failed``, content, rawOutput) |
| ``turn/end``, or the prompt's answer | ``failed`` for any call of the turn left open |

A subagent's turn (``Task``; its turn id holds ``~``) is shown as thought, not as the
agent's answer, and its prompt is not a user message.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

from msgspec import UNSET

from protocol.ids import is_child_turn, is_within
from protocol.messages.events import (
    AnnouncedEvent,
    AssistantDeltaEvent,
    AssistantMessageEvent,
    SessionMeta,
    ToolCallEvent,
    ToolProgressEvent,
    ToolResultEvent,
    ToolStartedEvent,
    TurnEnd,
    UserMessageEvent,
)
from runtime.clients.acp.messages import (
    AgentMessageChunk,
    AgentThoughtChunk,
    SessionUpdate,
    TextBlock,
    ToolCallBlock,
    ToolCallContent,
    ToolCallDiff,
    ToolCallLocation,
    ToolCallProgress,
    ToolCallStart,
    ToolCallUpdate,
    ToolKind,
    UserMessageChunk,
)
from runtime.clients.eventrender import render

PROGRESS_TAIL = 16 * 1024  # characters of a call's output an update carries
TITLE_MAX = 120

_KINDS: dict[str, ToolKind] = {"Read": "read", "Write": "edit", "Edit": "edit",
                               "Glob": "search", "Grep": "search", "Bash": "execute"}


def tool_call_id(turn_id: str, call_id: str) -> str:
    """The ACP id of a call: unique in the session (a call id is unique in its turn);
    ``permission.request`` names the call by the same turn id and call id."""
    return f"{turn_id}.{call_id}"


def tool_kind(tool: str) -> ToolKind:
    return _KINDS.get(tool, "other")


def tool_title(tool: str, args: dict[str, Any]) -> str:
    detail = args.get("command") or args.get("path") or args.get("pattern") or ""
    title = f"{tool} {detail}".strip() if isinstance(detail, str) else tool
    return title if len(title) <= TITLE_MAX else title[:TITLE_MAX - 1] + "…"


@dataclass
class _OpenCall:
    turn_id: str
    start: ToolCallStart
    output: list[str] = field(default_factory=list)
    size: int = 0

    def add(self, text: str) -> str:
        self.output.append(text)
        self.size += len(text)
        while self.size > PROGRESS_TAIL and len(self.output) > 1:
            self.size -= len(self.output.pop(0))
        return "".join(self.output)[-PROGRESS_TAIL:]


def _text(text: str) -> tuple[ToolCallContent, ...]:
    return (ToolCallContent(TextBlock(text)),) if text else ()


def file_diff(tool: str, args: dict[str, Any], workspace: str) -> ToolCallDiff | None:
    """The change an Edit or Write call makes, as ACP's ``diff`` content (an absolute
    path): Edit's old and new text; Write's new content, ``oldText`` null (the runtime
    never reads the workspace, so a replaced file's old content is not known here)."""
    path = args.get("path")
    if not isinstance(path, str) or tool not in ("Edit", "Write"):
        return None
    where = path if os.path.isabs(path) or not workspace else os.path.join(workspace, path)
    if tool == "Write":
        content = args.get("content")
        return ToolCallDiff(where, content) if isinstance(content, str) else None
    old, new = args.get("old_string"), args.get("new_string")
    if isinstance(old, str) and isinstance(new, str):
        return ToolCallDiff(where, new, old)
    return None


class Translator:
    def __init__(self, workspace: str = "") -> None:
        self.workspace = workspace
        """The session's workspace: a diff's path is absolute (``session/meta`` sets it)."""
        self._open: dict[str, _OpenCall] = {}
        # Steps whose response reached the client as deltas: their recorded message
        # must not be sent a second time.
        self._streamed: set[tuple[str, int]] = set()

    def describe(self, call_id: str) -> ToolCallUpdate | None:
        """The tool call a permission prompt is about, as the client first saw it."""
        call = self._open.get(call_id)
        if call is None:
            return None
        start = call.start
        return ToolCallUpdate(start.tool_call_id, status="pending", title=start.title,
                              kind=start.kind, content=start.content,
                              raw_input=start.raw_input)

    def open_calls(self) -> list[str]:
        return list(self._open)

    def translate(self, event: AnnouncedEvent, *, replay: bool = False) -> list[SessionUpdate]:
        child = is_child_turn(event.turn_id)
        if isinstance(event, UserMessageEvent):
            if replay and not child:
                return [UserMessageChunk(TextBlock(event.text))]
            return []
        if isinstance(event, AssistantDeltaEvent):
            self._streamed.add((event.turn_id, event.step))
            if event.type == "text" and not child:
                return [AgentMessageChunk(TextBlock(event.text))]
            return [AgentThoughtChunk(TextBlock(event.text))]
        if isinstance(event, AssistantMessageEvent):
            if (event.turn_id, event.step) in self._streamed:
                self._streamed.discard((event.turn_id, event.step))
                return []
            updates: list[SessionUpdate] = []
            for block in event.blocks:
                if not block.text:
                    continue
                if block.type == "text" and not child:
                    updates.append(AgentMessageChunk(TextBlock(block.text)))
                else:
                    updates.append(AgentThoughtChunk(TextBlock(block.text)))
            return updates
        if isinstance(event, ToolCallEvent):
            return [self._start(event)]
        if isinstance(event, ToolStartedEvent):
            started = self._open.get(tool_call_id(event.turn_id, event.call_id))
            if started is None:
                return []
            return [ToolCallProgress(started.start.tool_call_id, status="in_progress")]
        if isinstance(event, ToolProgressEvent):
            call = self._open.get(tool_call_id(event.turn_id, event.call_id))
            if call is None:
                return []
            return [ToolCallProgress(call.start.tool_call_id, status="in_progress",
                                     content=_text(call.add(event.text)))]
        if isinstance(event, ToolResultEvent):
            return self._finish(event)
        if isinstance(event, TurnEnd):
            self._streamed = {key for key in self._streamed if key[0] != event.turn_id}
            return self.close_turn(event.turn_id)
        if isinstance(event, SessionMeta):
            self.workspace = event.workspace
        return []  # session/meta, turn/start, tool/abort, stop/waiting: nothing ACP can show

    def _start(self, event: ToolCallEvent) -> ToolCallStart:
        path = event.args.get("path")
        diff = file_diff(event.tool, event.args, self.workspace)
        start = ToolCallStart(
            tool_call_id(event.turn_id, event.call_id), tool_title(event.tool, event.args),
            tool_kind(event.tool), "pending", raw_input=dict(event.args),
            locations=(ToolCallLocation(path),) if isinstance(path, str) else (),
            content=(diff,) if diff is not None else UNSET)
        self._open[start.tool_call_id] = _OpenCall(event.turn_id, start)
        return start

    def _finish(self, event: ToolResultEvent) -> list[SessionUpdate]:
        acp_id = tool_call_id(event.turn_id, event.call_id)
        opened = self._open.pop(acp_id, None)
        if opened is None:
            return []  # a result without a call we showed (e.g. replay of a broken log)
        text = render(event).text
        output: dict[str, Any] = {"code": event.code} if event.code else {}
        if event.details:
            output["details"] = event.details
        content: tuple[ToolCallBlock, ...] = _text(text)
        if isinstance(opened.start.content, tuple):  # the diff stays beside the result
            content = (*opened.start.content, *content)
        return [ToolCallProgress(acp_id, status="failed" if event.is_error else "completed",
                                 content=content, raw_output=output)]

    def close_turn(self, turn_id: str) -> list[SessionUpdate]:
        """The log keeps every call balanced, but its events may not all reach us (a
        daemon shutting down stops announcing): a call of the turn (or of its subagents)
        still open is reported failed rather than left spinning."""
        left = [acp_id for acp_id, call in self._open.items()
                if is_within(call.turn_id, turn_id)]
        for acp_id in left:
            del self._open[acp_id]
        return [ToolCallProgress(acp_id, status="failed",
                                 content=_text("no result was reported for this call; "
                                               "the session log has it"))
                for acp_id in left]
