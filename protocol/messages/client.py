"""The client link: a client (editor, renderer, CLI) talking to the runtime."""

from __future__ import annotations

from typing import Literal

from protocol.messages.common import Struct
from protocol.tools import ToolResult

PermissionMode = Literal["ask", "accept-edits", "auto"]


class SessionNewParams(Struct, frozen=True):
    workspace: str
    permission_mode: PermissionMode = "ask"


class SessionNewResult(Struct, frozen=True):
    session_id: str


class SessionInfo(Struct, frozen=True):
    session_id: str
    workspace: str
    permission_mode: PermissionMode
    created_at: float


class SessionListResult(Struct, frozen=True):
    sessions: tuple[SessionInfo, ...]


class DebugRunToolParams(Struct, frozen=True):
    """Run one host tool outside any turn (a debugging aid until agent turns land)."""

    session_id: str
    tool: str
    args: dict[str, object]


class DebugRunToolResult(Struct, frozen=True):
    call_id: str
    result: ToolResult
