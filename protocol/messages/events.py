"""Session events: the durable log of a session, and what ``session.event`` carries.

Every event has ``kind`` (the tag), ``seq`` (its position in the session's log)
and ``turnId``. ``tool/progress``, ``tool/started``, ``tool/abort`` and
``assistant/delta`` are announced but never logged.
"""

from __future__ import annotations

from typing import Any, Literal

import msgspec

from protocol.causes import Cause
from protocol.messages.common import McpServerConfig
from protocol.tools import Content

TurnEndKind = Literal["completed", "aborted", "error", "interrupted"]
StopReason = Literal["end_turn", "cancelled", "error", "max_steps"]


class _Event(msgspec.Struct, frozen=True, tag_field="kind", rename="camel",
             forbid_unknown_fields=True, omit_defaults=True):
    seq: int
    turn_id: str


class SessionMeta(_Event, frozen=True, tag="session/meta"):
    """First line of a log: what ``session.load`` needs to reopen the session."""

    session_id: str
    workspace: str
    permission_mode: str
    created_at: float
    provider: dict[str, Any] = msgspec.field(default_factory=dict)
    mcp_servers: tuple[McpServerConfig, ...] = ()
    """The session's own plugin servers (``session.new``), for every re-open."""
    system_prompt: str | None = None
    """The session's own system prompt (``session.new``), for every re-open."""
    sandbox: str | None = None
    """The sandbox mode the session narrowed to (``session.new``), for every re-open."""


class TurnStart(_Event, frozen=True, tag="turn/start"):
    """A turn began (its prompt left the inbox); its events follow, then its ``turn/end``."""


class UserMessageEvent(_Event, frozen=True, tag="user/message"):
    """The turn's prompt, as ``agent.prompt`` sent it (a subagent's: its task's prompt)."""

    text: str


class Block(msgspec.Struct, frozen=True, forbid_unknown_fields=True, omit_defaults=True):
    """One block of an assistant message. A reasoning block the vendor sealed (Anthropic's
    thinking) keeps its ``signature``, or, when its reasoning is encrypted, ``redacted``
    (the opaque data; ``text`` is empty): the next request sends it back unchanged."""

    type: Literal["text", "reasoning"]
    text: str
    signature: str | None = None
    redacted: str | None = None


class AssistantMessageEvent(_Event, frozen=True, tag="assistant/message"):
    """What the model said in one step, text and reasoning blocks in order (its tool calls
    follow as ``tool/call``); ``interrupted`` when a stop cut the stream: the visible prefix
    kept. The record of the step's ``assistant/delta`` pieces."""

    step: int
    blocks: tuple[Block, ...]
    interrupted: bool = False
    chunks: int = 0  # stream chunks the message was assembled from


class ToolCallEvent(_Event, frozen=True, tag="tool/call", omit_defaults=False):
    """A call the model made, logged before it runs; ``args`` is always on the wire
    (``{}`` for none). ``callId`` is unique within the turn; ``permission.request``
    names the call by the same ``turnId`` and ``callId``."""

    step: int
    call_id: str
    tool: str
    tool_class: str = msgspec.field(name="class")
    args: dict[str, Any] = msgspec.field(default_factory=dict)


class ToolProgressEvent(_Event, frozen=True, tag="tool/progress"):
    """Output of a running call as it comes (stdout, stderr, or a plugin's progress);
    bounded, in order, never after the call's result (announced, never logged)."""

    call_id: str
    stream: str
    text: str


class ToolResultEvent(_Event, frozen=True, tag="tool/result", omit_defaults=False):
    """The one result of a ``tool/call``. Every field is always on the wire: ``code``
    is null on success, ``details`` is ``{}`` when there are none."""

    step: int
    call_id: str
    is_error: bool
    code: str | None
    content: tuple[Content, ...]
    details: dict[str, Any] = msgspec.field(default_factory=dict)


class TurnOutcome(msgspec.Struct, frozen=True, forbid_unknown_fields=True, omit_defaults=True):
    """How a turn ended: ``{kind: aborted, reason: {kind: user}}`` and the like; ``reason``
    is the stop's cause (``protocol.causes``)."""

    kind: TurnEndKind
    reason: Cause | None = None
    error: str | None = None


class TurnEnd(_Event, frozen=True, tag="turn/end"):
    """The turn's last event: how it ended (``end``) and ``stopReason`` as ``agent.prompt``
    answers it. Durable before ``agent.abort`` answers."""

    end: TurnOutcome
    stop_reason: StopReason


HookEvent = Literal["pre_tool_use", "post_tool_use"]
HookDecision = Literal["allow", "deny", "ask", "stop", "aborted"]


class HookDecisionEvent(_Event, frozen=True, tag="hook/decision"):
    """One configured hook ran for a call (logged before the call's result): which hook
    (``event`` and its place ``index`` in the configuration, its command), what it decided
    and why, and how long it took. ``decision`` ``stop`` is a hook's ``stopTurn``;
    ``aborted``: the call was stopped while the hook ran and its tree was killed. A hook
    that failed (an exit other than 0 or 2, unparsable output, its time limit) is a
    ``deny`` whose ``reason`` says so (``failed`` true)."""

    call_id: str
    event: HookEvent
    index: int
    command: tuple[str, ...]
    decision: HookDecision
    reason: str = ""
    duration_ms: int = 0
    failed: bool = False


SessionEvent = (SessionMeta | TurnStart | UserMessageEvent | AssistantMessageEvent
                | ToolCallEvent | ToolProgressEvent | HookDecisionEvent | ToolResultEvent
                | TurnEnd)
DurableEvent = (SessionMeta | TurnStart | UserMessageEvent | AssistantMessageEvent
                | ToolCallEvent | HookDecisionEvent | ToolResultEvent | TurnEnd)


class ToolAbortEvent(_Event, frozen=True, tag="tool/abort"):
    """A stop reached a call: what the host said when asked to abort it (not logged)."""

    call_id: str
    tool: str
    host_state: str
    body_invoked: bool


class ToolStartedEvent(_Event, frozen=True, tag="tool/started"):
    """A call's body started (announced, never logged): its permission was granted and
    it was admitted, so the call is running, not waiting. Comes after its ``tool/call``
    and before its first ``tool/progress``; a call stopped or refused before its body
    never has one. The host's ``tools.started``, relayed (for ``Task``, which runs in the
    runtime, announced when its subagent starts)."""

    call_id: str


class AssistantDeltaEvent(_Event, frozen=True, tag="assistant/delta"):
    """A piece of the model's response as it streams (announced, never logged).

    The step's ``assistant/message`` that follows is the record; a client that shows
    deltas replaces them with it. Half-streamed tool calls are never announced."""

    step: int
    type: Literal["text", "reasoning"]
    text: str


AnnouncedEvent = SessionEvent | ToolAbortEvent | AssistantDeltaEvent | ToolStartedEvent
