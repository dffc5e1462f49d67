"""The pluggable stages around a tool body, and their decisions.

Order of one call: pre-policies (each answers ``Allow``, ``Deny`` or ``Ask``);
if any asked, the approval stage (``Allow`` or ``Deny``); the around-dispatch
wrappers, outermost first, each ``await``-ing ``delegate()`` to run the next
wrapper and finally the body; post-policies, each may replace the result; then
result observers, which only look.

Every stage except the wrappers gets a read-only ``ToolExecution`` whose signal
is the caller's; wrappers get ``ToolDispatchExecution``. The registry awaits
every stage it starts and never cancels one: a stage learns of a stop through
its signal. A stage that raises fails the call (``TOOL_FAILED``), unless it
raised ``AbortError`` because the caller's signal was aborted, which is the stop.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from protocol.tools import ToolResult
from runtime.agent.registry.views import ToolDispatchExecution, ToolExecution

__all__ = [
    "Allow", "Approval", "ApprovalDecision", "Ask", "Delegate", "Deny", "DispatchWrapper",
    "PolicyDecision", "PostPolicy", "PrePolicy", "ResultObserver",
]


@dataclass(frozen=True, slots=True)
class Allow:
    pass


@dataclass(frozen=True, slots=True)
class Deny:
    reason: str


@dataclass(frozen=True, slots=True)
class Ask:
    """Ask the approval stage; ``prompt`` says what for."""

    prompt: str = ""


PolicyDecision = Allow | Deny | Ask
ApprovalDecision = Allow | Deny

PrePolicy = Callable[[ToolExecution], Awaitable[PolicyDecision]]
Approval = Callable[[ToolExecution, Ask], Awaitable[ApprovalDecision]]
Delegate = Callable[[], Awaitable[ToolResult]]
"""Runs the next wrapper, or the body. Call it at most once, before returning."""
DispatchWrapper = Callable[[ToolDispatchExecution, Delegate], Awaitable[ToolResult]]
PostPolicy = Callable[[ToolExecution, ToolResult], Awaitable[ToolResult]]
ResultObserver = Callable[[ToolExecution, ToolResult], Awaitable[None]]
