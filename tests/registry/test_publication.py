"""What a call publishes: snapshot, final content, contexts, observers; its stop handler."""

from __future__ import annotations

import msgspec
import pytest
import trio
import trio.testing

from protocol.errors import ErrorCode
from protocol.toolclass import ToolClass
from protocol.tools import (
    Content,
    TextContent,
    ToolResult,
    ok_result,
)
from runtime.registry import (
    AbortController,
    AbortSignal,
    ToolExecution,
    ToolRegistry,
    define_tool,
)
from tests.registry.fakes import (
    Args,
    request,
    uncooperative,
)


def marked(result: ToolResult) -> tuple[Content, ...]:
    return (*result.content, TextContent("[final]"))


async def test_result_snapshot_failure_is_an_ordinary_error_through_final_content() -> None:
    async def body(args: Args, call: ToolExecution) -> ToolResult:
        return ok_result("ok", details={"handle": object()})

    tool = define_tool("T", args=Args, tool_class=ToolClass.LOCAL, body=body,
                       final_content=marked)
    result = await ToolRegistry([tool]).execute(request("c1", "T", AbortController().signal))
    assert result.code == ErrorCode.TOOL_FAILED.name
    assert result.details == {"stage": "result-snapshot"} and result.body_invoked
    assert result.content[-1] == TextContent("[final]")


async def test_published_result_shares_nothing_with_the_body() -> None:
    kept: list[ToolResult] = []

    async def body(args: Args, call: ToolExecution) -> ToolResult:
        kept.append(ok_result("ok", details={"lines": [1, 2]}))
        return kept[0]

    def broken_final(result: ToolResult) -> tuple[Content, ...]:
        raise ValueError("no")

    tool = define_tool("T", args=Args, tool_class=ToolClass.LOCAL, body=body)
    result = await ToolRegistry([tool]).execute(request("c1", "T", AbortController().signal))
    kept[0].details["lines"].append(3)
    assert result.details == {"lines": [1, 2]} and result is not kept[0]

    tool = define_tool("B", args=Args, tool_class=ToolClass.LOCAL, body=body,
                       final_content=broken_final)
    result = await ToolRegistry([tool]).execute(request("c1", "B", AbortController().signal))
    assert result.code == ErrorCode.TOOL_FAILED.name
    assert result.details["stage"] == "final-content"


async def test_observers_see_the_published_result_and_cannot_change_it() -> None:
    caller = AbortController()
    seen: list[tuple[ToolResult, AbortSignal]] = []

    async def watcher(call: ToolExecution, result: ToolResult) -> None:
        seen.append((result, call.signal))
        with pytest.raises(RuntimeError):
            call.defer_context("too late")

    async def broken(call: ToolExecution, result: ToolResult) -> None:
        raise ValueError("observer broke")

    tool = define_tool("T", args=Args, tool_class=ToolClass.LOCAL, body=uncooperative(0),
                       final_content=marked)
    registry = ToolRegistry([tool], observers=[broken, watcher])
    result = await registry.execute(request("c1", "T", caller.signal))
    assert result.code is None and seen == [(result, caller.signal)]


async def test_the_stop_handler_runs_once_only_while_the_body_is_running() -> None:
    caller = AbortController()
    stops: list[str] = []
    started, release = trio.Event(), trio.Event()

    async def body(args: Args, call: ToolExecution) -> ToolResult:
        started.set()
        await release.wait()
        return ok_result("ok")

    async def stop(call: ToolExecution) -> None:
        stops.append(call.call_id)
        assert call.signal is caller.signal
        release.set()

    tool = define_tool("T", args=Args, tool_class=ToolClass.PROCESS, body=body, stop=stop)
    call = ToolRegistry([tool]).prepare(request("c1", "T", caller.signal))
    assert await call.stop() is False  # body not invoked yet
    with trio.fail_after(5):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(call.run)
            await started.wait()
            assert call.body_invoked and await call.stop() is True
            assert await call.stop() is False
    assert stops == ["c1"] and call.settled and await call.stop() is False


def test_snapshot_keeps_the_wire_shape() -> None:
    result = ok_result("x", details={"n": 1})
    assert msgspec.json.decode(msgspec.json.encode(result), type=ToolResult) == result
