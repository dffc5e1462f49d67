"""Session events: the durable log of a session, and what ``session.event`` carries.

Every event has ``kind`` (the tag), ``seq`` (its position in the session's log)
and ``turnId``. ``tool/progress``, ``tool/started``, ``tool/abort``,
``assistant/delta`` and ``stop/waiting`` are announced but never logged: they carry the
``seq`` of the last durable event announced before them, so several may share one ``seq``
and one with a durable event. A client that deduplicates by ``seq`` (after a
``session.attach {afterSeq}``) does so for durable events only; announced ones are never
replayed, so never doubled.
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


NO_PROVIDER_ERROR = "no model provider is configured"
"""How a turn's ``error`` begins when its session has no model provider (a client may
say how to choose one)."""


class TokenUsage(msgspec.Struct, frozen=True, forbid_unknown_fields=True, rename="camel",
                 omit_defaults=True):
    """Tokens one model response (or a sum of them) took: ``input`` (every prompt token,
    cached ones included), ``output``, ``cachedInput`` (the part of ``input`` read from the
    provider's cache, where it says). ``estimated``: the provider reported nothing for (some
    of) it, so it was estimated from the text's length (about 4 characters a token)."""

    input: int = 0
    output: int = 0
    cached_input: int = 0
    estimated: bool = False

    def __add__(self, other: TokenUsage) -> TokenUsage:
        return TokenUsage(self.input + other.input, self.output + other.output,
                          self.cached_input + other.cached_input,
                          self.estimated or other.estimated)


class ModelUsageEvent(_Event, frozen=True, tag="model/usage"):
    """The token usage of one model response: a turn's step (``step``), or a compaction's
    summary (``step`` -1; ``turnId`` empty, or the turn it ran inside, whose ``turn/end``
    sum then counts it). Logged when the response ends, also when a stop
    cut it (what the provider reported by then, else the estimate)."""

    step: int
    usage: TokenUsage


class TurnEnd(_Event, frozen=True, tag="turn/end"):
    """The turn's last event: how it ended (``end``) and ``stopReason`` as ``agent.prompt``
    answers it; ``usage``, the sum of its steps' ``model/usage`` (absent when it made no
    model request). Durable before ``agent.abort`` answers."""

    end: TurnOutcome
    stop_reason: StopReason
    usage: TokenUsage | None = None


MaintenanceJob = Literal["compact"]
MaintenanceTrigger = Literal["auto", "manual"]


class MaintenanceStart(_Event, frozen=True, tag="maintenance/start"):
    """The agent entered the ``maintenance`` phase (``turnId`` empty) to run ``job``: a
    history compaction, ``auto`` (the history outgrew its share of the context window
    before a turn) or ``manual`` (``session.compact``). A stop stops it like a turn.
    ``turnId`` set: an ``auto`` compaction at a step boundary inside that running turn
    (phase ``running``, under the turn's controller: a stop of it is the turn's stop),
    of every ended turn before it; its ``maintenance/end`` precedes the turn's end."""

    job: MaintenanceJob
    trigger: MaintenanceTrigger


class MaintenanceEnd(_Event, frozen=True, tag="maintenance/end"):
    """The maintenance phase's last event, durable (fsynced) before ``agent.abort`` answers:
    ``end.kind`` ``completed`` (compacted, or nothing to compact), ``aborted`` (``reason``
    the stop's cause; the history unchanged) or ``error`` (``error`` says why; the history
    unchanged). ``interrupted``: written by ``session.load`` for a maintenance a crash cut
    off. ``turnId``: its ``maintenance/start``'s."""

    end: TurnOutcome
    compacted: bool = False


class HistoryCompacted(_Event, frozen=True, tag="history/compacted"):
    """A compaction's one record (``turnId`` empty): the top-level turns it ``replaced``
    (oldest first; always whole turns, so no ``tool/call`` is parted from its
    ``tool/result``), the model's ``summary`` of them, the history's estimated size in
    tokens ``tokensBefore`` and ``tokensAfter``, and the summary request's ``usage``. From
    it on, model requests carry the summary and the turns after ``replaced``'s last."""

    replaced: tuple[str, ...]
    summary: str
    tokens_before: int
    tokens_after: int
    usage: TokenUsage


HookEvent = Literal["pre_tool_use", "post_tool_use"]
HookDecision = Literal["allow", "deny", "ask", "stop", "aborted", "failed"]


class HookDecisionEvent(_Event, frozen=True, tag="hook/decision"):
    """One configured hook ran for a call (logged before the call's result): which hook
    (``event`` and its place ``index`` in the configuration, its command), what it decided
    and why, and how long it took. ``decision`` ``stop`` is a hook's ``stopTurn``;
    ``aborted``: the call was stopped while the hook ran and its tree was killed. A pre
    hook that failed (an exit other than 0 or 2, unparsable output, its time limit) is a
    ``deny`` whose ``reason`` says so (``failed`` true); a post hook that failed is
    ``failed`` (``failed`` true): the call had run, its result is kept and the failure
    added to it."""

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
                | TurnEnd | ModelUsageEvent | MaintenanceStart | MaintenanceEnd
                | HistoryCompacted)
DurableEvent = (SessionMeta | TurnStart | UserMessageEvent | AssistantMessageEvent
                | ToolCallEvent | HookDecisionEvent | ToolResultEvent | TurnEnd
                | ModelUsageEvent | MaintenanceStart | MaintenanceEnd | HistoryCompacted)


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


class WaitingCall(msgspec.Struct, frozen=True, rename="camel", forbid_unknown_fields=True):
    """One call a stop waits on."""

    call_id: str
    tool: str
    tool_class: str = msgspec.field(name="class")
    state: str
    """The runtime's state of the call (``aborting``, ``draining``, ``hook``, ...)."""
    since: float
    """Wall-clock time (Unix seconds) the stop began waiting on it."""


class StopWaitingEvent(_Event, frozen=True, tag="stop/waiting", omit_defaults=False):
    """A stop waits on these calls (announced, never logged), on every client link that
    hears the session's events. Sent when the stop reaches a call that makes it wait
    (the call's ``tools.abort`` is out; a read-only call, abandoned at once, never does)
    and whenever the list changes (a call's abort is answered, it settles, it is forced,
    it is abandoned), by the session itself, never by polling; ``calls: []`` once it
    waits on none (when the last of them leaves the list, before the stopped turn's
    ``turn/end``; failing that, when the stop settles). A stop that never waits on a call
    sends none. ``seq`` is the last durable event's, as for every announced event (not a
    position of its own): the latest ``stop/waiting`` received is the list. A client
    that attaches while a stop waits is sent the current one. ``agent.force`` forces
    them."""

    calls: tuple[WaitingCall, ...]


AnnouncedEvent = (SessionEvent | ToolAbortEvent | AssistantDeltaEvent | ToolStartedEvent
                  | StopWaitingEvent)
