"""Host tools as registry bodies: ``tools.execute`` out, and the per-class stop policy.

The body sends ``tools.execute`` and waits for the host's result or a stop. A stop
(the call's signal, or the scheduler's stop walk through the definition's stop
handler, whichever comes first) moves the call to ``aborting`` (``hostcall.py``, the
call's state table), and that transition starts the call's one ``tools.abort``
sender, in the nursery of the turn's host lease (``HostPort.start_soon``): the
request may outlive the call, never the lease's owner. Then, by the tool's class:

- read-only: stops waiting at once, without waiting for the host's answer to the
  abort (``ABORTED``: the body may have started); the request may still finish in
  the lease's nursery for ``LATE_RESULT_WAIT``, and a late host result is logged (INFO:
  call, tool, code) and discarded.
- process: waits up to ``process_grace`` for the host's result (the output the
  host collected before it killed the tree); past it, the runtime ends the call's
  processes itself (``HostPort.end_call_processes``: its cgroup killed, or the host
  ended and its trees swept), then ``ABORTED`` with the progress output already
  received, marked ``unconfirmed`` (the host never said what it did) and
  ``processesEnded``: an aborted answer always means the processes are gone.
- mutating and plugin: awaits the host's result, with no deadline.

Plugin tools (``mcp__<server>__<tool>``, listed by the host's ``plugins.list``) are
defined from the host's listing: free-form JSON arguments (``JsonObjectArgs``,
validated by the plugin server) and the server's own input schema for the model.

``ABORTED_BEFORE_DISPATCH`` is reported only when the host says the body never
started: its own result says so, or its answer to ``tools.abort`` found the call
before its body (or not at all, so the tombstone will stop it), or the request was
never sent (``details.hostUnavailable``: the turn's host is gone). A link that dies
under a call gives ``HOST_CRASHED`` (the body may have run), once the dead host's
leftover tool processes are killed (``HostPort.wait_host_gone``, bounded): a crashed
call never settles while a process it started lives. Either way the turn has lost its
host (``lost_host``) and ends.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

import msgspec
import trio

from protocol import ids
from protocol.errors import ErrorCode
from protocol.messages.host import (
    PluginTool,
    ToolsAbortParams,
    ToolsAbortResult,
    ToolsExecuteParams,
    ToolsOutputParams,
    ToolsStartedParams,
)
from protocol.sandbox import SandboxPolicy
from protocol.toolclass import TOOL_CLASSES, ToolClass
from protocol.tools import TOOL_ARGS, ToolResult, aborted_result, error_result
from protocol.toolspecs import TOOL_SPECS, bash_description
from runtime.agent.hostcall import (
    Execution,
    HostCall,
    HostCallEvent,
    HostCallState,
    InFlightCall,
)
from runtime.agent.hostport import HOST_RESTARTED, HOST_UNAVAILABLE, HostPort
from runtime.agent.registry import (
    AbortSignal,
    JsonObjectArgs,
    ToolDefinition,
    ToolExecution,
    UserCause,
    cancel_on_abort,
    define_tool,
)
from runtime.supervision.failures import (
    HostAnswerMalformed,
    HostError,
    HostLost,
    HostNotReached,
    HostRefused,
    HostRequestTooLarge,
)

log = logging.getLogger(__name__)

DEFAULT_PROCESS_GRACE = 10.0
# How long an abandoned read-only call's request may still finish, to log its late result.
LATE_RESULT_WAIT = 30.0
BEFORE_BODY_STATES = frozenset({"tombstoned", "admission", "permission-pending"})


ProgressSink = Callable[[str, str, str], None]  # (call id, stream, text)
StartedSink = Callable[[str], None]  # (call id): the host started the call's body
AbortSink = Callable[[str, str, ToolsAbortResult], None]  # (call id, tool, host answer)




class HostTools:
    """The host tools of one session's turn, and the routing of their progress."""

    def __init__(self, host: HostPort, session_id: str, turn_id: str, *,
                 on_progress: ProgressSink, on_abort: AbortSink,
                 process_grace: float = DEFAULT_PROCESS_GRACE,
                 plugin_tools: tuple[PluginTool, ...] = (),
                 on_started: StartedSink | None = None,
                 asked: Callable[[str], bool] | None = None,
                 sandbox: SandboxPolicy | None = None,
                 on_calls: Callable[[], None] | None = None) -> None:
        self._host = host
        self._sandbox = sandbox  # the session's, stated in Bash's description
        # Told when a call is made, moves in its state table or ends (stop/waiting).
        self._on_calls = on_calls
        self._asked = asked  # whether a hook asked for a call's prompt (by call id)
        self._on_started = on_started
        self._session_id = session_id
        self._turn_id = turn_id
        self._on_progress = on_progress
        self._on_abort = on_abort
        self._grace = process_grace
        self._calls: dict[str, HostCall] = {}  # by host call id
        self._plugin_tools = plugin_tools

    def definitions(self) -> list[ToolDefinition[Any]]:
        builtin: list[ToolDefinition[Any]] = [
            define_tool(name, args=args_type, tool_class=TOOL_CLASSES[name], body=self._body,
                        stop=self._stop_handler,
                        description=(bash_description(self._sandbox) if name == "Bash"
                                     else TOOL_SPECS[name].description),
                        input_schema=TOOL_SPECS[name].input_schema())
            for name, args_type in TOOL_ARGS.items()
        ]
        plugins: list[ToolDefinition[Any]] = [
            define_tool(tool.name, args=JsonObjectArgs, tool_class=ToolClass.PLUGIN,
                        body=self._body, stop=self._stop_handler,
                        description=tool.description, input_schema=tool.input_schema)
            for tool in self._plugin_tools
        ]
        return builtin + plugins

    def in_flight(self) -> list[InFlightCall]:
        """Every call waiting on the host (running, aborting or draining)."""
        now = time.monotonic()
        return [call.view(now) for call in self._calls.values() if not call.abandoned]

    def find(self, call_id: str) -> InFlightCall | None:
        """The call of this model call id waiting on the host, if any."""
        call = self._calls.get(self.host_call_id(call_id))
        return None if call is None or call.abandoned else call.view(time.monotonic())

    def host_call_id(self, call_id: str) -> str:
        # Unique per turn, so a late abort or tombstone can never meet a later turn's call.
        return ids.host_call_id(self._turn_id, call_id)

    def on_output(self, params: ToolsOutputParams | ToolsStartedParams) -> bool:
        """Route a ``tools.output`` or ``tools.started`` notification; False if the call is
        not (or no longer) ours."""
        call = self._calls.get(params.call_id)
        if call is None or call.abandoned:
            return False
        if isinstance(params, ToolsStartedParams):
            if self._on_started is not None:
                self._on_started(call.call_id)
            return True
        call.progress.append(params.text)
        self._on_progress(call.call_id, params.stream, params.text)
        return True

    async def _stop_handler(self, execution: ToolExecution) -> None:
        """Deliver the stop to the host; waiting for what it did is the body's business."""
        call = self._calls.get(self.host_call_id(execution.call_id))
        if call is not None:
            self._stop(call, execution.signal)

    def _stop(self, call: HostCall, signal: AbortSignal) -> None:
        """A stop reached the call: the first one (only a running call takes ``ABORT``)
        starts its one ``tools.abort`` sender in the lease's nursery; later ones only wait
        for ``call.abort_done``."""
        if call.state is HostCallState.RUNNING:
            self._fire(call, HostCallEvent.ABORT)
            self._host.start_soon(lambda: self._send_abort(call, signal))

    async def _send_abort(self, call: HostCall, signal: AbortSignal) -> None:
        """The call's one ``tools.abort``: its answer is kept and announced."""
        cause = signal.cause or UserCause()  # the one cause type: nothing to convert
        try:
            answer: ToolsAbortResult = await self._host.request_if_alive(
                "tools.abort", ToolsAbortParams(
                    self._session_id, call.host_call_id, call.tool, cause))
            call.abort_answer = answer
            self._on_abort(call.call_id, call.tool, answer)
        except HostNotReached as exc:  # no host to stop it on: nothing of it runs there
            log.info("tools.abort %s not sent: %s", call.host_call_id, exc)
        except HostError as exc:
            log.warning("tools.abort %s failed: %s", call.host_call_id, exc)
        finally:
            self._fire(call, HostCallEvent.ABORT_DONE)
            call.abort_done.set()

    async def _abort(self, call: HostCall, signal: AbortSignal) -> ToolsAbortResult | None:
        """Stop the call (if no stop has yet) and wait for its abort's answer."""
        self._stop(call, signal)
        await call.abort_done.wait()
        return call.abort_answer

    async def _body(self, args: msgspec.Struct, execution: ToolExecution) -> ToolResult:
        call = HostCall(execution.call_id, self.host_call_id(execution.call_id), execution.tool,
                         execution.tool_class)
        self._calls[call.host_call_id] = call
        self._calls_changed()
        try:
            return await self._run(call, args, execution.signal)
        finally:
            del self._calls[call.host_call_id]
            self._calls_changed()

    def _fire(self, call: HostCall, event: HostCallEvent) -> bool:
        moved = call.fire(event)
        if moved:
            self._calls_changed()
        return moved

    def _calls_changed(self) -> None:
        if self._on_calls is not None:
            self._on_calls()

    async def _run(self, call: HostCall, args: msgspec.Struct,
                   signal: AbortSignal) -> ToolResult:
        execution = Execution()
        # A read-only call is abandoned at once on a stop; its request finishes (or not)
        # in the lease's nursery, where a late result is still seen, and logged.
        read_only = call.tool_class is ToolClass.READ_ONLY
        async with trio.open_nursery() as nursery:
            if read_only:
                self._host.start_soon(lambda: self._execute(call, args, execution))
            else:
                nursery.start_soon(self._execute, call, args, execution)
            try:
                with cancel_on_abort(signal):
                    await execution.done.wait()
                if execution.done.is_set():
                    return execution.get()
                return await self._stopped(call, execution, signal)
            finally:
                if not (call.abandoned and read_only):
                    execution.scope.cancel()  # nothing waits for this request any more

    async def _stopped(self, call: HostCall, execution: Execution,
                       signal: AbortSignal) -> ToolResult:
        """The per-class stop policy, once the call's signal aborted."""
        stopped_at = trio.current_time()
        if call.tool_class is ToolClass.READ_ONLY:
            # Nothing to wait for: the abort goes out now, its answer is only logged.
            # Without the host's word the body may have started: ABORTED, honestly.
            self._stop(call, signal)
            execution.scope.deadline = trio.current_time() + LATE_RESULT_WAIT
            return self._abandon(call, None, "read-only: stopped waiting at once")
        if call.tool_class is ToolClass.PROCESS:
            # The whole window, the abort's answer included: a frozen host holds neither.
            with trio.move_on_at(stopped_at + self._grace):
                await self._abort(call, signal)
                await execution.done.wait()
            if execution.done.is_set():
                return execution.get()
            # An aborted answer means the call's processes are gone: end them ourselves.
            with trio.CancelScope(shield=True):
                ended = await self._host.end_call_processes(self._session_id,
                                                            call.host_call_id)
            if ended is not None:
                log.warning("call %s (%s): no host result within the grace; its processes "
                            "were ended by the runtime (%s)", call.host_call_id, call.tool,
                            ended)
            return self._abandon(call, call.abort_answer, f"no host result within the "
                                 f"{self._grace:g} s grace window", unconfirmed=True,
                                 ended=ended)
        await self._abort(call, signal)
        await execution.done.wait()  # mutating and plugin calls are never abandoned
        return execution.get()

    async def _execute(self, call: HostCall, args: msgspec.Struct,
                       execution: Execution) -> None:
        with execution.scope:
            try:
                execution.result = await self._send_execute(call, args)
            # Handed to the call (get()): this task may run in the lease's nursery, which
            # must not fail with it.
            except Exception as exc:  # noqa: BLE001 -- transported, not swallowed
                execution.failure = exc
            execution.done.set()
        if not call.abandoned:
            return
        if execution.result is not None:
            log.info("late result of abandoned call %s (%s) discarded: code %s",
                     call.host_call_id, call.tool, execution.result.code or "none (ok)")
        elif execution.scope.cancelled_caught:
            log.info("abandoned call %s (%s): no late result within %g s", call.host_call_id,
                     call.tool, LATE_RESULT_WAIT)

    async def _send_execute(self, call: HostCall, args: msgspec.Struct) -> ToolResult:
        raw = args.value() if isinstance(args, JsonObjectArgs) else msgspec.to_builtins(args)
        ask = self._asked is not None and self._asked(call.call_id)
        params = ToolsExecuteParams(self._session_id, call.host_call_id, call.tool, raw, ask)
        try:
            await self._host.ready()
            if call.stopped:
                # Stopped while a host was starting: its abort had no host to go to, so
                # the execute is not sent either (no checkpoint from here to the send).
                return aborted_result(before_dispatch=True, details={
                    "notSent": "stopped while the host was starting"})
            result: ToolResult = await self._host.request("tools.execute", params)
        except HostRequestTooLarge as exc:
            return error_result(ErrorCode.INVALID_PARAMS, f"arguments too large: {exc}",
                                body_invoked=False)
        except HostNotReached as exc:
            return aborted_result(before_dispatch=True, details={
                HOST_UNAVAILABLE: f"the request was never sent: {exc}"})
        except HostLost:
            # Not before the dead host's processes are gone: a settled call has none left.
            await self._host.wait_host_gone()
            if self._host.restarted:  # the same code: the body may have run, the host is gone
                return error_result(ErrorCode.HOST_CRASHED,
                                    "an operator restarted the host during the call",
                                    body_invoked=True, details={HOST_RESTARTED: "operator"})
            return error_result(ErrorCode.HOST_CRASHED, "the host exited during the call",
                                body_invoked=True)
        except HostAnswerMalformed as exc:  # before HostRefused: it is one
            return error_result(ErrorCode.TOOL_FAILED,
                                f"the host's result is malformed: {exc.reason}",
                                body_invoked=True)
        except HostRefused as exc:
            return error_result(ErrorCode.TOOL_FAILED, f"host refused the call: {exc}",
                                body_invoked=True)
        return result

    def _abandon(self, call: HostCall, answer: ToolsAbortResult | None, why: str, *,
                 unconfirmed: bool = False, ended: str | None = None) -> ToolResult:
        self._fire(call, HostCallEvent.ABANDON)  # progress stops here
        log.info("call %s (%s) abandoned: %s; a late host result is dropped", call.host_call_id,
                 call.tool, why)
        details: dict[str, Any] = {"abandoned": why}
        if answer is not None:
            details["hostState"] = answer.state
            if answer.state in BEFORE_BODY_STATES and not answer.body_invoked:
                return aborted_result(before_dispatch=True, details=details)
        if unconfirmed:
            details["unconfirmed"] = True
        if ended is not None:
            details["processesEnded"] = ended
        output = "".join(call.progress)
        if output:
            details["output"] = output[-8192:]
        return aborted_result(before_dispatch=False, details=details,
                              extra_text=f"Output before the stop:\n{output[-8192:]}"
                              if output else "")

