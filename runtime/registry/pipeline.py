"""One tool call through its stages: the call token and its single run.

``ToolRegistry.prepare`` makes a ``ToolCall`` (the call token): it snapshots the
definition and its final-content callback and materializes the arguments into
the tool's frozen Struct, all before looking at the signal, so a
materialization failure wins even over a stop. ``run()`` then executes the
stages once and returns the one frozen, authoritative result:

1. unknown tool / invalid arguments -> that error;
2. caller's signal already aborted -> ``ABORTED_BEFORE_DISPATCH``, no stage runs;
3. pre-policies, then approval if one asked; a denial is kept even if it
   settles after a stop, otherwise a stop seen when a policy settles ->
   ``ABORTED_BEFORE_DISPATCH``;
4. around-dispatch wrappers; ``delegate()`` of the innermost fuses the current
   (possibly replaced) signal with the caller's, and if that is aborted returns
   ``ABORTED_BEFORE_DISPATCH`` without invoking the body;
5. the body: ``body_invoked`` is set immediately before it is called, and it is
   awaited until it returns, however long that takes;
6. post-policies (caller's signal); a success the stop overtook -> ``ABORTED``;
7. snapshot of the candidate result (msgspec JSON round trip: the published
   result shares nothing with the stages and is exactly what the log will hold;
   a snapshot failure becomes ``TOOL_FAILED``), deferred contexts attached, the
   final-content callback applied;
8. published; then observers look at it (only if the call reached step 3: a
   call that ends before its stages skips every stage, observers included).

``run()`` is shielded from trio cancellation: once a call runs, only its signal
can stop it, and the registry waits for every stage it started.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from functools import partial
from typing import Any, Literal, TypeVar

import msgspec
import trio

from protocol.toolclass import ToolClass
from protocol.tools import Content, ToolResult
from runtime.registry import outcomes
from runtime.registry.definition import JsonObjectArgs, ToolDefinition
from runtime.registry.outcomes import Stage
from runtime.registry.policies import (
    Allow,
    Approval,
    Ask,
    Deny,
    DispatchWrapper,
    PostPolicy,
    PrePolicy,
    ResultObserver,
)
from runtime.registry.signal import fuse
from runtime.registry.views import ToolDispatchExecution, ToolExecution, ToolExecutionInput, _Run

__all__ = ["Stages", "ToolCall"]

log = logging.getLogger(__name__)

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Stages:
    """The stages a registry runs around every body, snapshotted per call."""

    pre_policies: tuple[PrePolicy, ...] = ()
    approval: Approval | None = None
    wrappers: tuple[DispatchWrapper, ...] = ()
    post_policies: tuple[PostPolicy, ...] = ()
    observers: tuple[ResultObserver, ...] = ()


@dataclass(frozen=True, slots=True)
class _Failed:
    stage: Stage
    error: Exception


async def _contain(stage: Stage, thunk: Callable[[], Awaitable[T]]) -> T | _Failed:
    """Await one stage's own code (policy, wrapper, body, callback, observer).

    This is the registry's one catch-all, and it is deliberate: whatever a tool
    body or a pluggable stage raises is that call's outcome, to be classified
    (the stop it observed, or its failure as ``TOOL_FAILED``) and published as
    the call's result; it must never escape into the scheduler and take sibling
    calls down with it. ``BaseException`` (trio.Cancelled, KeyboardInterrupt)
    is not caught.
    """
    try:
        return await thunk()
    except Exception as exc:  # noqa: BLE001 -- see docstring: a stage failure is a result
        return _Failed(stage, exc)


_State = Literal["ready", "running", "settled"]


class ToolCall:
    """The token of one call: made by ``ToolRegistry.prepare``, run exactly once."""

    def __init__(self, request: ToolExecutionInput, definition: ToolDefinition[Any] | None,
                 stages: Stages) -> None:
        self.call_id = request.call_id
        self.tool = request.tool
        self._caller = request.signal
        self._definition = definition
        self._final_content = definition.final_content if definition is not None else None
        self._stages = stages
        self._state: _State = "ready"
        self._result: ToolResult | None = None
        self._stop_driven = False
        self._entered = False  # passed the pre-abort check: the stages (and observers) run
        self._early: ToolResult | None = None
        self._run: _Run | None = None
        if definition is None:
            self._early = outcomes.unknown_tool(request.tool)
            return
        try:
            args = _materialize(request.args, definition.args_type)
        except msgspec.DecodeError as exc:  # ValidationError is a DecodeError
            self._early = outcomes.invalid_arguments(exc)
            return
        self._run = _Run(call_id=request.call_id, tool=request.tool,
                         tool_class=definition.tool_class, args=args,
                         caller_signal=request.signal)

    # -- state ------------------------------------------------------------------------

    @property
    def tool_class(self) -> ToolClass | None:
        return self._definition.tool_class if self._definition is not None else None

    @property
    def body_invoked(self) -> bool:
        return self._run is not None and self._run.body_invoked

    @property
    def settled(self) -> bool:
        return self._state == "settled"

    @property
    def result(self) -> ToolResult | None:
        """The published result, once settled."""
        return self._result

    # -- the stop walk ----------------------------------------------------------------

    async def stop(self) -> bool:
        """Drive this call's stop handler, once, if its body was invoked and is unsettled.

        The scheduler's stop walk calls this directly, so a stop reaches the tool
        (e.g. the host) even if the body never looks at its signal. Returns
        whether the handler ran. The handler's exceptions propagate.
        """
        definition, run = self._definition, self._run
        if (definition is None or definition.stop is None or run is None
                or not run.body_invoked or self._state == "settled" or self._stop_driven):
            return False
        self._stop_driven = True
        await definition.stop(ToolExecution(run, run.caller_signal))
        return True

    # -- the run ----------------------------------------------------------------------

    async def run(self) -> ToolResult:
        """Run every stage once; return the one frozen, published result."""
        if self._state != "ready":
            raise RuntimeError(f"call {self.call_id} has already run")
        self._state = "running"
        with trio.CancelScope(shield=True):
            result = await self._finalize(await self._outcome())
            self._result = result
            self._state = "settled"
            if self._run is not None:
                self._run.published = True
                if self._entered:
                    await self._observe(self._run, result)
        return result

    async def _outcome(self) -> ToolResult:
        if self._early is not None:
            return self._early
        run = self._run
        assert run is not None
        if self._caller.aborted:
            return outcomes.aborted(body_invoked=False)
        self._entered = True
        refused = await self._pre_policies(run)
        if refused is not None:
            return refused
        return await self._post_policies(run, await self._dispatch(run))

    async def _pre_policies(self, run: _Run) -> ToolResult | None:
        """``None`` to proceed, else the terminal result (denial, failure, stop)."""
        view = ToolExecution(run, self._caller)
        ask: Ask | None = None
        for policy in self._stages.pre_policies:
            decision = await _contain("pre-policy", partial(policy, view))
            refused = self._refusal("pre-policy", decision)
            if refused is not None:
                return refused
            if isinstance(decision, Ask) and ask is None:
                ask = decision
        if ask is None:
            return None
        approval = self._stages.approval
        if approval is None:
            return outcomes.denied("approval", "approval required but no approver is configured")
        answer = await _contain("approval", partial(approval, view, ask))
        return self._refusal("approval", answer)

    def _refusal(self, stage: Stage, decision: Allow | Deny | Ask | _Failed) -> ToolResult | None:
        if isinstance(decision, _Failed):
            return outcomes.from_failure(stage, decision.error,
                                         signal_aborted=self._caller.aborted, body_invoked=False)
        if isinstance(decision, Deny):
            return outcomes.denied(stage, decision.reason)  # kept even after a stop
        if self._caller.aborted:
            return outcomes.aborted(body_invoked=False)
        return None

    async def _dispatch(self, run: _Run) -> ToolResult:
        """The around-dispatch waterfall, ending in the body."""
        view = ToolDispatchExecution(run)
        wrappers = self._stages.wrappers

        async def level(index: int) -> ToolResult:
            if index == len(wrappers):
                return await self._invoke_body(run)
            called = returned = False

            async def delegate() -> ToolResult:
                nonlocal called
                if called or returned:
                    raise RuntimeError("delegate() may be called once, before its wrapper returns")
                called = True
                return await level(index + 1)

            upstream = run.dispatch_signal
            try:
                return await wrappers[index](view, delegate)
            finally:
                returned = True
                run.dispatch_signal = upstream  # restore what this wrapper was given

        outcome = await _contain("wrapper", partial(level, 0))
        run.dispatch_signal = run.caller_signal
        if isinstance(outcome, _Failed):
            return outcomes.from_failure("wrapper", outcome.error,
                                         signal_aborted=self._caller.aborted,
                                         body_invoked=run.body_invoked)
        return outcomes.overtaken_by_stop(outcome, caller_aborted=self._caller.aborted,
                                          body_invoked=run.body_invoked)

    async def _invoke_body(self, run: _Run) -> ToolResult:
        definition = self._definition
        assert definition is not None
        with fuse(run.caller_signal, run.dispatch_signal) as signal:
            if signal.aborted:
                return outcomes.aborted(body_invoked=False)
            run.body_invoked = True
            outcome = await _contain(
                "body", partial(definition.body, run.args, ToolExecution(run, signal)))
            signal_aborted = signal.aborted
        if isinstance(outcome, _Failed):
            return outcomes.from_failure("body", outcome.error, signal_aborted=signal_aborted,
                                         body_invoked=True)
        return outcome

    async def _post_policies(self, run: _Run, result: ToolResult) -> ToolResult:
        view = ToolExecution(run, self._caller)
        for policy in self._stages.post_policies:
            outcome = await _contain("post-policy", partial(policy, view, result))
            if isinstance(outcome, _Failed):
                return outcomes.from_failure("post-policy", outcome.error,
                                             signal_aborted=self._caller.aborted,
                                             body_invoked=run.body_invoked)
            result = outcome
        return outcomes.overtaken_by_stop(result, caller_aborted=self._caller.aborted,
                                          body_invoked=run.body_invoked)

    async def _finalize(self, candidate: ToolResult) -> ToolResult:
        body_invoked = self.body_invoked
        try:
            result = _snapshot(candidate)
        except (TypeError, ValueError, OverflowError, msgspec.MsgspecError) as exc:
            log.warning("call %s: result snapshot failed", self.call_id, exc_info=exc)
            result = outcomes.stage_failed("result-snapshot", exc, body_invoked=body_invoked)
        final_content = self._final_content
        if final_content is not None:

            async def apply(candidate: ToolResult) -> tuple[Content, ...]:
                return tuple(final_content(candidate))

            content = await _contain("final-content", partial(apply, result))
            if isinstance(content, _Failed):
                log.warning("call %s: final-content callback failed", self.call_id,
                            exc_info=content.error)
                result = outcomes.stage_failed("final-content", content.error,
                                               body_invoked=body_invoked)
            else:
                result = msgspec.structs.replace(result, content=content)
        if self._run is not None and self._run.contexts:
            result = msgspec.structs.replace(
                result, details={**result.details, "contexts": list(self._run.contexts)})
        return result

    async def _observe(self, run: _Run, result: ToolResult) -> None:
        view = ToolExecution(run, self._caller)
        for observer in self._stages.observers:
            outcome = await _contain("observer", partial(observer, view, result))
            if isinstance(outcome, _Failed):
                log.warning("call %s: result observer failed", self.call_id,
                            exc_info=outcome.error)

    def __repr__(self) -> str:
        return f"<ToolCall {self.tool} {self.call_id} {self._state}>"


def _materialize(raw: Any, args_type: type[msgspec.Struct]) -> msgspec.Struct:
    """A fresh, frozen copy of the arguments in the tool's Struct (JSON text or objects)."""
    if issubclass(args_type, JsonObjectArgs):
        return args_type.materialize(raw)
    if isinstance(raw, bytes | str):
        return msgspec.json.decode(raw, type=args_type)
    return msgspec.convert(raw, type=args_type)


def _snapshot(result: ToolResult) -> ToolResult:
    if not isinstance(result, ToolResult):
        raise TypeError(f"a tool result must be a ToolResult, not {type(result).__name__}")
    return msgspec.json.decode(msgspec.json.encode(result), type=ToolResult)
