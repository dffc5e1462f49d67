"""Host tools' per-class stop policy, against an in-process fake host (virtual time).

The fake host answers ``tools.execute`` and ``tools.abort`` only when a test says so
(or never), so each rule is checked where it matters: when the host is silent.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any

import msgspec
import pytest
import trio
import trio.testing

from protocol.errors import ErrorCode
from protocol.messages.host import (
    ToolsAbortParams,
    ToolsAbortResult,
    ToolsExecuteParams,
    ToolsOutputParams,
)
from protocol.tools import ToolResult, aborted_result, ok_result
from runtime.agent.hostport import lost_host
from runtime.agent.hosttools import HostTools
from runtime.agent.registry import (
    AbortController,
    ToolCallRequest,
    ToolRegistry,
    UserCause,
    run_tool_calls,
)
from runtime.link import NotSent
from runtime.supervision.failures import HostLost, HostNotReached
from runtime.supervision.generation import HostGeneration
from runtime.supervision.lease import END_WAIT, HostLease

NEVER = trio.Event()  # never set: a host that never answers


class FakeHost:
    """A host whose answers the test releases (or never does)."""

    def __init__(self) -> None:
        self.executes: list[ToolsExecuteParams] = []
        self.aborts: list[ToolsAbortParams] = []
        self.sent = trio.Event()
        self.execute_released = NEVER
        self.execute_answer: ToolResult | Exception | None = None
        self.abort_released = NEVER
        self.abort_answer: ToolsAbortResult | None = None
        self.gone = trio.Event()
        self.gone_waited = False
        self.ended: list[str] = []
        self.ends_by: str | None = None  # how end_call_processes says it ended them
        self.started = trio.Event()
        self.started.set()
        self.starting = trio.Event()
        self.nursery: trio.Nursery | None = None  # the lease's: see Run.call
        self.abort_senders = 0

    def start_soon(self, fn: Callable[[], Awaitable[None]]) -> None:
        assert self.nursery is not None
        self.nursery.start_soon(fn)

    def answer_aborts(self, answer: ToolsAbortResult) -> None:
        """Answer every ``tools.abort`` at once with ``answer``."""
        self.abort_released = trio.Event()
        self.abort_released.set()
        self.abort_answer = answer

    async def ready(self) -> None:
        self.starting.set()
        await self.started.wait()

    async def request(self, method: str, params: msgspec.Struct) -> Any:
        if method == "tools.execute":
            assert isinstance(params, ToolsExecuteParams)
            if isinstance(self.execute_answer, NotSent):
                raise self.execute_answer
            self.executes.append(params)
            self.sent.set()
            await self.execute_released.wait()
            if isinstance(self.execute_answer, Exception):
                raise self.execute_answer
            return self.execute_answer
        assert method == "tools.abort" and isinstance(params, ToolsAbortParams)
        self.aborts.append(params)
        # Sent from a task of the lease's nursery, never from the call's own task.
        assert trio.lowlevel.current_task().parent_nursery is self.nursery
        await self.abort_released.wait()
        return self.abort_answer

    async def request_if_alive(self, method: str, params: msgspec.Struct) -> Any:
        if not self.started.is_set():
            raise HostNotReached("no host yet")  # a stop never starts a host
        return await self.request(method, params)

    restarted = False

    async def wait_host_gone(self) -> bool:
        self.gone_waited = True
        await self.gone.wait()
        return True

    async def end_call_processes(self, session_id: str, host_call_id: str) -> str | None:
        self.ended.append(host_call_id)
        return self.ends_by


class Recorder:
    async def record_call(self, call: ToolCallRequest) -> None:
        pass

    async def record_result(self, call: ToolCallRequest, result: ToolResult) -> None:
        pass


class Run:
    def __init__(self, host: FakeHost, *, grace: float = 10.0,
                 background: trio.Nursery | None = None) -> None:
        """``background``: the lease's nursery, if the test holds it past the call (else
        ``call`` makes one that ends with the call)."""
        self.progress: list[str] = []
        self.host = host
        host.nursery = background
        self.tools = HostTools(host, "s-1", "t1", on_progress=self.on_progress,
                               on_abort=lambda *a: None, process_grace=grace)
        self.controller = AbortController()

    def on_progress(self, call_id: str, stream: str, text: str) -> None:
        self.progress.append(text)

    def output(self, text: str) -> bool:
        return self.tools.on_output(ToolsOutputParams("s-1", "t1.c1", 0, "stdout", text))

    async def call(self, tool: str, args: dict[str, Any]) -> tuple[ToolResult, float]:
        """Run one call; return its result and the (virtual) time the stop took to settle."""
        registry = ToolRegistry(self.tools.definitions())
        started = trio.current_time()
        async with trio.open_nursery() as lease:
            if self.host.nursery is None:
                self.host.nursery = lease
            with trio.fail_after(600):  # virtual seconds under the autojump clock
                (result,) = await run_tool_calls([ToolCallRequest("c1", tool, args)],
                                                 registry=registry, recorder=Recorder(),
                                                 signal=self.controller.signal)
            took = trio.current_time() - started
            lease.cancel_scope.cancel()  # what the lease still awaits ends with the test
        return result, took


async def stop_once_sent(host: FakeHost, run: Run, *, after: float = 1.0) -> None:
    await host.sent.wait()
    await trio.sleep(after)
    run.controller.abort(UserCause())


GREP = ("Grep", {"pattern": "x"})
BASH = ("Bash", {"command": "sleep 60"})
WRITE = ("Write", {"path": "w.txt", "content": "x"})


async def test_read_only_stops_waiting_at_once_though_the_host_never_answers(
        autojump_clock: trio.testing.MockClock) -> None:
    host = FakeHost()  # answers neither the execute nor the abort
    async with trio.open_nursery() as background:
        run = Run(host, background=background)
        background.start_soon(stop_once_sent, host, run)
        result, took = await run.call(*GREP)
        stopped_at = 1.0
        assert result.code == "ABORTED" and "abandoned" in result.details
        assert took == pytest.approx(stopped_at)  # not a moment waited for the host
        await trio.sleep(0.1)
        assert [a.call_id for a in host.aborts] == ["t1.c1"]  # the abort still went out
        background.cancel_scope.cancel()


async def test_a_late_read_only_result_is_logged_with_its_call_tool_and_code(
        autojump_clock: trio.testing.MockClock, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="runtime.agent.hostcall")
    host = FakeHost()
    host.execute_released = trio.Event()
    host.execute_answer = aborted_result(before_dispatch=False, details={"host": "late"})
    async with trio.open_nursery() as background:
        run = Run(host, background=background)
        background.start_soon(stop_once_sent, host, run)
        result, _ = await run.call(*GREP)
        assert result.details.get("host") is None  # the body answered without the host
        await trio.sleep(5)
        host.execute_released.set()  # the host's answer arrives after the call settled
        await trio.sleep(1)
        background.cancel_scope.cancel()
    late = [r for r in caplog.records if r.levelno == logging.INFO
            and r.getMessage().startswith("late result") and "t1.c1" in r.getMessage()]
    assert len(late) == 1, [r.getMessage() for r in caplog.records]
    assert "Grep" in late[0].getMessage() and "ABORTED" in late[0].getMessage()


async def test_progress_flows_through_the_grace_and_stops_once_abandoned(
        autojump_clock: trio.testing.MockClock) -> None:
    host = FakeHost()
    host.answer_aborts(ToolsAbortResult(True, "running", True))
    run = Run(host, grace=5.0)
    routed: list[bool] = []
    settled = trio.Event()

    async def talk() -> None:
        await host.sent.wait()
        routed.append(run.output("before the stop\n"))
        await trio.sleep(1)
        run.controller.abort(UserCause())
        await trio.sleep(2)
        routed.append(run.output("within the grace\n"))
        await settled.wait()
        routed.append(run.output("after it was abandoned\n"))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(talk)
        result, took = await run.call(*BASH)
        settled.set()
    assert took == pytest.approx(1.0 + 5.0)  # the grace window, measured from the stop
    assert routed == [True, True, False]
    assert run.progress == ["before the stop\n", "within the grace\n"]
    assert result.code == "ABORTED"
    assert result.details["unconfirmed"] is True and result.details["hostState"] == "running"
    assert result.details["output"] == "before the stop\nwithin the grace\n"


async def test_a_process_stop_is_bounded_by_the_grace_even_if_the_abort_is_unanswered(
        autojump_clock: trio.testing.MockClock) -> None:
    host = FakeHost()  # a frozen host: it answers neither the execute nor the abort
    host.ends_by = "cgroup-killed"
    run = Run(host, grace=5.0)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(stop_once_sent, host, run)
        result, took = await run.call(*BASH)
    assert len(host.aborts) == 1
    assert took == pytest.approx(1.0 + 5.0)  # the grace window, from the stop
    assert result.code == "ABORTED" and result.details["unconfirmed"] is True
    assert "hostState" not in result.details  # the host never said
    # Before answering, the runtime ended the call's processes itself.
    assert len(host.ended) == 1 and result.details["processesEnded"] == "cgroup-killed"


async def test_mutating_waits_past_the_grace_for_the_host_result(
        autojump_clock: trio.testing.MockClock) -> None:
    host = FakeHost()
    host.answer_aborts(ToolsAbortResult(True, "running", True))
    host.execute_released = trio.Event()
    host.execute_answer = ok_result("Wrote w.txt", details={"bytesWritten": 1})
    run = Run(host, grace=1.0)

    async def host_finishes_late() -> None:
        await stop_once_sent(host, run)
        await trio.sleep(30)
        host.execute_released.set()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(host_finishes_late)
        result, took = await run.call(*WRITE)
    assert took == pytest.approx(31.0)
    assert result.code == "ABORTED" and result.details["bytesWritten"] == 1
    assert "unconfirmed" not in result.details and "abandoned" not in result.details


@pytest.mark.parametrize("answer", [
    ToolsAbortResult(False, "tombstoned"),
    ToolsAbortResult(True, "admission"),
    ToolsAbortResult(True, "permission-pending"),
])
async def test_a_host_that_says_the_body_never_started_gives_aborted_before_dispatch(
        autojump_clock: trio.testing.MockClock, answer: ToolsAbortResult) -> None:
    host = FakeHost()
    host.answer_aborts(answer)
    run = Run(host, grace=2.0)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(stop_once_sent, host, run)
        result, _ = await run.call(*BASH)
    assert result.code == "ABORTED_BEFORE_DISPATCH"
    assert result.details["hostState"] == answer.state


async def test_a_body_that_started_is_never_reported_before_dispatch(
        autojump_clock: trio.testing.MockClock) -> None:
    host = FakeHost()
    host.answer_aborts(ToolsAbortResult(True, "running", True))
    run = Run(host, grace=2.0)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(stop_once_sent, host, run)
        result, _ = await run.call(*BASH)
    assert result.code == "ABORTED"


async def test_a_request_never_sent_is_aborted_before_dispatch_and_loses_the_host() -> None:
    host = FakeHost()
    host.execute_answer = HostNotReached("the turn's host is gone")
    run = Run(host)
    with trio.fail_after(5):
        result, _ = await run.call(*WRITE)
    assert result.code == "ABORTED_BEFORE_DISPATCH"
    assert "hostUnavailable" in result.details and lost_host(result)
    assert not host.executes


async def test_a_crashed_call_settles_only_once_the_dead_hosts_processes_are_gone(
        autojump_clock: trio.testing.MockClock) -> None:
    host = FakeHost()
    host.execute_released = trio.Event()
    host.execute_answer = HostLost("host[1]: link closed")
    run = Run(host)

    async def crash_then_sweep() -> None:
        await host.sent.wait()
        host.execute_released.set()  # the link dies under the call
        await trio.sleep(3)
        host.gone.set()  # the supervisor killed what the host left

    async with trio.open_nursery() as nursery:
        nursery.start_soon(crash_then_sweep)
        result, took = await run.call(*BASH)
    assert host.gone_waited and took == pytest.approx(3.0)
    assert result.code == ErrorCode.HOST_CRASHED.name and lost_host(result)


class FakeLink:
    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.down = trio.Event()
        self.sent: list[str] = []

    @property
    def closed(self) -> bool:
        return self.down.is_set()

    async def request(self, method: str, params: msgspec.Struct) -> Any:
        self.sent.append(method)
        return ToolsAbortResult(True, "running", True)


class FakeSupervisor:
    def __init__(self, current: HostGeneration | None) -> None:
        self.current = current

    async def ensure_host(self) -> HostGeneration:
        assert self.current is not None and self.current.usable
        return self.current


def generation(number: int) -> HostGeneration:
    return HostGeneration(number, FakeLink(100 + number))  # type: ignore[arg-type]


async def test_a_lease_never_reaches_a_host_started_after_its_own_died() -> None:
    first, second = generation(1), generation(2)
    supervisor = FakeSupervisor(first)
    lease = HostLease(supervisor)  # type: ignore[arg-type]
    params = ToolsAbortParams("s-1", "t1.c1", "Bash", UserCause())
    with pytest.raises(NotSent):
        await lease.request_if_alive("tools.abort", params)  # a stop never starts a host
    await lease.request("tools.abort", params)  # the turn's first request: it holds first
    first.link.down.set()  # the turn's host died; a fresh one serves the next turn
    supervisor.current = second
    with pytest.raises(NotSent):
        await lease.request("tools.abort", params)
    with pytest.raises(NotSent):
        await lease.request_if_alive("tools.abort", params)
    assert first.link.sent == ["tools.abort"]  # type: ignore[attr-defined]
    assert second.link.sent == []  # type: ignore[attr-defined]
    # A later turn holds the host its own first request finds.
    later = HostLease(supervisor)  # type: ignore[arg-type]
    await later.request("tools.abort", params)
    assert second.link.sent == ["tools.abort"]  # type: ignore[attr-defined]


async def test_a_call_stopped_while_its_host_starts_is_never_sent(
        autojump_clock: trio.testing.MockClock) -> None:
    host = FakeHost()
    host.started = trio.Event()  # the turn's host is still being started
    host.execute_released = trio.Event()
    host.execute_released.set()
    host.execute_answer = ok_result("Wrote w.txt", details={"bytesWritten": 1})
    run = Run(host, grace=2.0)

    async def stop_then_start() -> None:
        await host.starting.wait()
        run.controller.abort(UserCause())  # its abort has no host to go to
        await trio.sleep(1)
        host.started.set()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(stop_then_start)
        result, _ = await run.call(*WRITE)
    assert result.code == "ABORTED_BEFORE_DISPATCH" and not lost_host(result)
    assert host.executes == []  # the Write never reached the host


async def test_a_held_lease_awaits_what_outlives_its_calls_for_a_bounded_time(
        autojump_clock: trio.testing.MockClock) -> None:
    """The lease's own nursery: nothing runs there unless the lease is held; at its end
    it awaits its requests (shielded: a session closing does not cut a tools.abort short)
    for at most END_WAIT, then cancels what still waits."""
    lease = HostLease(FakeSupervisor(None))  # type: ignore[arg-type]
    with pytest.raises(RuntimeError):
        lease.start_soon(trio.lowlevel.checkpoint)
    finished: list[str] = []
    cancelled: list[str] = []

    async def answered_after(delay: float, name: str) -> None:
        try:
            await trio.sleep(delay)
            finished.append(name)
        except trio.Cancelled:
            cancelled.append(name)
            raise

    began = trio.current_time()
    with trio.CancelScope() as session:
        async with lease.held():
            lease.start_soon(lambda: answered_after(1.0, "abort answer"))
            lease.start_soon(lambda: answered_after(END_WAIT + 10, "late result"))
            session.cancel()  # the session closes as its turn ends
    assert finished == ["abort answer"] and cancelled == ["late result"]
    assert trio.current_time() - began == pytest.approx(END_WAIT)


@pytest.mark.parametrize("tool", [GREP, BASH, WRITE], ids=["read-only", "process", "mutating"])
async def test_the_stop_reaches_the_call_before_any_task_wakes(
        autojump_clock: trio.testing.MockClock, tool: tuple[str, dict[str, Any]]) -> None:
    """One route: the abort of the signal itself moves the call and starts its one
    tools.abort (no task has run between the abort and the check)."""
    host = FakeHost()
    host.answer_aborts(ToolsAbortResult(True, "running", True))
    host.execute_released = trio.Event()
    host.execute_answer = ok_result("done")
    run = Run(host)
    seen: list[str] = []

    async def stop() -> None:
        await host.sent.wait()
        run.controller.abort(UserCause())
        seen.extend(call.state.value for call in run.tools.in_flight())
        await trio.sleep(1)
        host.execute_released.set()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(stop)
        await run.call(*tool)
    assert seen == ["aborting"] and len(host.aborts) == 1
