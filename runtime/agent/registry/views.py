"""What each pipeline stage may see of a call, and what it may change.

The registry owns one private, mutable run object per call. Stages only get views
of it:

- ``ToolExecution`` (tool bodies, pre-policy, approval, post-policy, result
  observers, stop handlers): every field read-only, the signal included. Tool
  bodies see the signal fused for the body; every other stage sees the caller's.
- ``ToolDispatchExecution`` (around-dispatch wrappers only): the same read-only
  ``signal``, plus ``replace_signal(signal)``, which replaces it by another
  ``AbortSignal`` for the wrapper's delegated lifetime. Replacement is the only
  operation there is: ``signal`` is a read-only property (assigning or deleting
  it fails at run time, and assigning is a type error), and
  ``replace_signal(None)`` is a type error and a run-time ``TypeError``, so no
  well-typed code can remove the signal. (A method, not a settable property,
  because mypy does not type-check ``del`` of attributes.) The registry keeps
  the caller's signal outside this object, fuses the replacement with it right
  before the body, and restores the upstream signal when each wrapper returns.

``ToolExecutionInput`` is what a caller hands the registry; its ``signal`` is
required, with no default.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import msgspec

from protocol.toolclass import ToolClass
from runtime.agent.registry.signal import AbortSignal

__all__ = ["ToolCallRequest", "ToolDispatchExecution", "ToolExecution", "ToolExecutionInput"]


class ToolCallRequest(msgspec.Struct, frozen=True):
    """One tool call as the model asked for it (``args`` as received, not yet checked)."""

    call_id: str
    tool: str
    args: Any


@dataclass(frozen=True, slots=True, kw_only=True)
class ToolExecutionInput:
    """One execution request. The caller's ``signal`` is required: there is no default."""

    call_id: str
    tool: str
    args: Any
    signal: AbortSignal

    @classmethod
    def of(cls, call: ToolCallRequest, signal: AbortSignal) -> ToolExecutionInput:
        return cls(call_id=call.call_id, tool=call.tool, args=call.args, signal=signal)


class CallRun:
    """The registry's private mutable state of one call; stages see it through views."""

    __slots__ = (
        "args", "body_invoked", "call_id", "caller_signal", "contexts", "dispatch_signal",
        "published", "tool", "tool_class",
    )

    def __init__(self, *, call_id: str, tool: str, tool_class: ToolClass, args: msgspec.Struct,
                 caller_signal: AbortSignal) -> None:
        self.call_id = call_id
        self.tool = tool
        self.tool_class = tool_class
        self.args = args
        self.caller_signal = caller_signal
        self.dispatch_signal = caller_signal
        self.body_invoked = False
        self.contexts: list[str] = []
        self.published = False

    def defer_context(self, text: str) -> None:
        if self.published:
            raise RuntimeError(f"call {self.call_id}: its result is already published")
        self.contexts.append(text)


class ToolExecution:
    """A read-only view of one call."""

    __slots__ = ("_run", "_signal")

    def __init__(self, run: CallRun, signal: AbortSignal) -> None:
        self._run = run
        self._signal = signal

    @property
    def call_id(self) -> str:
        return self._run.call_id

    @property
    def tool(self) -> str:
        return self._run.tool

    @property
    def tool_class(self) -> ToolClass:
        return self._run.tool_class

    @property
    def args(self) -> msgspec.Struct:
        """The frozen, materialized arguments."""
        return self._run.args

    @property
    def signal(self) -> AbortSignal:
        return self._signal

    @property
    def body_invoked(self) -> bool:
        """Whether the registry has invoked (is about to await) the tool body."""
        return self._run.body_invoked

    def defer_context(self, text: str) -> None:
        """Attach ``text`` to this call's result (``details["contexts"]``).

        Deferred contexts stay attached whatever result is finally published,
        including an abort that replaces a successful outcome.
        """
        self._run.defer_context(text)

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self._run.tool} {self._run.call_id}>"


class ToolDispatchExecution(ToolExecution):
    """The around-dispatch view: like ``ToolExecution``, but the signal is replaceable."""

    __slots__ = ()

    def __init__(self, run: CallRun) -> None:
        super().__init__(run, run.caller_signal)

    @property
    def signal(self) -> AbortSignal:
        return self._run.dispatch_signal

    def replace_signal(self, signal: AbortSignal) -> None:
        """Use ``signal`` from here on, until this wrapper returns (then it is restored)."""
        if not isinstance(signal, AbortSignal):
            raise TypeError(f"the signal must be an AbortSignal, not {type(signal).__name__}")
        self._run.dispatch_signal = signal
