"""ACP v1 messages as msgspec Structs, and the method tables of the ACP link.

Field names follow the official schema (``acp.schema`` of agent-client-protocol 0.12.1).
Incoming types accept unknown fields: ACP is extensible (``_meta``, fields of newer
minor versions), and refusing them would break editors that are ahead of us. Outgoing
optional fields are ``UNSET`` when absent, so they are omitted rather than sent as null.
"""

from __future__ import annotations

from typing import Any, Literal

import msgspec
from msgspec import UNSET, UnsetType

from protocol.methods import Direction, MethodSpec, RequestId

PROTOCOL_VERSION = 1

StopReason = Literal["end_turn", "max_tokens", "max_turn_requests", "refusal", "cancelled"]
ToolKind = Literal["read", "edit", "delete", "move", "search", "execute", "think", "fetch",
                   "switch_mode", "other"]
ToolCallStatus = Literal["pending", "in_progress", "completed", "failed"]
PermissionOptionKind = Literal["allow_once", "allow_always", "reject_once", "reject_always"]


class AcpStruct(msgspec.Struct, frozen=True, rename="camel"):
    """Base of the ACP messages: camelCase on the wire, unknown fields ignored."""


# -- content ---------------------------------------------------------------------------

class TextBlock(AcpStruct, frozen=True, tag_field="type", tag="text"):
    text: str


class ImageBlock(AcpStruct, frozen=True, tag_field="type", tag="image"):
    mime_type: str = ""


class AudioBlock(AcpStruct, frozen=True, tag_field="type", tag="audio"):
    mime_type: str = ""


class ResourceLinkBlock(AcpStruct, frozen=True, tag_field="type", tag="resource_link"):
    uri: str
    name: str = ""


class EmbeddedResource(AcpStruct, frozen=True):
    uri: str
    text: str | None = None  # absent for a blob resource


class ResourceBlock(AcpStruct, frozen=True, tag_field="type", tag="resource"):
    resource: EmbeddedResource


ContentBlock = TextBlock | ImageBlock | AudioBlock | ResourceLinkBlock | ResourceBlock


# -- initialize -------------------------------------------------------------------------

class InitializeRequest(AcpStruct, frozen=True):
    protocol_version: int | str  # some editors send a date string; we answer 1 regardless
    client_capabilities: dict[str, Any] = msgspec.field(default_factory=dict)
    client_info: dict[str, Any] | None = None


class PromptCapabilities(AcpStruct, frozen=True):
    image: bool = False
    audio: bool = False
    embedded_context: bool = True  # text resources are inlined into the prompt


class McpCapabilities(AcpStruct, frozen=True):
    http: bool = False  # only stdio MCP servers: the host starts them
    sse: bool = False


class AgentCapabilities(AcpStruct, frozen=True):
    load_session: bool = True
    prompt_capabilities: PromptCapabilities = PromptCapabilities()
    mcp_capabilities: McpCapabilities = McpCapabilities()


class Implementation(AcpStruct, frozen=True):
    name: str
    version: str
    title: str | UnsetType = UNSET


class InitializeResponse(AcpStruct, frozen=True):
    protocol_version: int
    agent_capabilities: AgentCapabilities
    agent_info: Implementation
    auth_methods: tuple[Any, ...] = ()


# -- sessions ---------------------------------------------------------------------------

class EnvVariable(AcpStruct, frozen=True):
    name: str
    value: str


class McpServerStdio(AcpStruct, frozen=True):
    """A stdio MCP server (ACP's untagged variant; http/sse ones carry ``type``)."""

    name: str
    command: str
    args: tuple[str, ...] = ()
    env: tuple[EnvVariable, ...] = ()


class NewSessionRequest(AcpStruct, frozen=True):
    cwd: str
    # Left untyped here: the variants are told apart by an optional ``type`` field, which a
    # msgspec union cannot do; ``server.mcp_servers`` converts them.
    mcp_servers: tuple[dict[str, Any], ...] = ()


class SessionMode(AcpStruct, frozen=True):
    id: str
    name: str
    description: str | None = None


class SessionModeState(AcpStruct, frozen=True):
    current_mode_id: str
    available_modes: tuple[SessionMode, ...]


class NewSessionResponse(AcpStruct, frozen=True):
    session_id: str
    modes: SessionModeState | UnsetType = UNSET


class SetSessionModeRequest(AcpStruct, frozen=True):
    session_id: str
    mode_id: str


class SetSessionModeResponse(AcpStruct, frozen=True):
    pass


class LoadSessionRequest(AcpStruct, frozen=True):
    session_id: str
    cwd: str = ""
    mcp_servers: tuple[dict[str, Any], ...] = ()


class LoadSessionResponse(AcpStruct, frozen=True):
    modes: SessionModeState | UnsetType = UNSET


class PromptRequest(AcpStruct, frozen=True):
    session_id: str
    prompt: tuple[ContentBlock, ...]


class PromptResponse(AcpStruct, frozen=True):
    stop_reason: StopReason


class CancelNotification(AcpStruct, frozen=True):
    session_id: str


class CancelRequestNotification(AcpStruct, frozen=True):
    request_id: RequestId | None


# -- session/update ---------------------------------------------------------------------

