"""The results the registry itself produces, and the classification rules.

The rules, in one place (the pipeline applies them at each stage boundary):

- A stage that raised ``AbortError`` while its signal was aborted observed the
  stop: the call ends ``ABORTED`` if the body was invoked, else
  ``ABORTED_BEFORE_DISPATCH``. Any other exception (an ``AbortError`` with the
  signal not aborted included) is that stage's failure: ``TOOL_FAILED``, with the
  exception's class as the error name and the stage in ``details["stage"]``;
  a failure is more specific than a stop and wins over it.
- A *successful* outcome found when the caller's signal is aborted has been
  overtaken by the stop and becomes an abort (keeping the success's ``details``,
  which say what the body did). An *error* outcome (denial, failure, timeout, an
  abort the body reported itself) is more specific and is kept.
"""

from __future__ import annotations

import logging
from typing import Any, Literal

from protocol.errors import ErrorCode
from protocol.tools import ToolResult, aborted_result, error_result
from runtime.agent.registry.signal import AbortError

log = logging.getLogger(__name__)

Stage = Literal[
    "arguments", "pre-policy", "approval", "wrapper", "body", "post-policy",
    "result-snapshot", "final-content", "observer", "stop-handler",
]


def root_exception(exc: BaseException) -> BaseException:
    """Unwrap single-member exception groups (a nursery inside a stage wraps its error)."""
    while isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
        exc = exc.exceptions[0]
    return exc


def aborted(*, body_invoked: bool, details: dict[str, Any] | None = None) -> ToolResult:
    return aborted_result(before_dispatch=not body_invoked, details=details)


def unknown_tool(name: str) -> ToolResult:
    return error_result(ErrorCode.NOT_FOUND, f"unknown tool {name!r}", name="UnknownTool",
                        body_invoked=False, details={"stage": "arguments"})


def invalid_arguments(exc: Exception) -> ToolResult:
    return error_result(ErrorCode.INVALID_PARAMS, f"invalid arguments: {exc}",
                        name=type(exc).__name__, body_invoked=False,
                        details={"stage": "arguments"})


def denied(stage: Stage, reason: str) -> ToolResult:
    return error_result(ErrorCode.TOOL_DENIED, f"denied: {reason}" if reason else "denied",
                        name="ToolDenied", body_invoked=False, details={"stage": stage})


def _text_of(exc: BaseException) -> str:
    try:
        return str(exc)
    except Exception:  # noqa: BLE001 -- a stage's exception whose __str__ fails is still a result
        return "(the exception cannot be printed)"


def stage_failed(stage: Stage, exc: BaseException, *, body_invoked: bool) -> ToolResult:
    root = root_exception(exc)
    name = type(root).__name__
    text = _text_of(root)
    message = f"{stage} failed: {name}: {text}" if text else f"{stage} failed: {name}"
    return error_result(ErrorCode.TOOL_FAILED, message, name=name, body_invoked=body_invoked,
                        details={"stage": stage})


def timed_out(seconds: float, *, body_invoked: bool,
              details: dict[str, Any] | None = None) -> ToolResult:
    return error_result(ErrorCode.TOOL_TIMEOUT, f"tool call timed out after {seconds:g} s",
                        name="TimeoutError", body_invoked=body_invoked, details=details)


def from_failure(stage: Stage, exc: Exception, *, signal_aborted: bool,
                 body_invoked: bool) -> ToolResult:
    """Classify a stage's exception: the stop it observed, or its own failure."""
    if isinstance(root_exception(exc), AbortError) and signal_aborted:
        return aborted(body_invoked=body_invoked)
    if stage == "body":
        log.debug("tool body failed", exc_info=exc)
    else:
        log.warning("tool call stage %s failed", stage, exc_info=exc)
    return stage_failed(stage, exc, body_invoked=body_invoked)


def overtaken_by_stop(result: ToolResult, *, caller_aborted: bool,
                      body_invoked: bool) -> ToolResult:
    """A success the caller's stop overtook becomes an abort; errors are kept."""
    if not caller_aborted or result.is_error:
        return result
    return aborted(body_invoked=body_invoked, details=result.details if body_invoked else None)
