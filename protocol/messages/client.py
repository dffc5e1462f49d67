"""The client link: a client (editor, renderer, CLI) talking to the runtime."""

from __future__ import annotations

from typing import Annotated, Any, Literal

import msgspec

from protocol.causes import Cause, ClientCause, UserCause
from protocol.messages.common import McpServerConfig, PluginServerStatus, Struct
from protocol.messages.events import AnnouncedEvent, StopReason, TokenUsage
from protocol.tools import ToolResult

PermissionMode = Literal["ask", "accept-edits", "auto"]
ContextWindow = Annotated[int, msgspec.Meta(ge=1)]
CompactAt = Annotated[float, msgspec.Meta(gt=0, le=1)]
SandboxMode = Literal["workspace-write", "read-only", "off"]


class ScriptedProviderConfig(Struct, frozen=True, tag_field="kind", tag="scripted"):
    """Model responses from a script (inline, or a JSON file on the daemon's machine)."""

    script: list[list[dict[str, Any]]] | None = None
    path: str | None = None
    context_window: ContextWindow | None = None
    """The model's context window in tokens (default: 128000, docs/providers.md);
    the history is compacted before a turn when it would fill more than ``compactAt`` of
    it (default 0.8)."""
    compact_at: CompactAt | None = None


Temperature = Annotated[float, msgspec.Meta(ge=0, le=2)]
MaxTokens = Annotated[int, msgspec.Meta(ge=1)]
ReasoningEffort = Literal["minimal", "low", "medium", "high"]


class OpenAIProviderConfig(Struct, frozen=True, tag_field="kind", tag="openai"):
    """An OpenAI-compatible Chat Completions server (docs/providers.md). ``baseUrl``
    and ``model`` left out come from ``OPENAI_BASE_URL`` and ``OPENAI_MODEL`` (the
    session records the model it was opened with); the key is read from the
    variable ``apiKeyEnv`` names (default ``OPENAI_API_KEY``), never written here.
    The model settings are sent only when set: ``maxTokens`` as ``max_tokens``,
    ``maxCompletionTokens`` as ``max_completion_tokens`` (what OpenAI's reasoning
    models require), ``reasoningEffort`` as ``reasoning_effort``."""

    base_url: str | None = None
    model: str | None = None
    api_key_env: str | None = None
    temperature: Temperature | None = None
    max_tokens: MaxTokens | None = None
    max_completion_tokens: MaxTokens | None = None
    reasoning_effort: ReasoningEffort | None = None
    context_window: ContextWindow | None = None
    """The model's context window in tokens (default: 128000, docs/providers.md);
    the history is compacted before a turn when it would fill more than ``compactAt`` of
    it (default 0.8)."""
    compact_at: CompactAt | None = None


class AnthropicProviderConfig(Struct, frozen=True, tag_field="kind", tag="anthropic"):
    """Anthropic's Messages API (docs/providers.md). ``baseUrl`` and ``model`` left
    out come from ``ANTHROPIC_BASE_URL`` (default ``https://api.anthropic.com``) and
    ``ANTHROPIC_MODEL``; the key from the variable ``apiKeyEnv`` names (default
    ``ANTHROPIC_API_KEY``). ``maxTokens`` (the API requires one) defaults to 8192,
    or to ``thinkingBudget`` + 8192 when thinking is on; ``thinkingBudget`` (at
    least 1024 tokens) turns extended thinking on. ``promptCaching`` marks cache
    breakpoints (tools, system prompt, newest message) so each step reuses the last."""

    base_url: str | None = None
    model: str | None = None
    api_key_env: str | None = None
    temperature: Annotated[float, msgspec.Meta(ge=0, le=1)] | None = None
    max_tokens: MaxTokens | None = None
    thinking_budget: Annotated[int, msgspec.Meta(ge=1024)] | None = None
    prompt_caching: bool = True
    context_window: ContextWindow | None = None
    """The model's context window in tokens (default: 200000, docs/providers.md);
    the history is compacted before a turn when it would fill more than ``compactAt`` of
    it (default 0.8)."""
    compact_at: CompactAt | None = None


