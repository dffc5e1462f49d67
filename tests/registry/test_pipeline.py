"""One call through the registry: skipping, classification, fusion, precedence, quiescence."""

from __future__ import annotations

import math
from collections import Counter
from typing import Any

import msgspec
import pytest
import trio
import trio.testing

from protocol.errors import ErrorCode
from protocol.toolclass import ToolClass
from protocol.tools import (
    ABORT_ERROR_NAME,
    ABORTED_BEFORE_DISPATCH_TEXT,
    ABORTED_TEXT,
    Content,
    TextContent,
    ToolResult,
    error_result,
    ok_result,
)
from runtime.agent.registry import (
    AbortController,
    AbortError,
    AbortSignal,
    Allow,
    Ask,
    Delegate,
    Deny,
    HookCause,
    JsonObjectArgs,
    PolicyDecision,
    ToolDispatchExecution,
    ToolExecution,
    ToolRegistry,
    UserCause,
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

ABD = ErrorCode.ABORTED_BEFORE_DISPATCH.name
ABORTED = ErrorCode.ABORTED.name


def marked(result: ToolResult) -> tuple[Content, ...]:
    return (*result.content, TextContent("[final]"))


class Spy:
    """Counts every stage of a registry built with ``spy.registry(tool)``."""

    def __init__(self) -> None:
        self.calls: Counter[str] = Counter()
        self.observed: list[ToolResult] = []

    async def pre(self, call: ToolExecution) -> PolicyDecision:
        self.calls["pre"] += 1
        return Ask("sure?")

    async def approval(self, call: ToolExecution, ask: Ask) -> Allow | Deny:
        self.calls["approval"] += 1
        return Allow()

    async def wrapper(self, call: ToolDispatchExecution, delegate: Delegate) -> ToolResult:
        self.calls["wrapper"] += 1
        return await delegate()

    async def post(self, call: ToolExecution, result: ToolResult) -> ToolResult:
        self.calls["post"] += 1
        return result

    async def observer(self, call: ToolExecution, result: ToolResult) -> None:
        self.calls["observer"] += 1
        self.observed.append(result)

    def registry(self, *tools: Any) -> ToolRegistry:
        return ToolRegistry(tools, pre_policies=[self.pre], approval=self.approval,
                            wrappers=[self.wrapper], post_policies=[self.post],
                            observers=[self.observer])


def aborted_controller() -> AbortController:
    controller = AbortController()
    controller.abort(UserCause())
    return controller


# -- materialization and pre-aborted entry ----------------------------------------------------


async def test_pre_aborted_call_skips_every_stage_and_publishes_one_frozen_result() -> None:
    log, spy = BodyLog(), Spy()
    final_seen: list[ToolResult] = []

    def final(result: ToolResult) -> tuple[Content, ...]:
        final_seen.append(result)
        return marked(result)

    tool = logged_tool("T", cooperative(1), log, final_content=final)
    call = spy.registry(tool).prepare(request("c1", "T", aborted_controller().signal))
    result = await call.run()
    # Every stage before publication is skipped; observers see the one published result.
    assert spy.calls == Counter(observer=1) and spy.observed == [result] and log.invoked == []
    assert [r.code for r in final_seen] == [ABD]  # through the final-content callback once
    assert result.code == ABD and result.is_error and not result.body_invoked
    assert result.content == (TextContent(ABORTED_BEFORE_DISPATCH_TEXT), TextContent("[final]"))
    assert result.error is not None and result.error.info.name == ABORT_ERROR_NAME
    assert call.result is result and call.settled
    with pytest.raises(AttributeError):
        result.is_error = False  # type: ignore[misc]
    with pytest.raises(TypeError):
        spy.observed[0].details["late"] = True  # an observer cannot add to empty details
    assert result.details == {}
    with pytest.raises(RuntimeError):
        await call.run()  # exactly one run, exactly one result


async def test_a_live_call_runs_every_stage_once() -> None:
    log, spy = BodyLog(), Spy()
    result = await spy.registry(logged_tool("T", cooperative(0), log)).execute(
        request("c1", "T", AbortController().signal))
    assert result.code is None and log.invoked == ["c1"]
    assert spy.calls == Counter(pre=1, approval=1, wrapper=1, post=1, observer=1)


async def test_materialization_failure_wins_over_a_pre_aborted_signal() -> None:
    log, spy = BodyLog(), Spy()
    seen: list[str | None] = []

    def final(result: ToolResult) -> tuple[Content, ...]:
        seen.append(result.code)
        return result.content

    tool = logged_tool("T", cooperative(1), log, final_content=final)
    registry = spy.registry(tool)
    signal = aborted_controller().signal
    bad = await registry.execute(request("c1", "T", signal, args={"value": "nope"}))
    assert bad.code == ErrorCode.INVALID_PARAMS.name and "$.value" in bad.content[0].text  # type: ignore[union-attr]
    unknown_field = await registry.execute(request("c2", "T", signal, args={"other": 1}))
    assert unknown_field.code == ErrorCode.INVALID_PARAMS.name
    missing = await registry.execute(request("c3", "Nope", signal))
    assert missing.code == ErrorCode.NOT_FOUND.name
    assert spy.calls == Counter() and log.invoked == []
    assert seen == [ErrorCode.INVALID_PARAMS.name] * 2


async def test_arguments_are_a_frozen_snapshot() -> None:
    got: list[Args] = []
    views_agree: list[bool] = []

    async def body(args: Args, call: ToolExecution) -> ToolResult:
        got.append(args)
        views_agree.append(call.args is args)  # asserted outside: the body's errors are results
        return ok_result("ok")

    raw: dict[str, Any] = {"value": 1, "tags": ["a"]}
    registry = ToolRegistry([define_tool("T", args=Args, tool_class=ToolClass.LOCAL, body=body)])
    call = registry.prepare(request("c1", "T", AbortController().signal, args=raw))
    raw["value"] = 2
    raw["tags"].append("b")
    await call.run()
    assert got == [Args(value=1, tags=("a",))] and views_agree == [True]
    with pytest.raises(AttributeError):
        got[0].value = 3  # type: ignore[misc]
    json_call = await registry.execute(request("c2", "T", AbortController().signal,
                                               args=b'{"value": 7}'))
    assert json_call.code is None and got[-1] == Args(value=7) and views_agree == [True, True]


class Measure(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    amount: float | None = None


@pytest.mark.parametrize("amount", [math.nan, math.inf, -math.inf])
async def test_arguments_that_json_would_change_are_invalid(amount: float) -> None:
    seen: list[Measure] = []

    async def body(args: Measure, call: ToolExecution) -> ToolResult:
        seen.append(args)
        return ok_result("ok")

    async def plugin(args: JsonObjectArgs, call: ToolExecution) -> ToolResult:
        return ok_result(args.json)

    registry = ToolRegistry([
        define_tool("M", args=Measure, tool_class=ToolClass.LOCAL, body=body),
        define_tool("P", args=JsonObjectArgs, tool_class=ToolClass.PLUGIN, body=plugin),
    ])
    signal = AbortController().signal
    for tool in ("M", "P"):  # JSON would publish the number as null
        result = await registry.execute(request("c1", tool, signal, args={"amount": amount}))
        assert result.code == ErrorCode.INVALID_PARAMS.name, (tool, result)
    looped: dict[str, Any] = {}
    looped["self"] = looped
    for raw in ({1: "non-string key"}, {"pair": (1, 2)}, {"set": {1}}, looped):
        result = await registry.execute(request("c2", "P", signal, args=raw))
        assert result.code == ErrorCode.INVALID_PARAMS.name, (raw, result)
    exact = await registry.execute(request("c3", "M", signal, args={"amount": 0.1}))
    assert exact.code is None and seen == [Measure(0.1)]
    text = await registry.execute(request("c4", "P", signal, args={"a": [1, 2.5], "b": None}))
    assert text.code is None and text.content == (TextContent('{"a":[1,2.5],"b":null}'),)


# -- stops during the stages --------------------------------------------------------------------


async def test_stop_during_pre_policy_and_approval_is_before_dispatch(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async def slow_allow(call: ToolExecution) -> PolicyDecision:
        await trio.sleep(5)  # ignores the stop, then allows
        return Ask()

    async def observing_approval(call: ToolExecution, ask: Ask) -> Allow | Deny:
        await call.signal.wait()
        call.signal.raise_if_aborted()
        raise AssertionError("unreachable")

    log = BodyLog()
    tool = logged_tool("T", cooperative(1), log)
    during_policy = ToolRegistry([tool], pre_policies=[slow_allow], approval=observing_approval)
    result = await execute_with_stop(during_policy, 1)
    assert result.code == ABD and log.invoked == []

    async def allow(call: ToolExecution) -> PolicyDecision:
        return Ask()

    during_approval = ToolRegistry([tool], pre_policies=[allow], approval=observing_approval)
    result = await execute_with_stop(during_approval, 1)
    assert result.code == ABD and log.invoked == []


async def test_a_denial_that_settles_after_the_stop_is_kept(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async def slow_deny(call: ToolExecution) -> PolicyDecision:
        await trio.sleep(5)
        return Deny("not here")

    async def ask(call: ToolExecution) -> PolicyDecision:
        return Ask()

    async def slow_refusal(call: ToolExecution, question: Ask) -> Allow | Deny:
        await trio.sleep(5)
        return Deny("user said no")

    log = BodyLog()
    tool = logged_tool("T", cooperative(1), log)
    result = await execute_with_stop(ToolRegistry([tool], pre_policies=[slow_deny]), 1)
    assert result.code == ErrorCode.TOOL_DENIED.name and "not here" in result.content[0].text  # type: ignore[union-attr]
    result = await execute_with_stop(ToolRegistry([tool], pre_policies=[ask],
                                               approval=slow_refusal), 1)
    assert result.code == ErrorCode.TOOL_DENIED.name
    no_approver = await ToolRegistry([tool], pre_policies=[ask]).execute(
        request("c1", "T", AbortController().signal))
    assert no_approver.code == ErrorCode.TOOL_DENIED.name
    assert log.invoked == []


async def test_stop_in_a_wrapper_before_delegation_is_before_dispatch_and_keeps_contexts(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async def admission(call: ToolDispatchExecution, delegate: Delegate) -> ToolResult:
        call.defer_context("queued for admission")
        await trio.sleep(5)  # a wrapper success overtaken by the stop before delegation
        return await delegate()

    log = BodyLog()
    registry = ToolRegistry([logged_tool("T", cooperative(1), log)], wrappers=[admission])
    result = await execute_with_stop(registry, 1)
    assert result.code == ABD and log.invoked == []
    assert result.details["contexts"] == ["queued for admission"]

    async def cached(call: ToolDispatchExecution, delegate: Delegate) -> ToolResult:
        call.defer_context("from cache")
        await trio.sleep(5)
        return ok_result("cached")  # never delegates: a success the stop overtook

    registry = ToolRegistry([logged_tool("T", cooperative(1), log)], wrappers=[cached])
    result = await execute_with_stop(registry, 1)
    assert result.code == ABD and result.details["contexts"] == ["from cache"]


async def test_a_wrapper_that_answers_without_the_body_reports_no_body_invocation() -> None:
    async def cache(call: ToolDispatchExecution, delegate: Delegate) -> ToolResult:
        if call.call_id == "hit":
            return ok_result("cached")  # ok_result says body_invoked=True: the registry knows
        return await delegate()

    log = BodyLog()
    registry = ToolRegistry([logged_tool("T", cooperative(0), log)], wrappers=[cache])
    hit = await registry.execute(request("hit", "T", AbortController().signal))
    miss = await registry.execute(request("miss", "T", AbortController().signal))
    assert log.invoked == ["miss"]
    assert hit.code is None and not hit.body_invoked
    assert miss.code is None and miss.body_invoked


async def test_an_already_aborted_wrapper_signal_never_invokes_the_body() -> None:
    async def aborted_scope(call: ToolDispatchExecution, delegate: Delegate) -> ToolResult:
        call.replace_signal(aborted_controller().signal)
        return await delegate()

    log = BodyLog()
    caller = AbortController()
    registry = ToolRegistry([logged_tool("T", cooperative(1), log)], wrappers=[aborted_scope])
    call = registry.prepare(request("c1", "T", caller.signal))
    result = await call.run()
    assert result.code == ABD and log.invoked == [] and not call.body_invoked
    assert not caller.signal.aborted


async def test_stop_during_the_body_is_aborted(autojump_clock: trio.testing.MockClock) -> None:
    log = BodyLog()
    raising = await execute_with_stop(ToolRegistry([logged_tool("T", cooperative(10), log)]), 1)
    assert raising.code == ABORTED and raising.body_invoked
    assert raising.content == (TextContent(ABORTED_TEXT),)
    assert trio.current_time() == pytest.approx(1)

    async def reporting(args: Args, call: ToolExecution) -> ToolResult:
        await call.signal.wait()
        return ok_result("partial", details={"wrote": 3})  # a success the stop overtook

    tool = define_tool("R", args=Args, tool_class=ToolClass.LOCAL, body=reporting)
    result = await execute_with_stop(ToolRegistry([tool]), 1, tool="R")
    assert result.code == ABORTED and result.details == {"wrote": 3}


async def test_stop_while_a_wrapper_or_post_policy_waits_after_the_body_is_aborted(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async def slow_after(call: ToolDispatchExecution, delegate: Delegate) -> ToolResult:
        result = await delegate()
        call.defer_context("wrapper was here")
        await trio.sleep(5)
        return result

    async def slow_post(call: ToolExecution, result: ToolResult) -> ToolResult:
        call.defer_context("post-policy was here")
        await trio.sleep(5)
        return result

    log = BodyLog()
    tool = logged_tool("T", uncooperative(0.5), log)
    for registry, context in ((ToolRegistry([tool], wrappers=[slow_after]), "wrapper was here"),
                              (ToolRegistry([tool], post_policies=[slow_post]),
                               "post-policy was here")):
        result = await execute_with_stop(registry, 1)
        assert result.code == ABORTED and result.body_invoked
        assert result.details["contexts"] == [context]
        assert result.details["value"] == 0  # what the body reported is kept


# -- the signal seen by each stage --------------------------------------------------------------


async def test_wrapper_signal_is_fused_with_the_callers_and_restored() -> None:
    caller, wrapper_scope = AbortController(), AbortController()
    seen: dict[str, AbortSignal] = {}
    body_saw_abort: list[bool] = []

    async def outer(call: ToolDispatchExecution, delegate: Delegate) -> ToolResult:
        assert call.signal is caller.signal
        call.replace_signal(wrapper_scope.signal)
        result = await delegate()
        seen["outer after"] = call.signal
        return result

    async def inner(call: ToolDispatchExecution, delegate: Delegate) -> ToolResult:
        seen["inner"] = call.signal
        call.replace_signal(AbortController().signal)  # replaced again; restored on return
        return await delegate()

    async def body(args: Args, call: ToolExecution) -> ToolResult:
        seen["body"] = call.signal
        caller.abort(HookCause("stop"))
        body_saw_abort.append(call.signal.aborted)
        return ok_result("ok")

    async def post(call: ToolExecution, result: ToolResult) -> ToolResult:
        seen["post"] = call.signal
        return result

    views: list[ToolDispatchExecution] = []

    async def capture(call: ToolDispatchExecution, delegate: Delegate) -> ToolResult:
        views.append(call)
        return await delegate()

    tool = define_tool("T", args=Args, tool_class=ToolClass.LOCAL, body=body)
    registry = ToolRegistry([tool], wrappers=[capture, outer, inner], post_policies=[post])
    result = await registry.execute(request("c1", "T", caller.signal))
    assert seen["inner"] is wrapper_scope.signal
    assert seen["outer after"] is wrapper_scope.signal
    assert seen["body"] is not caller.signal and seen["body"] is not wrapper_scope.signal
    assert body_saw_abort == [True]  # the caller's stop reached the body's signal
    assert not wrapper_scope.signal.aborted  # fusion never flows upstream
    assert seen["post"] is caller.signal and views[0].signal is caller.signal  # restored
    assert caller.signal.listener_count == 0 and wrapper_scope.signal.listener_count == 0
    assert result.code == ABORTED


async def test_a_wrapper_scope_abort_reaches_the_body_but_not_the_caller() -> None:
    caller, scope = AbortController(), AbortController()

    async def wrapper(call: ToolDispatchExecution, delegate: Delegate) -> ToolResult:
        call.replace_signal(scope.signal)
        return await delegate()

    async def body(args: Args, call: ToolExecution) -> ToolResult:
        scope.abort(HookCause("scope"))
        assert call.signal.cause == HookCause("scope")
        call.signal.raise_if_aborted()
        return ok_result("unreachable")

    tool = define_tool("T", args=Args, tool_class=ToolClass.LOCAL, body=body)
    result = await ToolRegistry([tool], wrappers=[wrapper]).execute(
        request("c1", "T", caller.signal))
    assert result.code == ABORTED and not caller.signal.aborted


# -- error precedence ---------------------------------------------------------------------------


async def _stopped_then(outcome: str) -> ToolResult:
    """A stop arrives first; then the stage named by ``outcome`` fails."""
    caller = AbortController()

    async def body(args: Args, call: ToolExecution) -> ToolResult:
        caller.abort(UserCause())
        if outcome == "tool raises":
            raise ValueError("disk on fire")
        if outcome == "tool error":
            return error_result(ErrorCode.TOOL_FAILED, "exit 2", body_invoked=True)
        return ok_result("ok")

    async def wrapper(call: ToolDispatchExecution, delegate: Delegate) -> ToolResult:
        result = await delegate()
        if outcome == "wrapper raises":
            raise RuntimeError("wrapper broke")
        return result

    async def post(call: ToolExecution, result: ToolResult) -> ToolResult:
        if outcome == "post raises":
            raise KeyError("post broke")
        return result

    async def pre(call: ToolExecution) -> PolicyDecision:
        if outcome == "pre raises":
            caller.abort(UserCause())
            raise LookupError("policy broke")
        return Allow()

    tool = define_tool("T", args=Args, tool_class=ToolClass.LOCAL, body=body)
    registry = ToolRegistry([tool], pre_policies=[pre], wrappers=[wrapper], post_policies=[post])
    return await registry.execute(request("c1", "T", caller.signal))


@pytest.mark.parametrize(("outcome", "stage", "name", "invoked"), [
    ("pre raises", "pre-policy", "LookupError", False),
    ("tool raises", "body", "ValueError", True),
    ("wrapper raises", "wrapper", "RuntimeError", True),
    ("post raises", "post-policy", "KeyError", True),
])
async def test_failures_beat_a_stop(outcome: str, stage: str, name: str, invoked: bool) -> None:
    result = await _stopped_then(outcome)
    assert result.code == ErrorCode.TOOL_FAILED.name, result
    assert result.error is not None and result.error.info.name == name
    assert result.details["stage"] == stage and result.body_invoked is invoked


async def test_an_abort_error_without_an_aborted_signal_is_a_failure() -> None:
    async def body(args: Args, call: ToolExecution) -> ToolResult:
        raise AbortError(HookCause("someone else's"))

    tool = define_tool("T", args=Args, tool_class=ToolClass.LOCAL, body=body)
    caller = AbortController()
    result = await ToolRegistry([tool]).execute(request("c1", "T", caller.signal))
    assert result.code == ErrorCode.TOOL_FAILED.name and not caller.signal.aborted
    assert result.error is not None and result.error.info.name == "AbortError"


async def test_a_tool_error_result_beats_a_stop() -> None:
    caller = AbortController()

    async def body(args: Args, call: ToolExecution) -> ToolResult:
        caller.abort(UserCause())
        return error_result(ErrorCode.TOOL_FAILED, "exit 2", body_invoked=True)

    tool = define_tool("T", args=Args, tool_class=ToolClass.LOCAL, body=body)
    result = await ToolRegistry([tool]).execute(request("c1", "T", caller.signal))
    assert result.code == ErrorCode.TOOL_FAILED.name and "exit 2" in result.content[0].text  # type: ignore[union-attr]


async def test_a_delegate_may_run_only_once() -> None:
    log = BodyLog()

    async def twice(call: ToolDispatchExecution, delegate: Delegate) -> ToolResult:
        await delegate()
        return await delegate()

    registry = ToolRegistry([logged_tool("T", uncooperative(0), log)], wrappers=[twice])
    result = await registry.execute(request("c1", "T", AbortController().signal))
    assert result.code == ErrorCode.TOOL_FAILED.name and result.details["stage"] == "wrapper"
    assert log.invoked == ["c1"]


# -- quiescence ---------------------------------------------------------------------------------


async def test_an_uncooperative_body_keeps_the_call_pending_until_it_settles(
    autojump_clock: trio.testing.MockClock,
) -> None:
    log = BodyLog()
    registry = ToolRegistry([logged_tool("T", uncooperative(30), log)])
    result = await execute_with_stop(registry, 1)
    assert trio.current_time() == pytest.approx(30)  # awaited, never raced
    assert log.finished == ["c1"] and result.code == ABORTED


async def test_trio_cancellation_does_not_abandon_a_started_call(
    autojump_clock: trio.testing.MockClock,
) -> None:
    log = BodyLog()
    registry = ToolRegistry([logged_tool("T", uncooperative(30), log)])
    with trio.move_on_after(1) as scope:
        result = await registry.execute(request("c1", "T", AbortController().signal))
    assert scope.cancel_called  # the scope's deadline passed, ...
    assert trio.current_time() == pytest.approx(30) and log.finished == ["c1"]  # ... body ran out
    assert result.code is None
