# Type-checked by tests/registry/test_typing.py with the project's strict mypy config.
# "# E: text" marks a line mypy must reject with an error containing "text";
# "# OK" marks a line mypy must accept. No other line may have an error.
# (``del view.signal`` is not here: mypy does not type-check attribute deletion;
# it is refused at run time, see tests/registry/test_views.py.)
from __future__ import annotations

import msgspec

from protocol.toolclass import ToolClass
from protocol.tools import ToolResult, ok_result
from runtime.registry import (
    AbortController,
    AbortSignal,
    Allow,
    Delegate,
    PolicyDecision,
    ToolDispatchExecution,
    ToolExecution,
    ToolExecutionInput,
    UserCause,
    define_tool,
)


class EchoArgs(msgspec.Struct, frozen=True):
    text: str


def observe(signal: AbortSignal) -> None:
    signal.raise_if_aborted()


async def echo(args: EchoArgs, signal: AbortSignal) -> ToolResult:
    observe(signal)
    return ok_result(args.text)


other = AbortController().signal

# A tool defined through define_tool sees a required signal, no cast: both the
# annotated body and a lambda whose parameters are typed from context.
async def echo_body(args: EchoArgs, call: ToolExecution) -> ToolResult:
    observe(call.signal)  # OK
    call.signal = other  # E: Property "signal" defined in "ToolExecution" is read-only
    return ok_result(args.text)


tool = define_tool("Echo", args=EchoArgs, tool_class=ToolClass.LOCAL, body=echo_body)  # OK
lam = define_tool("Echo2", args=EchoArgs, tool_class=ToolClass.LOCAL,
                  body=lambda args, call: echo(args, call.signal))  # OK
bad = define_tool("Echo3", args=EchoArgs, tool_class=ToolClass.LOCAL,
                  body=lambda args, call: echo(args, call.signal.cause))  # E: Argument 2 to "echo" has incompatible type "UserCause | ParentCause

# Every execution input carries the caller's signal; there is no default.
ToolExecutionInput(call_id="c1", tool="Echo", args={})  # E: Missing named argument "signal"
ToolExecutionInput(call_id="c1", tool="Echo", args={}, signal=None)  # E: Argument "signal" to "ToolExecutionInput" has incompatible type "None"
ToolExecutionInput(call_id="c1", tool="Echo", args={}, signal=other)  # OK


# Policies and observers borrow the signal read-only.
async def pre_policy(call: ToolExecution) -> PolicyDecision:
    call.signal = other  # E: Property "signal" defined in "ToolExecution" is read-only
    return Allow()


async def post_policy(call: ToolExecution, result: ToolResult) -> ToolResult:
    call.signal = other  # E: Property "signal" defined in "ToolExecution" is read-only
    return result


# Only the around-dispatch view may replace the signal, and never remove it.
async def wrapper(call: ToolDispatchExecution, delegate: Delegate) -> ToolResult:
    call.signal = other  # OK
    call.signal = None  # E: Incompatible types in assignment (expression has type "None", variable has type "AbortSignal")
    return await delegate()


# The signal itself is an observable: it cannot be aborted through it.
other.abort(UserCause())  # E: "AbortSignal" has no attribute "abort"
