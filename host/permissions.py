"""Permission policy: which calls may run at once, which must ask the user."""

from __future__ import annotations

import enum

from protocol.messages.client import PermissionMode
from protocol.toolclass import ToolClass


class Verdict(enum.Enum):
    ALLOW = "allow"
    ASK = "ask"
    DENY = "deny"


def evaluate(mode: PermissionMode, tool: str, tool_class: ToolClass,
             session_allowed: frozenset[str] | set[str],
             session_denied: frozenset[str] | set[str] = frozenset()) -> Verdict:
    """Read-only tools inside the workspace are allowed; confinement is the tool's check.
    A tool the user denied for the session ("deny-session") is denied without asking."""
    if tool_class is ToolClass.READ_ONLY:
        return Verdict.ALLOW
    if tool in session_denied:
        return Verdict.DENY
    if mode == "auto" or tool in session_allowed:
        return Verdict.ALLOW
    if mode == "accept-edits" and tool_class is ToolClass.MUTATING:
        return Verdict.ALLOW
    return Verdict.ASK


def risk_of(tool_class: ToolClass) -> str:
    return {ToolClass.MUTATING: "medium", ToolClass.PROCESS: "high",
            ToolClass.PLUGIN: "medium"}.get(tool_class, "low")
