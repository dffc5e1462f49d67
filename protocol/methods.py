"""The method table of every link direction, and the tagged unions built from it.

Each direction's requests and notifications form one msgspec tagged union
(tag field ``method``), so a single ``Decoder`` turns a frame into a typed
message with typed params. The table is also the source of ``docs/protocol.md``.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import Any, Literal

import msgspec

from protocol.messages.client import (
    AgentAbortParams,
    AgentAbortResult,
    AgentPromptParams,
    AgentPromptResult,
    ClientPermissionRequestParams,
    DebugRunToolParams,
    DebugRunToolResult,
    SessionCloseParams,
    SessionCompactParams,
    SessionCompactResult,
    SessionEventParams,
    SessionListResult,
    SessionLoadParams,
    SessionLoadResult,
    SessionNewParams,
    SessionNewResult,
    SessionSetModeParams,
    WorkspaceTrustParams,
    WorkspaceTrustResult,
)
from protocol.messages.common import Empty, InitializeParams, InitializeResult
from protocol.messages.host import (
    HooksAbortParams,
    HooksAbortResult,
    HooksRunParams,
    HooksRunResult,
    HostStatsResult,
    PermissionRequestParams,
    PermissionRequestResult,
    PermissionWithdrawnParams,
    PluginsListParams,
    PluginsListResult,
    SessionCloseHostParams,
    SessionOpenParams,
    SessionOpenResult,
    ToolsAbortParams,
    ToolsAbortResult,
    ToolsExecuteParams,
    ToolsForceParams,
    ToolsForceResult,
    ToolsOutputParams,
    ToolsStartedParams,
)
from protocol.messages.ops import (
    OpsEventParams,
    OpsForceParams,
    OpsForceResult,
    OpsRestartHostResult,
    OpsSessionParams,
    OpsSessionsResult,
    OpsStatsResult,
    OpsTailParams,
    OpsTailResult,
)
from protocol.messages.renderer import (
    AgentForceParams,
    AgentForceResult,
    SessionAttachParams,
    SessionAttachResult,
)
from protocol.tools import ToolResult

RequestId = int | str


@dataclass(frozen=True)
class MethodSpec:
    name: str
    params: type[msgspec.Struct]
    result: type[msgspec.Struct] | None  # None: a notification
    doc: str

    @property
    def is_notification(self) -> bool:
        return self.result is None

    @cached_property
    def result_decoder(self) -> msgspec.json.Decoder[Any]:
        assert self.result is not None
        return msgspec.json.Decoder(self.result)


def _message_struct(spec: MethodSpec) -> type[msgspec.Struct]:
    """A whole JSON-RPC message of one method, tagged by its method name."""
    fields: list[tuple[str, Any] | tuple[str, Any, Any]] = [("jsonrpc", Literal["2.0"])]
    if not spec.is_notification:
        fields.append(("id", RequestId))
    try:
        default = spec.params()
    except TypeError:  # params with required fields must be sent
        fields.append(("params", spec.params))
    else:
        fields.append(("params", spec.params, default))
    kind = "Notification" if spec.is_notification else "Request"
    return msgspec.defstruct(
        spec.name.title().replace(".", "").replace("/", "") + kind,
        fields,
        tag_field="method",
        tag=spec.name,
        frozen=True,
        forbid_unknown_fields=True,
    )


class Direction:
    """The requests and notifications one side may send the other on one link."""

    def __init__(self, name: str, specs: list[MethodSpec]) -> None:
        self.name = name
        self.specs: dict[str, MethodSpec] = {s.name: s for s in specs}
        self._structs = tuple(_message_struct(s) for s in specs)
        union: Any = self._structs[0]
        for struct in self._structs[1:]:
            union = union | struct
        self.decoder: msgspec.json.Decoder[Any] = msgspec.json.Decoder(union)

    def __contains__(self, method: str) -> bool:
        return method in self.specs


INITIALIZE_DOC = (
    "Handshake; the first request on a link. A different major protocol version "
    "fails with PROTOCOL_MISMATCH (`data.supported` gives this side's version). Until a "
    "successful initialize, every other request but `shutdown` fails NOT_INITIALIZED; a "
    "failed initialize leaves the link uninitialized (after a success, it changes nothing)."
)

CLIENT_TO_RUNTIME = Direction("client → runtime", [
    MethodSpec("initialize", InitializeParams, InitializeResult, INITIALIZE_DOC),
    MethodSpec("session.new", SessionNewParams, SessionNewResult,
               "Open a session on an absolute workspace directory."),
    MethodSpec("session.list", Empty, SessionListResult,
               "The sessions of this daemon, and those in its data directory. A log that "
               "cannot be read is listed too, with `error` saying why (session.load fails "
               "on it until it is repaired; its `workspace` is empty when even its first "
               "line is unreadable)."),
    MethodSpec("session.load", SessionLoadParams, SessionLoadResult,
               "Replay a session's log as session.event notifications, then answer. A log "
               "that ends inside a turn (the runtime died) is first closed with honest "
               "records: a synthetic ABORTED result per unanswered call, turn/end interrupted."),
    MethodSpec("session.setMode", SessionSetModeParams, Empty,
               "Change a loaded session's permission mode (`ask`, `accept-edits`, `auto`) "
               "from its next permission decision on; the session-wide allow and deny "
               "answers given so far are kept. It holds while the session stays loaded: its "
               "log keeps the mode it was created with."),
    MethodSpec("session.close", SessionCloseParams, Empty,
               "Stop the session's turn (cause `disposed`) and answer once it is settled and "
               "the session is released: its log closed (it stays loadable), its plugin "
               "servers stopped, its queued prompts answered `cancelled`. While it closes, "
               "prompts are refused (NOT_FOUND), agent.abort joins the stop, and operators "
               "still see and may force its calls. A session whose session.new has not "
               "answered yet (its id is in its `session/meta` event) is undone at once: its "
               "starting plugin servers are killed and session.new answers REQUEST_CANCELLED "
               "(-32800); this is how a client cancels a slow session.new."),
    MethodSpec("agent.prompt", AgentPromptParams, AgentPromptResult,
               "Queue a prompt; answers when its turn ends. A stopped turn answers "
               "`cancelled`, never an error."),
    MethodSpec("agent.abort", AgentAbortParams, AgentAbortResult,
               "Stop the session's turn; answers only after turn/end is durable. Concurrent "
               "and repeated aborts join the same settlement. Idle: outcome `idle`, no-op. "
               "A compaction (the `maintenance` phase) is stopped the same way: outcome "
               "`aborted` with `turnId` null, after its maintenance/end is durable."),
    MethodSpec("session.compact", SessionCompactParams, SessionCompactResult,
               "Compact the session's history now: in the `maintenance` phase "
               "(maintenance/start, then history/compacted if it succeeds, then a durable "
               "maintenance/end), the model summarises every top-level turn but the most "
               "recent one and later requests carry that summary instead of them. Only while "
               "idle (else `busy`). agent.abort stops it like a turn (outcome `aborted`, the "
               "history unchanged) and answers once its maintenance/end is durable; prompts "
               "sent meanwhile wait in the inbox."),
    MethodSpec("session.attach", SessionAttachParams, SessionAttachResult,
               "Socket link only: replay the session's durable events after `afterSeq` to "
               "this client as session.event notifications, then stream its live events and "
               "permission prompts to it (every attached client is asked; the first answer "
               "wins, the others get permission.withdrawn). The session must be loaded "
               "(session.load first): NOT_FOUND otherwise. docs/renderers.md."),
    MethodSpec("agent.force", AgentForceParams, AgentForceResult,
               "Force the calls a stop of the session waits on (the one named by `callId`, "
               "else every one): as `quiesce ops force`, each is recorded `forced`, its "
               "effects unknown. The pending agent.abort then answers."),
    MethodSpec("debug.runTool", DebugRunToolParams, DebugRunToolResult,
               "Run one host tool in a session, outside any turn (debugging aid)."),
    MethodSpec("shutdown", Empty, Empty,
               "Stop the host and exit after answering. EOF on stdin does the same. A "
               "`session.new` written before it finishes opening first; a request written "
               "after it is refused `SHUTTING_DOWN` (an `agent.abort` joins the stop)."),
])

RUNTIME_TO_CLIENT = Direction("runtime → client", [
    MethodSpec("session.event", SessionEventParams, None,
               "Every durable event, after it is on disk, and progress (tool/progress, "
               "tool/abort), in order."),
    MethodSpec("permission.request", ClientPermissionRequestParams, PermissionRequestResult,
               "Ask the user whether a tool call may run. `turnId` and `callId` are those of "
               "the call's tool/call event (announced before the prompt)."),
    MethodSpec("permission.withdrawn", PermissionWithdrawnParams, None,
               "A pending permission request was withdrawn, by a stop of its call or because "
               "nobody answered within the host's permission timeout (120 s by default; the "
               "call is then denied); its answer is refused."),
    MethodSpec("workspace.trust", WorkspaceTrustParams, WorkspaceTrustResult,
               "Ask the user whether the servers a workspace's .quiesce/mcp.json declares may "
               "run (sent while session.new or session.load opens a session, before any of "
               "them starts). An error answer, or none within the daemon's trust timeout "
               "(60 s by default), is `not-now`: the session opens without them."),
])

RUNTIME_TO_HOST = Direction("runtime → host", [
    MethodSpec("initialize", InitializeParams, InitializeResult, INITIALIZE_DOC),
    MethodSpec("session.open", SessionOpenParams, SessionOpenResult,
               "Tell the host a session's workspace, permission mode and plugin servers "
               "(added to, or replacing by name, those of the workspace's .quiesce/mcp.json); "
               "bad plugin configuration is INVALID_PARAMS. Starts no server. Answers the "
               "session's sandbox as enforced (mode as narrowed, network, writable roots)."),
    MethodSpec("plugins.list", PluginsListParams, PluginsListResult,
               "Start the session's plugin (MCP) servers not yet running and list their "
               "tools, named mcp__<server>__<tool>; a server that fails to start is reported "
               "with its error, not raised."),
    MethodSpec("session.close", SessionCloseHostParams, Empty,
               "Forget a session whose turns are settled: its plugin servers are stopped "
               "(their trees killed). Unknown sessions are a no-op."),
    MethodSpec("tools.execute", ToolsExecuteParams, ToolResult,
               "Run one tool call; always answers with exactly one tool result. A call beyond "
               "the host's admission queue ends HOST_OVERLOADED; a Write/Edit path outside the "
               "workspace is refused PATH_OUTSIDE_WORKSPACE before any permission prompt. A "
               "read-only call that is stopped ends ABORTED with `details.discarded` (its "
               "result is dropped)."),
    MethodSpec("tools.abort", ToolsAbortParams, ToolsAbortResult,
               "Stop one tool call. Answers at once, without waiting for the call: its "
               "tools.execute answers later with the call's one result. Idempotent: a "
               "repeated abort of a call in flight gets the first one's answer and the first "
               "cause stays; an abort after the result was sent answers `settled`. An abort "
               "for a call the host does not know yet leaves a tombstone keyed by (sessionId, "
               "callId, tool), answered `tombstoned`: the matching tools.execute ends "
               "ABORTED_BEFORE_DISPATCH without asking permission or starting work; another "
               "tool reusing the call id is not affected. A tombstone expires after 60 s; at "
               "most 10 000 are kept, the oldest dropped first (host settings `tombstone_ttl`, "
               "`tombstone_capacity`)."),
    MethodSpec("tools.force", ToolsForceParams, ToolsForceResult,
               "Stop waiting for a stopped mutating or plugin call whose body is stuck (an "
               "operator's decision); the call ends ABORTED with details.forced."),
    MethodSpec("hooks.run", HooksRunParams, HooksRunResult,
               "Run one hook command (the daemon's configuration, never a workspace's) as a "
               "process tree in the session's workspace: its own session and cgroup, the "
               "input on stdin, output bounded; killed (TERM, the kill grace, KILL) at its "
               "`timeout` or by hooks.abort. Answers once the tree is gone."),
    MethodSpec("hooks.abort", HooksAbortParams, HooksAbortResult,
               "Kill a running hook's tree (a stop of its call). Answers at once; its "
               "hooks.run answers `stopped` once the tree is gone (or with how it ended, if "
               "it ended first)."),
    MethodSpec("host.stats", Empty, HostStatsResult,
               "Counters: calls in flight, tombstones (live, expired, evicted), admission; "
               "and each call in flight with its phase (the runtime's `ops.sessions` shows "
               "a call in `admission` as `queued`). Also the runtime's liveness ping."),
    MethodSpec("shutdown", Empty, Empty,
               "Stop every call, kill every process tree, exit. Calls still running after the "
               "kill grace plus the host's `stop_timeout` (5 s) are forced (ABORTED, "
               "`details.forced`). EOF on stdin does the same."),
])

HOST_TO_RUNTIME = Direction("host → runtime", [
    MethodSpec("permission.request", PermissionRequestParams, PermissionRequestResult,
               "Ask (through the runtime, the client) whether a call may run. An error answer "
               "is taken as a deny. If the link closes before an answer, the call ends "
               "ABORTED_BEFORE_DISPATCH."),
    MethodSpec("permission.withdrawn", PermissionWithdrawnParams, None,
               "A pending permission request was withdrawn: its call was stopped, or the "
               "prompt timed out after the host's `permission_timeout` (120 s; the call is "
               "denied). A later answer is ignored."),
    MethodSpec("tools.started", ToolsStartedParams, None,
               "A call's body starts now (after its permission and its admission slot), "
               "before any of its output; at most once per call, never for a call that "
               "ends before its body (ABORTED_BEFORE_DISPATCH, TOOL_DENIED, ...). The "
               "runtime announces it to clients as `tool/started`."),
    MethodSpec("tools.output", ToolsOutputParams, None,
               "Ordered, bounded progress output of a running call."),
])

OPS_TO_RUNTIME = Direction("ops → runtime", [
    MethodSpec("initialize", InitializeParams, InitializeResult, INITIALIZE_DOC),
    MethodSpec("ops.sessions", Empty, OpsSessionsResult,
               "Every session of the daemon: phase, current turn and its age, how long a stop "
               "has been waiting (`stuck` past the daemon's threshold), in-flight calls with "
               "tool, class, state and age. A call is `queued` while the runtime's scheduler "
               "has not started it or while it waits in the host's admission queue (the live "
               "host is asked, for at most 1 s, never started for it)."),
    MethodSpec("ops.abort", OpsSessionParams, AgentAbortResult,
               "Stop the session's turn with cause `operator`; answers when settled, like "
               "agent.abort. A client that stops waiting does not withdraw the stop."),
    MethodSpec("ops.force", OpsForceParams, OpsForceResult,
               "For a mutating or plugin call stuck after a stop: the host stops waiting for "
               "it (its body is abandoned; a mutating one still completes atomically) and the "
               "call is recorded ABORTED with details `forced: true`."),
    MethodSpec("ops.restartHost", Empty, OpsRestartHostResult,
               "Stop the host process and start a new one."),
    MethodSpec("ops.stats", Empty, OpsStatsResult,
               "Counters and stop-latency figures of the daemon."),
    MethodSpec("ops.tail", OpsTailParams, OpsTailResult,
               "Send every announced event (of one session, or all) as ops.event "
               "notifications until the tail ends: the client closes its sending side, or "
               "the daemon stops. Events a slow reader cannot take are counted and skipped."),
])

RUNTIME_TO_OPS = Direction("runtime → ops", [
    MethodSpec("ops.event", OpsEventParams, None,
               "One announced event of a session, while an ops.tail runs; `dropped` counts "
               "the events skipped just before it."),
])

DIRECTIONS = (CLIENT_TO_RUNTIME, RUNTIME_TO_CLIENT, RUNTIME_TO_HOST, HOST_TO_RUNTIME,
              OPS_TO_RUNTIME, RUNTIME_TO_OPS)