ProviderConfig = ScriptedProviderConfig | OpenAIProviderConfig | AnthropicProviderConfig


class SessionNewParams(Struct, frozen=True):
    workspace: str
    permission_mode: PermissionMode = "ask"
    provider: ProviderConfig | None = None
    mcp_servers: tuple[McpServerConfig, ...] = ()
    system_prompt: str | None = None
    """Replaces the daemon's system prompt for this session (docs/configuration.md);
    the workspace's ``AGENTS.md`` is still added after it."""
    sandbox: SandboxMode | None = None
    """Narrows the daemon's sandbox mode for this session (docs/sandbox.md): from ``off``
    to ``workspace-write`` or ``read-only``, from ``workspace-write`` to ``read-only``. A
    wider mode than the daemon's is refused (``INVALID_PARAMS``); null keeps the daemon's."""


class SessionNewResult(Struct, frozen=True):
    session_id: str
    plugin_servers: tuple[PluginServerStatus, ...] = ()
    """The session's plugin (MCP) servers and their state: ``running`` (with its tools),
    ``failed`` (``error``), or ``untrusted`` (declared by a workspace file the user has not
    trusted: not started; ``command``, ``args`` and ``cwd`` say what it would run)."""


class SessionInfo(Struct, frozen=True):
    session_id: str
    workspace: str
    permission_mode: PermissionMode | None
    """Null only for an unreadable log whose first line cannot be read either."""
    created_at: float
    loaded: bool = True  # open in this daemon; else only in the data directory
    interrupted: bool = False  # its log ends inside a turn: session.load will close it
    error: str | None = None
    """Why its log cannot be read (``session.load`` fails until it is repaired; see
    docs/operations.md); null for a readable log. For a log whose first line is unreadable
    too, ``workspace`` is empty and ``createdAt`` is the file's modification time."""
    usage: TokenUsage | None = None
    """The session's token usage, summed over its log's ``model/usage`` records (turns and
    compactions); null when it made no model request."""
    phase: Literal["idle", "maintenance", "running"] | None = None
    """The agent's phase, for a session loaded in this daemon (null otherwise)."""

    title: str | None = None
    """For a session picker: the first prompt's first line, shortened to 80 characters
    (absent before the first prompt)."""
    last_activity: float | None = None
    """When its log was last written (Unix seconds)."""
    turns: int = 0
    """Top-level turns it has begun (absent: none)."""
    running: bool = False
    """A turn is running or queued (absent: no)."""
    stopping: bool = False
    """A stop of its turn is waiting for calls to settle (absent: no)."""


class SessionCompactParams(Struct, frozen=True):
    session_id: str


class SessionCompactResult(Struct, frozen=True, omit_defaults=False):
    """How a ``session.compact`` ended: ``compacted`` (``replaced`` the turns the summary
    replaced, ``tokensBefore``/``tokensAfter`` the history's estimated size), ``nothing``
    (too few turns to compact: the recent turn is always kept), ``aborted`` (a stop; the
    history unchanged), ``failed`` (``error`` says why; the history unchanged), ``busy`` (a
    turn or another maintenance runs: nothing done). Every field is always on the wire."""

    outcome: Literal["compacted", "nothing", "aborted", "failed", "busy"]
    replaced: tuple[str, ...] = ()
    tokens_before: int = 0
    tokens_after: int = 0
    error: str | None = None


class SessionListResult(Struct, frozen=True):
    sessions: tuple[SessionInfo, ...]


class DebugRunToolParams(Struct, frozen=True):
    """Run one host tool outside any turn, as a turn would (for debugging a tool or a
    host setting; nothing is logged)."""

    session_id: str
    tool: str
    args: dict[str, object]


class DebugRunToolResult(Struct, frozen=True):
    call_id: str
    result: ToolResult


