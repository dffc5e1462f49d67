"""One tool call through its stages: the call token and its single run.

``ToolRegistry.prepare`` makes a ``ToolCall`` (the call token): it snapshots the
definition and its final-content callback and materializes the arguments into
the tool's frozen Struct (losslessly: unknown fields are refused, and arguments
that would not survive their JSON form, e.g. NaN, are invalid), all before
looking at the signal, so a materialization failure wins even over a stop.
``run()`` then executes the stages once and returns the one frozen,
authoritative result:

1. unknown tool / invalid arguments -> that error;
2. caller's signal already aborted -> ``ABORTED_BEFORE_DISPATCH``; no stage
   before publication runs (result observers still see the published result);
3. pre-policies, then approval if one asked; a denial is kept even if it
   settles after a stop, otherwise a stop seen when a policy settles ->
   ``ABORTED_BEFORE_DISPATCH``;
4. around-dispatch wrappers; ``delegate()`` of the innermost fuses the current
   (possibly replaced) signal with the caller's, and if that is aborted returns
   ``ABORTED_BEFORE_DISPATCH`` without invoking the body;
5. the body: ``body_invoked`` is set immediately before it is called, and it is
   awaited until it returns, however long that takes;
6. post-policies (caller's signal); a success the stop overtook -> ``ABORTED``;
7. snapshot of the candidate result (a msgspec JSON round trip that must give
   back an equal result: the published result shares nothing with the stages
   and is exactly what the log will hold; any snapshot failure becomes
   ``TOOL_FAILED``), the final-content callback applied, deferred contexts
   attached, ``details`` deeply frozen, ``body_invoked`` false if the registry
   never invoked the body (a wrapper answered by itself);
8. published; then result observers look at it (every call whose arguments
   materialized, pre-aborted ones included; unknown-tool and invalid-argument
   results have no call to show an observer).

Every stage's output is type-checked where it comes back, inside the same
containment as its exceptions, so a stage returning the wrong thing is that
stage's ``TOOL_FAILED``, never an exception out of ``run()``. ``run()`` is
shielded from trio cancellation: once a call runs, only its signal can stop it,
and the registry waits for every stage it started.
"""

from __future__ import annotations

import enum
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from functools import partial
from typing import Any, TypeVar

import msgspec
import trio

from protocol.statetable import StateTable
from protocol.toolclass import ToolClass
from protocol.tools import ToolResult
from runtime.agent.registry import outcomes
from runtime.agent.registry.definition import ToolDefinition
from runtime.agent.registry.frozen import freeze, freeze_result, sealed
from runtime.agent.registry.lossless import materialize_args, snapshot_result
from runtime.agent.registry.outcomes import Stage
from runtime.agent.registry.policies import (
    Allow,
    Approval,
    Ask,
    Deny,
    DispatchWrapper,
    PostPolicy,
    PrePolicy,
    ResultObserver,
)
from runtime.agent.registry.signal import fuse
from runtime.agent.registry.views import (
    CallRun,
    ToolDispatchExecution,
    ToolExecution,
    ToolExecutionInput,
)

__all__ = ["TABLE", "Stages", "TokenEvent", "ToolCall"]

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


async def _contain(stage: Stage, thunk: Callable[[], Awaitable[T]],
                   returns: type[Any] | tuple[type[Any], ...] | None = None) -> T | _Failed:
    """Await one stage's own code (policy, wrapper, body, callback, observer, stop handler).

    This is the registry's one catch-all, and it is deliberate: whatever a tool
    body or a pluggable stage raises is that call's outcome, to be classified
    (the stop it observed, or its failure as ``TOOL_FAILED``) and published as
    the call's result; it must never escape into the scheduler and take sibling
    calls down with it. ``BaseException`` (trio.Cancelled, KeyboardInterrupt)
    is not caught. With ``returns``, an outcome of another type is the stage's
    failure too (a ``TypeError``): the annotations of pluggable code are not
    checked at run time, and the registry must not trip over what it returned.
    """
    try:
        outcome = await thunk()
    except Exception as exc:  # noqa: BLE001 -- see docstring: a stage failure is a result
        return _Failed(stage, exc)
    if returns is not None and not isinstance(outcome, returns):
        return _Failed(stage, TypeError(f"{stage} returned {type(outcome).__name__}"))
    return outcome


