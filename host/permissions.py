"""Permission policy and prompts: which calls may run at once, which must ask the user, and
how a prompt is asked, timed out and withdrawn."""

from __future__ import annotations

import enum
import logging
from typing import Any, Protocol

import msgspec
import trio

from host.calls import Call
from protocol.messages.client import PermissionMode
from protocol.messages.host import PermissionRequestParams, PermissionWithdrawnParams
from protocol.toolclass import ToolClass
from protocol.tools import Decision

log = logging.getLogger(__name__)

PREVIEW_CHARS = 256 * 1024
"""A prompt's ``argsPreview`` is the call's whole arguments as JSON up to this many
characters (a user decides on what they see); a longer one ends in a marker saying how
many characters were left out, well inside a frame."""


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


class PermissionPort(Protocol):
    """How a prompt reaches the runtime (and through it the client)."""

    async def request_permission(self, params: PermissionRequestParams) -> Decision | None:
        """The user's decision; ``None`` when none can come: the runtime's link closed."""
        ...

    def permission_withdrawn(self, params: PermissionWithdrawnParams) -> None: ...


async def ask(port: PermissionPort, call: Call, request_id: str, raw_args: dict[str, Any],
              deny_after: float) -> Decision | None:
    """Ask the user about ``call``: the decision, ``"deny"`` once ``deny_after`` seconds passed, or
    ``None`` when the runtime is gone. A prompt that got no answer (stopped, timed out,
    link closed) is withdrawn, so the client drops it and a late answer is void."""
    call.permission_request_id = request_id
    preview = msgspec.json.encode(raw_args).decode()
    if len(preview) > PREVIEW_CHARS:
        preview = (f"{preview[:PREVIEW_CHARS]}… [{len(preview) - PREVIEW_CHARS} more "
                   "characters not shown]")
    answered = False
    try:
        with trio.move_on_after(deny_after):
            decision = await port.request_permission(PermissionRequestParams(
                call.session_id, request_id, call.call_id, call.tool, preview,
                risk_of(call.tool_class),  # type: ignore[arg-type]
            ))
            answered = decision is not None
            return decision
        log.info("permission %s unanswered after %.0f s: denied", request_id, deny_after)
        return "deny"
    finally:
        if not answered:
            port.permission_withdrawn(PermissionWithdrawnParams(call.session_id, request_id))
