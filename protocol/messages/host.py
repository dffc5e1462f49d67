"""The host link: the runtime talking to its host process (and back)."""

from __future__ import annotations

from typing import Any, Literal

import msgspec

from protocol.messages.client import PermissionMode
from protocol.messages.common import McpServerConfig, PluginServerStatus, Struct

AbortCause = Literal["user", "parent", "hook", "disposed", "operator", "timeout"]
CallState = Literal[
    "unknown", "tombstoned", "admission", "permission-pending", "running", "aborting", "settled"
]


class SessionOpenParams(Struct, frozen=True):
    session_id: str
    workspace: str
    permission_mode: PermissionMode = "ask"
    mcp_servers: tuple[McpServerConfig, ...] = ()


class ToolsExecuteParams(Struct, frozen=True):
    session_id: str
    call_id: str
    tool: str
    args: dict[str, Any]


class ToolsAbortParams(Struct, frozen=True):
    session_id: str
    call_id: str
    tool: str
    cause: AbortCause = "user"
    reason: str | None = None


class ToolsAbortResult(Struct, frozen=True):
    """``state`` is the call's phase when the (first) abort reached it."""

    found: bool
    state: CallState
    body_invoked: bool = False


class ToolsOutputParams(Struct, frozen=True):
    session_id: str
    call_id: str
    seq: int
    stream: Literal["stdout", "stderr", "progress"]
    text: str


class PermissionRequestParams(Struct, frozen=True):
    session_id: str
    request_id: str
    call_id: str
    tool: str
    args_preview: str
    risk: Literal["low", "medium", "high"] = "medium"


class PermissionRequestResult(Struct, frozen=True):
    decision: Literal["allow-once", "allow-session", "deny", "deny-session"]


class PermissionWithdrawnParams(Struct, frozen=True):
    session_id: str
    request_id: str


class HostStatsResult(Struct, frozen=True):
    calls_in_flight: int
    tombstones: int
    tombstones_expired: int
    tombstones_evicted: int
    admission_waiting: int
    admission_running: int


class ToolsForceParams(Struct, frozen=True):
    session_id: str
    call_id: str
    tool: str


class ToolsForceResult(Struct, frozen=True):
    forced: bool
    detail: str = ""


class PluginsListParams(Struct, frozen=True):
    session_id: str


class SessionCloseHostParams(Struct, frozen=True):
    session_id: str


class PluginTool(Struct, frozen=True):
    """A plugin tool as the model sees it: ``mcp__<server>__<tool>``, with the server's
    description and JSON input schema (arguments are validated by the server)."""

    name: str
    server: str
    description: str = ""
    input_schema: dict[str, Any] = msgspec.field(default_factory=dict)


class PluginsListResult(Struct, frozen=True):
    tools: tuple[PluginTool, ...] = ()
    servers: tuple[PluginServerStatus, ...] = ()