class TokenEvent(enum.Enum):
    RUN = "run"  # run() began: its one run
    SETTLE = "settle"  # its one result is published


TABLE: StateTable[str, TokenEvent] = StateTable(
    "the registry's call token", "ready", {
        ("ready", TokenEvent.RUN): "running",
        ("running", TokenEvent.SETTLE): "settled",
    }, doc="one ToolCall, made by ToolRegistry.prepare and run exactly once")


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
        self._state = TABLE.initial
        self._result: ToolResult | None = None
        self._stop_driven = False
        self._stop_scope: trio.CancelScope | None = None  # the running stop handler's
        self._early: ToolResult | None = None
        self._run: CallRun | None = None
        if definition is None:
            self._early = outcomes.unknown_tool(request.tool)
            return
        try:
            args = materialize_args(request.args, definition.args_type)
        except msgspec.DecodeError as exc:  # ValidationError is a DecodeError
            self._early = outcomes.invalid_arguments(exc)
            return
        self._run = CallRun(call_id=request.call_id, tool=request.tool,
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
        whether the handler ran. The handler's work ends when the call settles:
        a handler still running then is cancelled (its job, getting the stop to
        the tool, is moot), so a handler that never returns cannot hang the
        step. A handler that raises is logged and otherwise ignored: the call
        still settles through its signal and its body, and its result is kept.
        """
        definition, run = self._definition, self._run
        if (definition is None or definition.stop is None or run is None
                or not run.body_invoked or self._state == "settled" or self._stop_driven):
            return False
        self._stop_driven = True
        with trio.CancelScope() as scope:
            self._stop_scope = scope
            view = ToolExecution(run, run.caller_signal)
            outcome = await _contain("stop-handler", partial(definition.stop, view))
            if isinstance(outcome, _Failed):
                log.warning("call %s: stop handler failed", self.call_id, exc_info=outcome.error)
        if scope.cancelled_caught:
            log.info("call %s settled before its stop handler returned; the handler was ended",
                     self.call_id)
        return True

    # -- the run ----------------------------------------------------------------------

    async def run(self) -> ToolResult:
        """Run every stage once; return the one frozen, published result."""
        self._state = TABLE.next(self._state, TokenEvent.RUN)  # a second run() raises
        with trio.CancelScope(shield=True):
            result = await self._finalize(await self._outcome())
            self._result = result
            self._state = TABLE.next(self._state, TokenEvent.SETTLE)
            if self._stop_scope is not None:
                self._stop_scope.cancel()
            if self._run is not None:
                self._run.published = True
                await self._observe(self._run, result)
        return result

    async def _outcome(self) -> ToolResult:
        if self._early is not None:
            return self._early
        run = self._run
        assert run is not None
        if self._caller.aborted:
            return outcomes.aborted(body_invoked=False)
        refused = await self._pre_policies(run)
        if refused is not None:
            return refused
        return await self._post_policies(run, await self._dispatch(run))

    async def _pre_policies(self, run: CallRun) -> ToolResult | None:
        """``None`` to proceed, else the terminal result (denial, failure, stop)."""
        view = ToolExecution(run, self._caller)
        ask: Ask | None = None
        for policy in self._stages.pre_policies:
            decision = await _contain("pre-policy", partial(policy, view), (Allow, Deny, Ask))
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
        answer = await _contain("approval", partial(approval, view, ask), (Allow, Deny))
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

    async def _dispatch(self, run: CallRun) -> ToolResult:
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
                result = await wrappers[index](view, delegate)
            finally:
                returned = True
                run.dispatch_signal = upstream  # restore what this wrapper was given
            if not isinstance(result, ToolResult):  # fails this wrapper and the ones around it
                raise TypeError(f"wrapper returned {type(result).__name__}")
            return result

        outcome = await _contain("wrapper", partial(level, 0), ToolResult)
        run.dispatch_signal = run.caller_signal
        if isinstance(outcome, _Failed):
            return outcomes.from_failure("wrapper", outcome.error,
                                         signal_aborted=self._caller.aborted,
                                         body_invoked=run.body_invoked)
        return outcomes.overtaken_by_stop(outcome, caller_aborted=self._caller.aborted,
                                          body_invoked=run.body_invoked)

    async def _invoke_body(self, run: CallRun) -> ToolResult:
        definition = self._definition
        assert definition is not None
        with fuse(run.caller_signal, run.dispatch_signal) as signal:
            if signal.aborted:
                return outcomes.aborted(body_invoked=False)
            run.body_invoked = True
            outcome = await _contain(
                "body", partial(definition.body, run.args, ToolExecution(run, signal)), ToolResult)
            signal_aborted = signal.aborted
        if isinstance(outcome, _Failed):
            return outcomes.from_failure("body", outcome.error, signal_aborted=signal_aborted,
                                         body_invoked=True)
        return outcome

    async def _post_policies(self, run: CallRun, result: ToolResult) -> ToolResult:
        view = ToolExecution(run, self._caller)
        for policy in self._stages.post_policies:
            outcome = await _contain("post-policy", partial(policy, view, result), ToolResult)
            if isinstance(outcome, _Failed):
                return outcomes.from_failure("post-policy", outcome.error,
                                             signal_aborted=self._caller.aborted,
                                             body_invoked=run.body_invoked)
            result = outcome
        return outcomes.overtaken_by_stop(result, caller_aborted=self._caller.aborted,
                                          body_invoked=run.body_invoked)

    async def _finalize(self, candidate: ToolResult) -> ToolResult:
        async def take() -> ToolResult:
            return snapshot_result(candidate)

        result = await self._published_form("result-snapshot", take)
        final_content = self._final_content
        if final_content is not None:
            base = result

            async def apply() -> ToolResult:
                content = tuple(final_content(base))
                return snapshot_result(msgspec.structs.replace(base, content=content))

            result = await self._published_form("final-content", apply)
        if self._run is not None and self._run.contexts:
            result = msgspec.structs.replace(result, details=freeze(
                {**result.details, "contexts": self._run.contexts}))
        if result.body_invoked and not self.body_invoked:  # a wrapper answered by itself
            result = msgspec.structs.replace(result, body_invoked=False)
        return result

    async def _published_form(self, stage: Stage,
                              make: Callable[[], Awaitable[ToolResult]]) -> ToolResult:
        """``make()``'s snapshot, or (if it fails in any way) ``stage``'s ``TOOL_FAILED``."""
        outcome = await _contain(stage, make, ToolResult)
        if isinstance(outcome, _Failed):
            log.warning("call %s: %s failed", self.call_id, stage, exc_info=outcome.error)
            return freeze_result(outcomes.stage_failed(stage, outcome.error,
                                                       body_invoked=self.body_invoked))
        return outcome

    async def _observe(self, run: CallRun, result: ToolResult) -> None:
        view = ToolExecution(run, self._caller)
        result = sealed(result)  # observers cannot change what is published, even empty details
        for observer in self._stages.observers:
            outcome = await _contain("observer", partial(observer, view, result))
            if isinstance(outcome, _Failed):
                log.warning("call %s: result observer failed", self.call_id,
                            exc_info=outcome.error)

    def __repr__(self) -> str:
        return f"<ToolCall {self.tool} {self.call_id} {self._state}>"

