"""The timeout policy owns ``TOOL_TIMEOUT``; a stop that came first stays an abort."""

from __future__ import annotations

import pytest
import trio
import trio.testing

from protocol.errors import ErrorCode
from protocol.toolclass import ToolClass
from protocol.tools import ToolResult, ok_result
from runtime.agent.registry import (
    AbortController,
    Delegate,
    TimeoutPolicy,
    ToolDispatchExecution,
    ToolExecution,
    ToolRegistry,
    define_tool,
)
from tests.registry.fakes import (
    Args,
    BodyLog,
    cooperative,
    execute_with_stop,
    logged_tool,
    request,
    uncooperative,
)

ABORTED = ErrorCode.ABORTED.name


async def test_timeout_policy_owns_its_timeout(autojump_clock: trio.testing.MockClock) -> None:
    log = BodyLog()
    registry = ToolRegistry([logged_tool("T", cooperative(10), log)],
                            wrappers=[TimeoutPolicy(2)])
    result = await registry.execute(request("c1", "T", AbortController().signal))
    assert result.code == ErrorCode.TOOL_TIMEOUT.name and result.body_invoked
    assert trio.current_time() == pytest.approx(2)


async def test_a_timeout_stays_a_timeout_when_the_caller_stops_later(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async def slow_to_stop(args: Args, call: ToolExecution) -> ToolResult:
        await call.signal.wait()  # the deadline, at t=2
        await trio.sleep(3)  # still cleaning up when the caller stops at t=3
        call.signal.raise_if_aborted()
        return ok_result("unreachable")

    tool = define_tool("T", args=Args, tool_class=ToolClass.LOCAL, body=slow_to_stop)
    result = await execute_with_stop(ToolRegistry([tool], wrappers=[TimeoutPolicy(2)]), 3)
    assert result.code == ErrorCode.TOOL_TIMEOUT.name
    assert trio.current_time() == pytest.approx(5)


async def test_a_stop_before_the_deadline_is_an_abort_not_a_timeout(
    autojump_clock: trio.testing.MockClock,
) -> None:
    log = BodyLog()
    registry = ToolRegistry([logged_tool("T", uncooperative(5), log)],
                            wrappers=[TimeoutPolicy(2)])
    result = await execute_with_stop(registry, 1)  # stop at 1, deadline would be 2, body ends 5
    assert result.code == ABORTED

    async def slow_to_stop(args: Args, call: ToolExecution) -> ToolResult:
        await call.signal.wait()  # the caller's stop, at t=1
        await trio.sleep(3)  # still cleaning up when the deadline passes at t=2
        call.signal.raise_if_aborted()
        return ok_result("unreachable")

    tool = define_tool("S", args=Args, tool_class=ToolClass.LOCAL, body=slow_to_stop)
    result = await execute_with_stop(ToolRegistry([tool], wrappers=[TimeoutPolicy(2)]), 1,
                                  tool="S")
    assert result.code == ABORTED  # the stop came first: the deadline does not claim it
    late_success = await registry.execute(request("c2", "T", AbortController().signal))
    assert late_success.code is None  # the body ignored its deadline and completed: kept


async def test_a_deadline_before_delegation_is_a_timeout_without_the_body(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async def queue(call: ToolDispatchExecution, delegate: Delegate) -> ToolResult:
        await trio.sleep(5)
        return await delegate()

    log = BodyLog()
    registry = ToolRegistry([logged_tool("T", cooperative(1), log)],
                            wrappers=[TimeoutPolicy(2), queue])
    result = await registry.execute(request("c1", "T", AbortController().signal))
    assert result.code == ErrorCode.TOOL_TIMEOUT.name and not result.body_invoked
    assert log.invoked == []