class ToolCallContent(AcpStruct, frozen=True, tag_field="type", tag="content"):
    content: TextBlock


class ToolCallDiff(AcpStruct, frozen=True, tag_field="type", tag="diff"):
    """A file change an editor can show: ``oldText`` null for a new file (or, for Write,
    a whole-file replacement: the runtime never reads the workspace)."""

    path: str
    new_text: str
    old_text: str | None = None


ToolCallBlock = ToolCallContent | ToolCallDiff


class ToolCallLocation(AcpStruct, frozen=True):
    path: str


class UserMessageChunk(AcpStruct, frozen=True, tag_field="sessionUpdate",
                       tag="user_message_chunk"):
    content: TextBlock


class AgentMessageChunk(AcpStruct, frozen=True, tag_field="sessionUpdate",
                        tag="agent_message_chunk"):
    content: TextBlock


class AgentThoughtChunk(AcpStruct, frozen=True, tag_field="sessionUpdate",
                        tag="agent_thought_chunk"):
    content: TextBlock


class CurrentModeUpdate(AcpStruct, frozen=True, tag_field="sessionUpdate",
                        tag="current_mode_update"):
    current_mode_id: str


class AvailableCommandInput(AcpStruct, frozen=True):
    hint: str


class AvailableCommand(AcpStruct, frozen=True):
    """A slash command the editor may offer: its ``name`` without the slash."""

    name: str
    description: str
    input: AvailableCommandInput | UnsetType = UNSET


class AvailableCommandsUpdate(AcpStruct, frozen=True, tag_field="sessionUpdate",
                              tag="available_commands_update"):
    available_commands: tuple[AvailableCommand, ...]


class ToolCallStart(AcpStruct, frozen=True, tag_field="sessionUpdate", tag="tool_call"):
    tool_call_id: str
    title: str
    kind: ToolKind
    status: ToolCallStatus
    raw_input: dict[str, Any] | UnsetType = UNSET
    locations: tuple[ToolCallLocation, ...] | UnsetType = UNSET
    content: tuple[ToolCallBlock, ...] | UnsetType = UNSET


class ToolCallUpdate(AcpStruct, frozen=True):
    """The fields of a tool call that change; absent ones are kept by the client."""

    tool_call_id: str
    status: ToolCallStatus | UnsetType = UNSET
    title: str | UnsetType = UNSET
    kind: ToolKind | UnsetType = UNSET
    content: tuple[ToolCallBlock, ...] | UnsetType = UNSET
    raw_input: dict[str, Any] | UnsetType = UNSET
    raw_output: dict[str, Any] | UnsetType = UNSET


class ToolCallProgress(ToolCallUpdate, frozen=True, tag_field="sessionUpdate",
                       tag="tool_call_update"):
    pass


SessionUpdate = (UserMessageChunk | AgentMessageChunk | AgentThoughtChunk | ToolCallStart
                 | ToolCallProgress | CurrentModeUpdate | AvailableCommandsUpdate)


class SessionNotification(AcpStruct, frozen=True):
    session_id: str
    update: SessionUpdate


# -- session/request_permission ---------------------------------------------------------

class PermissionOption(AcpStruct, frozen=True):
    option_id: str
    name: str
    kind: PermissionOptionKind


class RequestPermissionRequest(AcpStruct, frozen=True):
    session_id: str
    tool_call: ToolCallUpdate
    options: tuple[PermissionOption, ...]


class SelectedOutcome(AcpStruct, frozen=True, tag_field="outcome", tag="selected"):
    option_id: str


class CancelledOutcome(AcpStruct, frozen=True, tag_field="outcome", tag="cancelled"):
    pass


class RequestPermissionResponse(AcpStruct, frozen=True):
    outcome: SelectedOutcome | CancelledOutcome


# -- the link ---------------------------------------------------------------------------

CANCEL_REQUEST = "$/cancel_request"

CLIENT_TO_AGENT = Direction("ACP client → agent", [
    MethodSpec("initialize", InitializeRequest, InitializeResponse, "ACP handshake."),
    MethodSpec("session/new", NewSessionRequest, NewSessionResponse,
               "Open a session on cwd; mcpServers become its plugin tools."),
    MethodSpec("session/load", LoadSessionRequest, LoadSessionResponse,
               "Replay a session as session/update, then answer."),
    MethodSpec("session/set_mode", SetSessionModeRequest, SetSessionModeResponse,
               "Switch the session's permission mode (`ask`, `accept-edits`, `auto`)."),
    MethodSpec("session/prompt", PromptRequest, PromptResponse,
               "Run a turn; answers with its stop reason (`cancelled` after a cancel)."),
    MethodSpec("session/cancel", CancelNotification, None, "Stop the session's turn."),
    MethodSpec(CANCEL_REQUEST, CancelRequestNotification, None,
               "Cancel one request (a prompt: as session/cancel)."),
])

AGENT_TO_CLIENT = Direction("ACP agent → client", [
    MethodSpec("session/update", SessionNotification, None, "Streamed session content."),
    MethodSpec("session/request_permission", RequestPermissionRequest,
               RequestPermissionResponse, "Ask the user whether a tool call may run."),
    MethodSpec(CANCEL_REQUEST, CancelRequestNotification, None,
               "A permission request we no longer wait for."),
])
