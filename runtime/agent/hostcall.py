"""One host call: a tool call of a turn sent to the host as ``tools.execute``, from its
execute to its one result, with its stop and its tool class's stop policy.

Its states (``TABLE``; any other move is ``InvalidTransition``):

- ``running``: the execute is (about to be) sent, no stop has reached it;
- ``aborting``: a stop reached it and its one ``tools.abort`` was started;
- ``draining``: the host answered the abort (or it could not be delivered); the call
  still waits for the execute's result, as its class says;
- ``abandoned``: the call stopped waiting (read-only at once, process past its grace);
  a late result or progress is dropped.

The stop reaches the host by one route: the call listens to its signal (``on_abort``), and
the stop, in the task that aborts the signal, moves a running call to ``aborting`` (only a
running call takes ``ABORT``, so a call has one sender) and starts its one ``tools.abort``
in the nursery of the turn's host lease (``HostPort.start_soon``): the request may outlive
the call, never the lease's owner. Then, by the tool's class:

- read-only: stops waiting at once, without waiting for the host's answer to the
  abort (``ABORTED``: the body may have started); the request may still finish in
  the lease's nursery for ``LATE_RESULT_WAIT``, but no longer than the lease's
  ``END_WAIT`` after its turn ends, and a late host result is logged (INFO: call, tool,
  code) and discarded.
- process: waits up to the process grace for the host's result (the output the
  host collected before it killed the tree); past it, the runtime ends the call's
  processes itself (``HostPort.end_call_processes``: its cgroup killed, or the host
  ended and its trees swept), then ``ABORTED`` with the progress output already
  received, marked ``unconfirmed`` (the host never said what it did) and
  ``processesEnded``: an aborted answer always means the processes are gone.
- mutating and plugin: awaits the host's result, with no deadline.

Whether the body ran is the host's word, never guessed: ``ABORTED_BEFORE_DISPATCH`` is
reported only when the host says the body never started (its own result says so, or its
answer to ``tools.abort`` found the call before its body, or not at all, so the tombstone
will stop it: ``_abandon``), or the request was never sent (``details.hostUnavailable``:
the turn's host is gone; the failure's kind says so: ``_result_of_failure``).
A link that dies under a call gives ``HOST_CRASHED`` (the body may have run), once the dead
host's leftover tool processes are killed (``HostPort.wait_host_gone``, bounded): a crashed
call never settles while a process it started lives. Either way the turn has lost its host
(``lost_host``) and ends.
"""

from __future__ import annotations

import enum
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import msgspec
import trio

