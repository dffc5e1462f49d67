"""The client link: a client (editor, renderer, CLI) talking to the runtime."""

from __future__ import annotations

from typing import Annotated, Any, Literal

import msgspec

from protocol.causes import Cause, ClientCause, UserCause
from protocol.messages.common import McpServerConfig, PluginServerStatus, Struct
from protocol.messages.events import AnnouncedEvent, StopReason
from protocol.tools import ToolResult

PermissionMode = Literal["ask", "accept-edits", "auto"]
SandboxMode = Literal["workspace-write", "read-only", "off"]


class ScriptedProviderConfig(Struct, frozen=True, tag_field="kind", tag="scripted"):
    """Model responses from a script (inline, or a JSON file on the daemon's machine)."""

    script: list[list[dict[str, Any]]] | None = None
    path: str | None = None


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
    """The session's plugin (MCP) servers, started and listed; a failed one has ``error``."""


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
    session_id: str


class SessionCloseParams(Struct, frozen=True):
    session_id: str


class SessionLoadResult(Struct, frozen=True):
    session_id: str
    workspace: str
    events: int
    recovered: bool


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
    null, ``settledMs`` 0 and ``toolCalls`` empty."""

    outcome: Literal["aborted", "idle"]
    turn_id: str | None = None
    cause: Cause | None = None
    settled_ms: float = 0.0
    tool_calls: tuple[AbortedCall, ...] = ()


class ClientPermissionRequestParams(Struct, frozen=True):
    """The host's permission prompt as the runtime puts it to its client.

    ``turnId`` and ``callId`` are those of the call's ``tool/call`` event, so a client
    matches the prompt to the call it shows. A call outside any turn (``debug.runTool``)
    has ``turnId`` null and the ``callId`` that ``debug.runTool`` answers. ``requestId``
    names the prompt in ``permission.withdrawn``. Every field is always on the wire.
    """

    session_id: str
    request_id: str
    turn_id: str | None
    call_id: str
    tool: str
    args_preview: str
    risk: Literal["low", "medium", "high"]


class SessionEventParams(Struct, frozen=True):
    session_id: str
    event: AnnouncedEvent
