"""What a call publishes: snapshot, final content, contexts, observers; its stop handler."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

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
from runtime.agent.registry import (
    AbortController,
    AbortSignal,
    Allow,
    Ask,
    Delegate,
    Deny,
    PolicyDecision,
    ToolCallRequest,
    ToolDispatchExecution,
    ToolExecution,
    ToolRegistry,
    UserCause,
    define_tool,
    run_tool_calls,
)
from tests.registry.fakes import (
    Args,
    MemoryRecorder,
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


# -- the exact wire shapes of the two aborts ----------------------------------------------------

ABD_JSON = (b'{"content":[{"type":"text","text":"Error: tool call aborted before dispatch"}],'
            b'"isError":true,"error":{"message":"tool call aborted before dispatch",'
            b'"info":{"name":"AbortError","code":"ABORTED_BEFORE_DISPATCH"}}}')
ABORTED_JSON = (b'{"content":[{"type":"text","text":"Error: tool call aborted"}],'
                b'"isError":true,"error":{"message":"tool call aborted",'
                b'"info":{"name":"AbortError","code":"ABORTED"}},"bodyInvoked":true}')


async def test_both_abort_results_have_the_exact_wire_shape() -> None:
    async def stoppable(args: Args, call: ToolExecution) -> ToolResult:
        stopper.abort(UserCause())
        call.signal.raise_if_aborted()
        return ok_result("unreachable")

    stopper = AbortController()
    registry = ToolRegistry([define_tool("T", args=Args, tool_class=ToolClass.LOCAL,
                                         body=stoppable)])
    pre_aborted = AbortController()
    pre_aborted.abort(UserCause())
    before = await registry.execute(request("c1", "T", pre_aborted.signal))
    during = await registry.execute(request("c2", "T", stopper.signal))
    skipped = await run_tool_calls([ToolCallRequest("c3", "T", {})], registry=registry,
                                   recorder=MemoryRecorder(), signal=pre_aborted.signal)
    assert msgspec.json.encode(before) == ABD_JSON
    assert msgspec.json.encode(skipped[0]) == ABD_JSON
    assert msgspec.json.encode(during) == ABORTED_JSON


# -- a published result is frozen, complete and lossless ----------------------------------------


async def test_observers_cannot_change_what_was_published() -> None:
    async def body(args: Args, call: ToolExecution) -> ToolResult:
        return ok_result("ok", details={"lines": [1], "meta": {"k": 1}})

    attempts: list[str] = []

    async def meddler(call: ToolExecution, result: ToolResult) -> None:
        changes: list[Callable[[], object]] = [
            lambda: result.details.__setitem__("evil", 1),
            lambda: result.details["lines"].append(99),
            lambda: result.details["meta"].update(k=2),
            lambda: result.details.pop("lines"),
        ]
        for change in changes:
            try:
                change()
                attempts.append("changed")
            except TypeError:
                attempts.append("refused")

    tool = define_tool("T", args=Args, tool_class=ToolClass.LOCAL, body=body)
    call = ToolRegistry([tool], observers=[meddler]).prepare(
        request("c1", "T", AbortController().signal))
    result = await call.run()
    assert attempts == ["refused"] * 4
    assert call.result is result and result.details == {"lines": [1], "meta": {"k": 1}}
    assert msgspec.json.encode(result.details) == b'{"lines":[1],"meta":{"k":1}}'


def _recursive() -> dict[str, Any]:
    looped: dict[str, Any] = {}
    looped["self"] = looped
    return looped


@pytest.mark.parametrize("details", [
    {"n": math.nan}, {"n": math.inf}, {"pair": (1, 2)}, {1: "int key"}, {"raw": b"xy"},
    _recursive(),
], ids=["nan", "inf", "tuple", "int-key", "bytes", "recursive"])
async def test_a_result_json_would_change_fails_its_snapshot(details: dict[Any, Any]) -> None:
    async def body(args: Args, call: ToolExecution) -> ToolResult:
        return ok_result("ok", details=details)

    tool = define_tool("T", args=Args, tool_class=ToolClass.LOCAL, body=body,
                       final_content=marked)
    call = ToolRegistry([tool]).prepare(request("c1", "T", AbortController().signal))
    result = await call.run()
    assert call.settled and call.result is result
    assert result.code == ErrorCode.TOOL_FAILED.name and result.body_invoked
    assert result.details == {"stage": "result-snapshot"}
    assert result.content[-1] == TextContent("[final]")  # the callback still ran


class Unprintable(Exception):
    def __str__(self) -> str:
        raise RuntimeError("no text for you")


def _give(value: object) -> Any:
    if isinstance(value, BaseException):
        raise value
    return value


# What each kind of stage might hand back instead of what it must, and the stage blamed.
WRONG_RESULTS: list[tuple[object, str | None]] = [
    (None, None), ("text", None), ({"content": []}, None), (Unprintable(), None),
    (ok_result("x", details={"n": math.nan}), "result-snapshot"),
    (ok_result("x", details=_recursive()), "result-snapshot"),
]
WRONG_DECISIONS: list[tuple[object, str | None]] = [
    (None, None), ("allow", None), (ok_result("x"), None), (Unprintable(), None)]
WRONG_CONTENT: list[tuple[object, str | None]] = [
    (None, None), (("text",), None), ((object(),), None), (Unprintable(), None)]


def _handing_back(stage: str, value: object, caller: AbortController | None) -> ToolRegistry:
    """A registry whose ``stage`` hands back ``value`` (after stopping ``caller``, if given)."""

    def hand_back(here: str, proper: Any) -> Any:
        if here != stage:
            return proper
        if caller is not None:
            caller.abort(UserCause())
        return _give(value)

    async def pre(call: ToolExecution) -> PolicyDecision:
        return hand_back("pre-policy", Ask() if stage == "approval" else Allow())  # type: ignore[no-any-return]

    async def approval(call: ToolExecution, ask: Ask) -> Allow | Deny:
        return hand_back("approval", Allow())  # type: ignore[no-any-return]

    async def wrapper(call: ToolDispatchExecution, delegate: Delegate) -> ToolResult:
        if stage == "wrapper":
            return hand_back("wrapper", None)  # type: ignore[no-any-return]
        return hand_back("wrapper-after-body", await delegate())  # type: ignore[no-any-return]

    async def body(args: Args, call: ToolExecution) -> ToolResult:
        return hand_back("body", ok_result("ok"))  # type: ignore[no-any-return]

    async def post(call: ToolExecution, result: ToolResult) -> ToolResult:
        return hand_back("post-policy", result)  # type: ignore[no-any-return]

    def final(result: ToolResult) -> tuple[Content, ...]:
        return hand_back("final-content", result.content)  # type: ignore[no-any-return]

    tool = define_tool("T", args=Args, tool_class=ToolClass.LOCAL, body=body,
                       final_content=final)
    return ToolRegistry([tool], pre_policies=[pre], approval=approval, wrappers=[wrapper],
                        post_policies=[post])


@pytest.mark.parametrize("stopped", [False, True], ids=["live", "stopped"])
@pytest.mark.parametrize("stage", ["pre-policy", "approval", "wrapper", "wrapper-after-body",
                                   "body", "post-policy", "final-content"])
async def test_run_settles_whatever_a_stage_hands_back(stage: str, stopped: bool) -> None:
    wrong = (WRONG_DECISIONS if stage in ("pre-policy", "approval") else
             WRONG_CONTENT if stage == "final-content" else WRONG_RESULTS)
    for value, blamed in wrong:
        caller = AbortController()
        registry = _handing_back(stage, value, caller if stopped else None)
        call = registry.prepare(request("c1", "T", caller.signal))
        result = await call.run()  # returns, never raises
        assert call.settled and isinstance(result, ToolResult), (value, result)
        if stopped and stage == "wrapper" and isinstance(value, ToolResult):
            # a well-formed success the stop overtook before delegation: its details go
            assert result.code == ErrorCode.ABORTED_BEFORE_DISPATCH.name, (value, result)
            continue
        assert result.code == ErrorCode.TOOL_FAILED.name, (value, result)
        assert result.details == {"stage": blamed or stage.removesuffix("-after-body")}, (
            value, result)
        assert msgspec.json.decode(msgspec.json.encode(result), type=ToolResult) == result