from protocol.errors import ErrorCode
from protocol.messages.host import ToolsAbortParams, ToolsAbortResult, ToolsExecuteParams
from protocol.statetable import StateTable
from protocol.toolclass import ToolClass
from protocol.tools import ToolResult, aborted_result, error_result
from runtime.agent.hostport import HOST_RESTARTED, HOST_UNAVAILABLE, HostPort
from runtime.agent.registry import (
    AbortSignal,
    Cause,
    JsonObjectArgs,
    cancel_on_abort,
    on_abort,
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

AbortSink = Callable[[str, str, ToolsAbortResult], None]  # (call id, tool, host answer)


class HostCallState(enum.Enum):
    RUNNING = "running"
    ABORTING = "aborting"
    DRAINING = "draining"
    ABANDONED = "abandoned"


class HostCallEvent(enum.Enum):
    ABORT = "abort"  # a stop reached the call: its tools.abort goes out (once)
    ABORT_DONE = "abort-done"  # the abort was answered, or could not be delivered
    ABANDON = "abandon"  # the call stopped waiting for the host's result


S, E = HostCallState, HostCallEvent
TABLE: StateTable[HostCallState, HostCallEvent] = StateTable(
    "a host call in the runtime", S.RUNNING, {
        (S.RUNNING, E.ABORT): S.ABORTING,
        (S.ABORTING, E.ABORT_DONE): S.DRAINING,
        (S.RUNNING, E.ABANDON): S.ABANDONED,
        (S.ABORTING, E.ABANDON): S.ABANDONED,
        (S.DRAINING, E.ABANDON): S.ABANDONED,
        (S.ABANDONED, E.ABORT_DONE): S.ABANDONED,
    }, doc="one tool call of a turn sent to the host, from its execute to its result",
    notes={(S.ABANDONED, E.ABORT_DONE): "an abandoned read-only call's abort is still "
                                        "delivered; its answer is only logged"})
del S, E


@dataclass(frozen=True)
class InFlightCall:
    """What operators see of a call waiting on the host (``HostTools.in_flight``)."""

    call_id: str
    host_call_id: str
    tool: str
    tool_class: ToolClass
    state: HostCallState
    age: float
    """Seconds since the call was made."""


@dataclass(frozen=True)
class CallContext:
    """What the host calls of one turn share (made by ``HostTools``)."""

    host: HostPort
    session_id: str
    process_grace: float = DEFAULT_PROCESS_GRACE
    on_abort: AbortSink = lambda *_: None
    """Told the host's answer to a call's ``tools.abort``."""
    on_changed: Callable[[], None] = lambda: None
    """Told when a call moves in its state table."""
    asked: Callable[[str], bool] | None = None
    """Whether a hook asked for a call's prompt (by call id)."""


@dataclass
class Execution:
    """A ``tools.execute`` request in flight: it may outlive the call that sent it."""

    scope: trio.CancelScope = field(default_factory=trio.CancelScope)
    done: trio.Event = field(default_factory=trio.Event)
    result: ToolResult | None = None
    failure: Exception | None = None

    def get(self) -> ToolResult:
        """The host's result; a failure of the request is raised here, in the call's task
        (the registry maps it), never in the nursery that ran the request."""
        if self.failure is not None:
            raise self.failure
        assert self.result is not None
        return self.result


class HostCall:
    """One host call's life (see the module's text): made by ``HostTools`` for a call of
    a host tool, ``execute()`` once."""

    def __init__(self, context: CallContext, call_id: str, host_call_id: str, tool: str,
                 tool_class: ToolClass) -> None:
        self.call_id = call_id
        self.host_call_id = host_call_id
        self.tool = tool
        self.tool_class = tool_class
        self.state = TABLE.initial
        self.progress: list[str] = []
        self.abort_answer: ToolsAbortResult | None = None
        self.abort_done = trio.Event()
        """Set once the call's one ``tools.abort`` was answered or failed to be delivered."""
        self.started_at = time.monotonic()
        self._context = context
        self._host = context.host

    # -- state ------------------------------------------------------------------------

    def fire(self, event: HostCallEvent) -> bool:
        """Apply ``event`` (``InvalidTransition`` if the table has no such move here);
        whether the call's state changed (then ``on_changed`` is told)."""
        target = TABLE.next(self.state, event)
        moved = target is not self.state
        self.state = target
        if moved:
            self._context.on_changed()
        return moved

    @property
    def stopped(self) -> bool:
        """A stop reached the call (its abort started), or it was abandoned."""
        return self.state is not HostCallState.RUNNING

    @property
    def abandoned(self) -> bool:
        return self.state is HostCallState.ABANDONED

    def view(self, now: float) -> InFlightCall:
        return InFlightCall(self.call_id, self.host_call_id, self.tool, self.tool_class,
                            self.state, now - self.started_at)

    # -- the stop -----------------------------------------------------------------------

    def stop(self, cause: Cause) -> None:
        """A stop reached the call (its signal's listener, in the aborting task): a running
        call starts its one ``tools.abort`` in the lease's nursery; any later stop finds it
        no longer running."""
        if TABLE.allows(self.state, HostCallEvent.ABORT):
            self.fire(HostCallEvent.ABORT)
            self._host.start_soon(lambda: self._send_abort(cause))

    async def _send_abort(self, cause: Cause) -> None:
        """The call's one ``tools.abort``: its answer is kept and announced."""
        try:
            answer: ToolsAbortResult = await self._host.request_if_alive(
                "tools.abort", ToolsAbortParams(
                    self._context.session_id, self.host_call_id, self.tool, cause))
            self.abort_answer = answer
            self._context.on_abort(self.call_id, self.tool, answer)
        except HostNotReached as exc:  # no host to stop it on: nothing of it runs there
            log.info("tools.abort %s not sent: %s", self.host_call_id, exc)
        except HostError as exc:
            log.warning("tools.abort %s failed: %s", self.host_call_id, exc)
        finally:
            self.fire(HostCallEvent.ABORT_DONE)
            self.abort_done.set()

    # -- the execute --------------------------------------------------------------------

    async def execute(self, args: msgspec.Struct, signal: AbortSignal) -> ToolResult:
        """Send the execute and wait for its result or, on a stop, as the class says."""
        execution = Execution()
        # A read-only call is abandoned at once on a stop; its request finishes (or not)
        # in the lease's nursery, where a late result is still seen, and logged.
        read_only = self.tool_class is ToolClass.READ_ONLY
        with on_abort(signal, self.stop):
            async with trio.open_nursery() as nursery:
                if read_only:
                    self._host.start_soon(lambda: self._run_execute(args, execution))
                else:
                    nursery.start_soon(self._run_execute, args, execution)
                try:
                    with cancel_on_abort(signal):
                        await execution.done.wait()
                    if execution.done.is_set():
                        return execution.get()
                    return await self._stopped(execution)
                finally:
                    if not (self.abandoned and read_only):
                        execution.scope.cancel()  # nothing waits for this request any more

    async def _stopped(self, execution: Execution) -> ToolResult:
        """The class's stop policy, once the call's signal aborted (its abort started)."""
        if self.tool_class is ToolClass.READ_ONLY:
            # Nothing to wait for: the abort went out, its answer is only logged. Without
            # the host's word the body may have started: ABORTED, honestly.
            execution.scope.deadline = trio.current_time() + LATE_RESULT_WAIT
            return self._abandon(None, "read-only: stopped waiting at once")
        if self.tool_class is ToolClass.PROCESS:
            return await self._stopped_process(execution)
        await self.abort_done.wait()
        await execution.done.wait()  # mutating and plugin calls are never abandoned
        return execution.get()

    async def _stopped_process(self, execution: Execution) -> ToolResult:
        """Bounded by the grace: the host's result, or the call's processes ended here."""
        grace = self._context.process_grace
        # The whole window, the abort's answer included: a frozen host holds neither.
        with trio.move_on_after(grace):
            await self.abort_done.wait()
            await execution.done.wait()
        if execution.done.is_set():
            return execution.get()
        # An aborted answer means the call's processes are gone: end them ourselves.
        with trio.CancelScope(shield=True):
            ended = await self._host.end_call_processes(self._context.session_id,
                                                        self.host_call_id)
        if ended is not None:
            log.warning("call %s (%s): no host result within the grace; its processes "
                        "were ended by the runtime (%s)", self.host_call_id, self.tool, ended)
        return self._abandon(self.abort_answer, f"no host result within the {grace:g} s "
                             f"grace window", unconfirmed=True, ended=ended)

    async def _run_execute(self, args: msgspec.Struct, execution: Execution) -> None:
        with execution.scope:
            try:
                execution.result = await self._send_execute(args)
            # Handed to the call (get()): this task may run in the lease's nursery, which
            # must not fail with it.
            except Exception as exc:  # noqa: BLE001 -- transported, not swallowed
                execution.failure = exc
            execution.done.set()
        if not self.abandoned:
            return
        if execution.result is not None:
            log.info("late result of abandoned call %s (%s) discarded: code %s",
                     self.host_call_id, self.tool, execution.result.code or "none (ok)")
        elif execution.scope.cancelled_caught:
            log.info("abandoned call %s (%s): no late result within %g s", self.host_call_id,
                     self.tool, LATE_RESULT_WAIT)

    async def _send_execute(self, args: msgspec.Struct) -> ToolResult:
        raw = args.value() if isinstance(args, JsonObjectArgs) else msgspec.to_builtins(args)
        asked = self._context.asked
        ask = asked is not None and asked(self.call_id)
        params = ToolsExecuteParams(self._context.session_id, self.host_call_id, self.tool,
                                    raw, ask)
        try:
            await self._host.ready()
            if self.stopped:
                # Stopped while a host was starting: its abort had no host to go to, so
                # the execute is not sent either (no checkpoint from here to the send).
                return aborted_result(before_dispatch=True, details={
                    "notSent": "stopped while the host was starting"})
            result: ToolResult = await self._host.request("tools.execute", params)
        except HostError as exc:  # mapped here: this task may outlive the call
            return await self._result_of_failure(exc)
        return result

    async def _result_of_failure(self, failure: HostError) -> ToolResult:
        """The call's result when its execute gave none: whether the body may have run is
        what the failure's kind says."""
        if isinstance(failure, HostRequestTooLarge):
            return error_result(ErrorCode.INVALID_PARAMS, f"arguments too large: {failure}",
                                body_invoked=False)
        if isinstance(failure, HostNotReached):
            return aborted_result(before_dispatch=True, details={
                HOST_UNAVAILABLE: f"the request was never sent: {failure}"})
        if isinstance(failure, HostLost):
            # Not before the dead host's processes are gone: a settled call has none left.
            await self._host.wait_host_gone()
            if self._host.restarted:  # the same code: the body may have run, the host is gone
                return error_result(ErrorCode.HOST_CRASHED,
                                    "an operator restarted the host during the call",
                                    body_invoked=True, details={HOST_RESTARTED: "operator"})
            return error_result(ErrorCode.HOST_CRASHED, "the host exited during the call",
                                body_invoked=True)
        if isinstance(failure, HostAnswerMalformed):
            return error_result(ErrorCode.TOOL_FAILED,
                                f"the host's result is malformed: {failure.reason}",
                                body_invoked=True)
        assert isinstance(failure, HostRefused)
        return error_result(ErrorCode.TOOL_FAILED, f"host refused the call: {failure}",
                            body_invoked=True)

    def _abandon(self, answer: ToolsAbortResult | None, why: str, *,
                 unconfirmed: bool = False, ended: str | None = None) -> ToolResult:
        self.fire(HostCallEvent.ABANDON)  # progress stops here
        log.info("call %s (%s) abandoned: %s; a late host result is dropped",
                 self.host_call_id, self.tool, why)
        details: dict[str, Any] = {"abandoned": why}
        if answer is not None:
            details["hostState"] = answer.state
            if answer.state in BEFORE_BODY_STATES and not answer.body_invoked:
                return aborted_result(before_dispatch=True, details=details)
        if unconfirmed:
            details["unconfirmed"] = True
        if ended is not None:
            details["processesEnded"] = ended
        output = "".join(self.progress)
        if output:
            details["output"] = output[-8192:]
        return aborted_result(before_dispatch=False, details=details,
                              extra_text=f"Output before the stop:\n{output[-8192:]}"
                              if output else "")