class SessionLoadParams(Struct, frozen=True):
    """``mcpServers``, when given, replace the session's stored plugin servers for as long
    as it stays loaded (an editor reopening a session sends the servers it has now); absent,
    the servers its ``session.new`` named are started again."""

    session_id: str
    mcp_servers: tuple[McpServerConfig, ...] | None = None


class SessionSetModeParams(Struct, frozen=True):
    session_id: str
    permission_mode: PermissionMode


class SessionCloseParams(Struct, frozen=True):
    session_id: str


class SessionLoadResult(Struct, frozen=True):
    session_id: str
    workspace: str
    events: int
    recovered: bool
    plugin_servers: tuple[PluginServerStatus, ...] = ()
    """As ``session.new``'s, when this load opened the session (empty when it was open
    already, or has no plugin servers)."""


class AgentPromptParams(Struct, frozen=True):
    session_id: str
    text: str


class AgentPromptResult(Struct, frozen=True):
    turn_id: str | None
    stop_reason: StopReason


class AgentAbortParams(Struct, frozen=True):
    session_id: str
    cause: ClientCause = UserCause()
    keep_inbox: bool = False


class AbortedCall(Struct, frozen=True, omit_defaults=False):
    """A call the stop reached; ``code`` is null when it succeeded before the stop.
    Every field is always on the wire."""

    call_id: str
    tool: str
    tool_class: str = msgspec.field(name="class")
    code: str | None = None


class AgentAbortResult(Struct, frozen=True, omit_defaults=False):
    """Every field is always on the wire: an ``idle`` answer has ``turnId`` and ``cause``
    null, ``settledMs`` 0 and ``toolCalls`` empty.

    ``outcome`` is what the stopped turn's durable ``turn/end`` says: ``aborted``, or
    ``error`` when the turn ended with an error while the stop settled (its host crashed,
    or a record could not be written on a full disk): the turn is over, ``error`` is the
    turn/end's error and ``toolCalls`` say how each call ended. ``idle``: nothing was
    stopped (nothing ran, or the turn completed on its own first). ``error`` is null
    unless ``outcome`` is ``error``."""

    outcome: Literal["aborted", "idle", "error"]
    turn_id: str | None = None
    cause: Cause | None = None
    settled_ms: float = 0.0
    tool_calls: tuple[AbortedCall, ...] = ()
    error: str | None = None


class ClientPermissionRequestParams(Struct, frozen=True):
    """The host's permission prompt as the runtime puts it to its client.

    ``turnId`` and ``callId`` are those of the call's ``tool/call`` event, so a client
    matches the prompt to the call it shows. A call outside any turn (``debug.runTool``)
    has ``turnId`` null and the ``callId`` that ``debug.runTool`` answers. ``requestId``
    names the prompt in ``permission.withdrawn``. Every field is always on the wire.
    ``argsPreview`` is the call's whole arguments as JSON (past 256 Ki characters, cut
    with a marker ``… [N more characters not shown]``): show all of it before a decision.
    """

    session_id: str
    request_id: str
    turn_id: str | None
    call_id: str
    tool: str
    args_preview: str
    risk: Literal["low", "medium", "high"]


TrustDecision = Literal["trust", "not-now", "never"]


class WorkspaceTrustParams(Struct, frozen=True):
    """The runtime asks whether what a workspace declares may run (docs/plugins.md,
    "Workspace trust"): ``file`` (relative to ``workspace``, the real path) with the content
    ``digest`` declares ``servers``, each with its ``command``, ``args`` and ``cwd`` in full
    (``state`` ``untrusted``). Nothing of it has run. Answers: ``trust`` (this content, in
    this workspace, from now on: remembered outside the workspace), ``not-now`` (this
    session opens without them; asked again next time), ``never`` (this content is never
    run nor asked about again; a changed file is asked about)."""

    session_id: str
    workspace: str
    file: str
    digest: str
    servers: tuple[PluginServerStatus, ...]


class WorkspaceTrustResult(Struct, frozen=True):
    decision: TrustDecision


class SessionEventParams(Struct, frozen=True):
    session_id: str
    event: AnnouncedEvent
