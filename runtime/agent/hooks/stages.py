"""One turn's hooks as the registry's stages (``runtime.agent.registry``), not beside them.

- ``pre_tool_use`` hooks are a pre-policy: the matching hooks run in configuration order
  and the first deny wins (``Deny``: the call ends ``TOOL_DENIED``, kept even if a stop
  came meanwhile); ``ask`` is the registry's ``Ask``, whose approval stage here sends the
  call to the host with ``ask`` set, so the host's permission prompt asks whatever the
  mode (a runtime-local tool has no prompt: denied).
- ``post_tool_use`` hooks are a post-policy: they see the body's result; a deny replaces
  it with ``TOOL_DENIED`` (the body ran: ``bodyInvoked`` and its details kept). A post
  hook that *failed* denies nothing: the result is kept and the failure added as a
  deferred context (recorded as decision ``failed``); the next hooks still run.
- ``additionalContext`` is a deferred context of the call (the model sees it with the
  result); ``stopTurn`` aborts the turn's controller with ``HookCause`` (the turn then
  stops like any stop: this call ends aborted, the step's others too).
- ``[tools.timeouts]`` is a ``TimeoutPolicy`` around dispatch (``TOOL_TIMEOUT``).

A stop while a hook runs kills its tree (``run.py``). In a pre hook the stop is the
registry's: the policy raises ``AbortError`` and the call ends
``ABORTED_BEFORE_DISPATCH``; in a post hook the body's result is returned as it was and
the registry's rule makes it ``ABORTED``, its details kept. Every hook that ran is
recorded in the log (``hook/decision``) before the call's result.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import msgspec

from protocol.errors import ErrorCode
from protocol.ids import host_call_id
from protocol.messages.events import DurableEvent, HookDecision, HookDecisionEvent
from protocol.messages.host import HooksRunParams
from protocol.toolclass import ToolClass
from protocol.tools import ToolResult, error_result
from runtime.agent.hooks.answer import FAILED_PREFIX, Verdict, hook_input, verdict
from runtime.agent.hooks.config import Hook, HookConfig, HookEventName
from runtime.agent.hooks.run import run_hook
from runtime.agent.hostport import HostPort
from runtime.agent.registry import (
    AbortError,
    Allow,
    ApprovalDecision,
    Ask,
    Cause,
    Deny,
    DispatchWrapper,
    HookCause,
    JsonObjectArgs,
    PolicyDecision,
    TimeoutPolicy,
    ToolExecution,
)

STOPPED_REASON = "the call was stopped while the hook ran; its process tree was killed"


@dataclass(frozen=True)
class RunningHook:
    """A hook running for a call, as operators see it."""

    call_id: str
    tool: str
    tool_class: ToolClass
    label: str
    command: tuple[str, ...]
    since: float = field(default_factory=time.monotonic)


Record = Callable[[Callable[[int], DurableEvent]], object]


class TurnHooks:
    """The hooks of one turn (see the module's text)."""

    def __init__(self, config: HookConfig, host: HostPort, *, session_id: str, turn_id: str,
                 workspace: str, record: Record, stop_turn: Callable[[Cause], None],
                 grace: float) -> None:
        self._config = config
        self._host = host
        self._session_id = session_id
        self._turn_id = turn_id
        self._workspace = workspace
        self._record = record
        self._stop_turn = stop_turn
        self._grace = grace
        self._asked: set[str] = set()
        self.running: dict[str, RunningHook] = {}
        """By call id: the hook each call is running now."""

    def stages(self) -> dict[str, Any]:
        """The ``ToolRegistry`` keyword arguments of these hooks' stages."""
        wrappers: list[DispatchWrapper] = []
        if self._config.timeouts:
            wrappers.append(TimeoutPolicy(lambda call: self._config.timeout_for(call.tool)))
        return {"pre_policies": (self.pre_tool_use,), "approval": self.approval,
                "post_policies": (self.post_tool_use,), "wrappers": tuple(wrappers)}

    def asked(self, call_id: str) -> bool:
        """Whether a hook asked for the call's permission prompt (``tools.execute``'s ``ask``)."""
        return call_id in self._asked

    # -- the stages ---------------------------------------------------------------------

    async def pre_tool_use(self, call: ToolExecution) -> PolicyDecision:
        hooks = self._config.matching("pre_tool_use", call.tool)
        if not hooks:
            return Allow()
        payload = self._input("pre_tool_use", call)
        ask: Ask | None = None
        for hook in hooks:
            answer = await self._run(hook, call, payload)
            if answer.decision == "deny":
                return Deny(answer.reason)
            if answer.stop_turn is not None:
                return Allow()  # the turn is stopping: the registry ends the call aborted
            if answer.decision == "ask" and ask is None:
                ask = Ask(answer.reason)
        return ask or Allow()

    async def approval(self, call: ToolExecution, ask: Ask) -> ApprovalDecision:
        """A hook asked: the host's prompt decides (``tools.execute`` with ``ask``)."""
        if call.tool_class is ToolClass.LOCAL:
            return Deny(f"a hook asked for a permission prompt, but {call.tool} runs in the "
                        "runtime and has none")
        self._asked.add(call.call_id)
        return Allow()

    async def post_tool_use(self, call: ToolExecution, result: ToolResult) -> ToolResult:
        hooks = self._config.matching("post_tool_use", call.tool)
        if not hooks or call.signal.aborted:  # a stopped call's result is the stop's
            return result
        payload = self._input("post_tool_use", call, result)
        for hook in hooks:
            try:
                answer = await self._run(hook, call, payload)
            except AbortError:
                return result  # the registry: a success the stop overtook is ABORTED
            if answer.failed:  # it denies nothing: the call ran; the model is told
                call.defer_context(f"the {hook.label} hook failed after the call ran (the "
                                   f"result above is the call's own): "
                                   f"{answer.reason.removeprefix(FAILED_PREFIX)}")
                continue
            if answer.decision == "deny":
                return _denied_after_body(result, answer.reason)
            if answer.stop_turn is not None:
                break
        return result

    # -- one hook -------------------------------------------------------------------------

    def _input(self, event: HookEventName, call: ToolExecution,
               result: ToolResult | None = None) -> str:
        return hook_input(event, session_id=self._session_id, turn_id=self._turn_id,
                          call_id=call.call_id, tool=call.tool, args=_args(call.args),
                          workspace=self._workspace, result=result)

    async def _run(self, hook: Hook, call: ToolExecution, payload: str) -> Verdict:
        """Run ``hook`` for ``call``; its verdict, recorded. ``AbortError`` if the call was
        stopped and the hook's tree killed before it answered."""
        params = HooksRunParams(
            self._session_id, f"{host_call_id(self._turn_id, call.call_id)}/{hook.label}",
            hook.spec.command, payload, hook.spec.timeout, sandbox=hook.spec.sandbox)
        running = self.running[call.call_id] = RunningHook(
            call.call_id, call.tool, call.tool_class, hook.label, hook.spec.command)
        try:
            result = await run_hook(self._host, params, call.signal, grace=self._grace)
        except AbortError:
            self._log(hook, call, "aborted", "the call was stopped before the hook started",
                      running)
            raise
        finally:
            self.running.pop(call.call_id, None)
        if result is None or result.outcome == "stopped":
            self._log(hook, call, "aborted", STOPPED_REASON, running)
            cause = call.signal.cause
            assert cause is not None, "a hook is stopped only by its call's stop"
            raise AbortError(cause)
        answer = verdict(hook.event, result, hook.spec.timeout)
        if answer.context is not None:
            call.defer_context(answer.context)
        stop = answer.stop_turn if answer.decision != "deny" else None
        decision: HookDecision = "stop" if stop is not None else answer.decision
        if answer.failed and hook.event == "post_tool_use":
            decision = "failed"  # after the call ran, a failure is not a denial
        self._log(hook, call, decision, stop if stop is not None else answer.reason, running,
                  failed=answer.failed, duration_ms=result.duration_ms)
        if stop is not None:
            self._stop_turn(HookCause(stop))
        return answer

    def _log(self, hook: Hook, call: ToolExecution, decision: HookDecision, reason: str,
             running: RunningHook, *, failed: bool = False, duration_ms: int | None = None
             ) -> None:
        if duration_ms is None:
            duration_ms = round((time.monotonic() - running.since) * 1000)
        turn_id, call_id = self._turn_id, call.call_id
        self._record(lambda seq: HookDecisionEvent(
            seq, turn_id, call_id, hook.event, hook.index, hook.spec.command, decision, reason,
            duration_ms, failed))


def _args(args: msgspec.Struct) -> Any:
    return args.value() if isinstance(args, JsonObjectArgs) else msgspec.to_builtins(args)


def _denied_after_body(result: ToolResult, reason: str) -> ToolResult:
    """A post hook's deny: the body ran, so its details stay; the model reads the reason."""
    return error_result(ErrorCode.TOOL_DENIED, f"denied after the call ran: {reason}",
                        name="ToolDenied", body_invoked=result.body_invoked,
                        details={**result.details, "stage": "post-policy",
                                 "resultCode": result.code})
