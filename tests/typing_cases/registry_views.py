# Type-checked by tests/registry/test_typing.py with the project's strict mypy config.
# "# E: text" marks a line mypy must reject with an error containing "text";
# "# OK" marks a line mypy must accept. No other line may have an error.
# (mypy does not type-check ``del`` of attributes, so removal is made unwritable
# instead: the dispatch view's signal is a read-only property changed only through
# ``replace_signal(AbortSignal)``; ``del view.signal`` fails at run time, see
# tests/registry/test_views.py.)
# ruff: noqa: E501 -- an expected error's text must follow its line's code
from __future__ import annotations

import msgspec

from protocol.toolclass import ToolClass
from protocol.tools import ToolResult, ok_result
from runtime.agent.registry import (
    AbortController,
    AbortSignal,
    Allow,
    ApprovalDecision,
    Ask,
    Delegate,
    PolicyDecision,
    ToolDispatchExecution,
    ToolExecution,
    ToolExecutionInput,
    ToolRegistry,
    UserCause,
    define_tool,
)


class EchoArgs(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
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
    call.replace_signal(other)  # E: "ToolExecution" has no attribute "replace_signal"
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


# Policies, approval, observers and stop handlers borrow the signal read-only.
async def pre_policy(call: ToolExecution) -> PolicyDecision:
    call.signal = other  # E: Property "signal" defined in "ToolExecution" is read-only
    return Allow()


async def approval(call: ToolExecution, ask: Ask) -> ApprovalDecision:
    call.signal = other  # E: Property "signal" defined in "ToolExecution" is read-only
    return Allow()


async def post_policy(call: ToolExecution, result: ToolResult) -> ToolResult:
    call.signal = other  # E: Property "signal" defined in "ToolExecution" is read-only
    return result


async def observer(call: ToolExecution, result: ToolResult) -> None:
    call.signal = other  # E: Property "signal" defined in "ToolExecution" is read-only


async def stop_handler(call: ToolExecution) -> None:
    call.signal = other  # E: Property "signal" defined in "ToolExecution" is read-only


# Only the around-dispatch view may replace the signal, and never remove it.
async def wrapper(call: ToolDispatchExecution, delegate: Delegate) -> ToolResult:
    call.replace_signal(other)  # OK
    call.replace_signal(None)  # E: Argument 1 to "replace_signal" of "ToolDispatchExecution" has incompatible type "None"
    call.signal = other  # E: Property "signal" defined in "ToolDispatchExecution" is read-only
    call.signal = None  # E: Property "signal" defined in "ToolDispatchExecution" is read-only
    return await delegate()


# A stage cannot ask for the replaceable view where the registry gives a read-only one.
async def sneaky_pre(call: ToolDispatchExecution) -> PolicyDecision:
    return Allow()


async def sneaky_approval(call: ToolDispatchExecution, ask: Ask) -> ApprovalDecision:
    return Allow()


async def sneaky_post(call: ToolDispatchExecution, result: ToolResult) -> ToolResult:
    return result


async def sneaky_observer(call: ToolDispatchExecution, result: ToolResult) -> None:
    return None


async def sneaky_body(args: EchoArgs, call: ToolDispatchExecution) -> ToolResult:
    return ok_result(args.text)


async def sneaky_stop(call: ToolDispatchExecution) -> None:
    return None


ToolRegistry(pre_policies=[pre_policy], approval=approval, post_policies=[post_policy],
             observers=[observer], wrappers=[wrapper])  # OK
ToolRegistry(pre_policies=[sneaky_pre])  # E: List item 0 has incompatible type "Callable[[ToolDispatchExecution], Coroutine[Any, Any, Allow | Deny | Ask]]"; expected "Callable[[ToolExecution]
ToolRegistry(approval=sneaky_approval)  # E: Argument "approval" to "ToolRegistry" has incompatible type "Callable[[ToolDispatchExecution, Ask]
ToolRegistry(post_policies=[sneaky_post])  # E: List item 0 has incompatible type "Callable[[ToolDispatchExecution, ToolResult], Coroutine[Any, Any, ToolResult]]"
ToolRegistry(observers=[sneaky_observer])  # E: List item 0 has incompatible type "Callable[[ToolDispatchExecution, ToolResult], Coroutine[Any, Any, None]]"
define_tool("Echo4", args=EchoArgs, tool_class=ToolClass.LOCAL, body=echo_body,
            stop=stop_handler)  # OK
define_tool("Echo5", args=EchoArgs, tool_class=ToolClass.LOCAL, body=sneaky_body)  # E: Argument "body" to "define_tool" has incompatible type "Callable[[EchoArgs, ToolDispatchExecution]
define_tool("Echo6", args=EchoArgs, tool_class=ToolClass.LOCAL, body=echo_body,
            stop=sneaky_stop)  # E: Argument "stop" to "define_tool" has incompatible type "Callable[[ToolDispatchExecution]

# The signal itself is an observable: it cannot be aborted through it.
other.abort(UserCause())  # E: "AbortSignal" has no attribute "abort"
