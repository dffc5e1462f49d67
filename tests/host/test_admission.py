"""Admission: per-class and per-session limits, the bounded queue, a stop while queued, and
``tools.abort`` answered while every slot is busy and the queue is full."""

from __future__ import annotations

import pathlib
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager

import msgspec
import pytest
import trio

from host.admission import Admission, AdmissionLimits, Overloaded
from host.manager import CallManager, HostConfig
from host.tools.context import ToolContext, ToolSpec
from protocol.messages.host import ToolsAbortParams, ToolsExecuteParams
from protocol.toolclass import ToolClass
from protocol.tools import ToolResult, ok_result
from tests.conftest import Marked
from tests.kit.host import NoRuntime, running_host

PROCESS, READ_ONLY = ToolClass.PROCESS, ToolClass.READ_ONLY


async def hold(admission: Admission, session: str, tool_class: ToolClass,
               admitted: list[str], name: str, release: trio.Event) -> None:
    async with admission.slot(session, tool_class):
        admitted.append(name)
        await release.wait()


@asynccontextmanager
async def holding(limits: AdmissionLimits) -> AsyncIterator[
        tuple[Admission, Callable[[str, ToolClass, str], None], list[str], trio.Event]]:
    """An Admission, a way to start holders (session, class, name), the names admitted in
    order, and the event that releases every holder."""
    admission = Admission(limits)
    admitted: list[str] = []
    release = trio.Event()
    with trio.fail_after(5):
        async with trio.open_nursery() as nursery:
            def start(session: str, tool_class: ToolClass, name: str) -> None:
                nursery.start_soon(hold, admission, session, tool_class, admitted, name,
                                   release)
            yield admission, start, admitted, release
            release.set()


async def test_a_class_at_its_limit_queues_the_next_call() -> None:
    async with holding(AdmissionLimits(per_class={PROCESS: 1})) as (adm, start, admitted,
                                                                    release):
        start("s", PROCESS, "first")
        await trio.testing.wait_all_tasks_blocked()
        start("t", PROCESS, "second")  # another session: the class limit still applies
        start("t", READ_ONLY, "read")  # another class: admitted at once
        await trio.testing.wait_all_tasks_blocked()
        assert admitted == ["first", "read"] and adm.waiting == 1 and adm.running == 2
        release.set()
        await trio.testing.wait_all_tasks_blocked()
        assert admitted == ["first", "read", "second"] and adm.waiting == 0


async def test_a_session_at_its_limit_queues_only_its_own_calls() -> None:
    async with holding(AdmissionLimits(per_session=1)) as (adm, start, admitted, _):
        start("s", READ_ONLY, "s1")
        await trio.testing.wait_all_tasks_blocked()
        start("s", READ_ONLY, "s2")
        start("t", READ_ONLY, "t1")
        await trio.testing.wait_all_tasks_blocked()
        assert admitted == ["s1", "t1"] and adm.waiting == 1


async def test_calls_queued_for_their_class_hold_no_session_slot() -> None:
    # Two Bash calls of one session: one runs, one waits for the process class. The
    # waiting one must not hold a session slot, or the session's Read would wait too.
    limits = AdmissionLimits(per_class={PROCESS: 1}, per_session=2)
    async with holding(limits) as (adm, start, admitted, _):
        start("s", PROCESS, "bash1")
        await trio.testing.wait_all_tasks_blocked()
        start("s", PROCESS, "bash2")
        await trio.testing.wait_all_tasks_blocked()
        start("s", READ_ONLY, "read")
        await trio.testing.wait_all_tasks_blocked()
        assert admitted == ["bash1", "read"] and adm.waiting == 1


async def test_beyond_the_queue_bound_is_overloaded_and_a_cancelled_wait_leaves() -> None:
    limits = AdmissionLimits(per_class={PROCESS: 1}, max_waiting=1)
    async with holding(limits) as (adm, start, admitted, _):
        start("s", PROCESS, "running")
        await trio.testing.wait_all_tasks_blocked()
        with trio.CancelScope() as waiting:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(hold, adm, "s", PROCESS, admitted, "queued", trio.Event())
                await trio.testing.wait_all_tasks_blocked()
                assert adm.waiting == 1
                with pytest.raises(Overloaded):
                    async with adm.slot("t", PROCESS):
                        pass
                async with adm.slot("t", READ_ONLY):  # a free slot needs no queue
                    pass
                waiting.cancel()
        assert adm.waiting == 0 and admitted == ["running"] and adm.running == 1


# -- through the call manager (in process) ----------------------------------------------

class GateArgs(msgspec.Struct, frozen=True):
    pass


def gate_tool(started: list[str], release: trio.Event) -> ToolSpec:
    async def run(args: GateArgs, ctx: ToolContext) -> ToolResult:
        started.append("ran")
        async with trio.open_nursery() as nursery:  # ends on release or on a stop
            async def until(event: trio.Event) -> None:
                await event.wait()
                nursery.cancel_scope.cancel()
            nursery.start_soon(until, release)
            nursery.start_soon(until, ctx.stop)
        return ok_result("done")
    return ToolSpec("Gate", GateArgs, PROCESS, run)


async def test_manager_overload_and_stop_while_queued(tmp_path: pathlib.Path) -> None:
    started: list[str] = []
    release = trio.Event()
    config = HostConfig(admission=AdmissionLimits(per_class={PROCESS: 1}, max_waiting=1))
    manager = CallManager(config, NoRuntime(), tools={"Gate": gate_tool(started, release)})
    manager.open_session("s", str(tmp_path), "auto")
    results: dict[str, ToolResult] = {}

    async def execute(call_id: str) -> None:
        results[call_id] = await manager.execute(ToolsExecuteParams("s", call_id, "Gate", {}))

    def result_of(call_id: str) -> Callable[[], Awaitable[ToolResult]]:
        async def wait() -> ToolResult:
            while call_id not in results:
                await trio.sleep(0.01)
            return results[call_id]
        return wait

    with trio.fail_after(5):
        async with trio.open_nursery() as background:
            manager.attach(background)
            async with trio.open_nursery() as nursery:
                nursery.start_soon(execute, "running")
                await trio.testing.wait_all_tasks_blocked()
                nursery.start_soon(execute, "queued")
                await trio.testing.wait_all_tasks_blocked()
                await execute("refused")
                refused = results["refused"]
                assert refused.code == "HOST_OVERLOADED" and not refused.body_invoked
                state = manager.abort(ToolsAbortParams("s", "queued", "Gate"))
                assert state.state == "admission" and not state.body_invoked
                queued = await result_of("queued")()
                assert queued.code == "ABORTED_BEFORE_DISPATCH" and not queued.body_invoked
                release.set()
            background.cancel_scope.cancel()
    assert started == ["ran"]  # only the call that was admitted ran
    assert not results["running"].is_error
    assert manager.admission.waiting == 0 and manager.admission.running == 0


# -- over a real host -------------------------------------------------------------------

async def test_abort_is_answered_at_once_with_every_slot_busy_and_the_queue_full(
        tmp_path: pathlib.Path, marked: Marked) -> None:
    config = {"tools": {"kill_grace": 0.5},
              "admission": {"per_class": {"process": 1}, "max_waiting": 1}}
    async with running_host(str(tmp_path), marked.env(), config=config) as host:
        results: dict[str, ToolResult] = {}
        async with trio.open_nursery() as nursery:
            async def run(call_id: str, command: str) -> None:
                results[call_id] = await host.execute(call_id, "Bash", {"command": command})

            nursery.start_soon(run, "running", "echo go; sleep 30")
            with trio.fail_after(10):
                while not host.output:
                    await trio.sleep(0.01)
            nursery.start_soon(run, "queued", "touch queued-ran")
            with trio.fail_after(5):
                while (await host.stats()).admission_waiting < 1:
                    await trio.sleep(0.01)
            await run("refused", "touch refused-ran")
            refused = results["refused"]
            assert refused.code == "HOST_OVERLOADED" and not refused.body_invoked
            for call_id in ("queued", "running"):
                sent = time.monotonic()
                state = await host.abort(call_id, "Bash")
                assert time.monotonic() - sent < 2.0  # not behind the queue's calls
                assert state.found
        assert results["queued"].code == "ABORTED_BEFORE_DISPATCH"
        assert results["running"].code == "ABORTED"
    assert not (tmp_path / "queued-ran").exists() and not (tmp_path / "refused-ran").exists()


async def test_a_sessions_searches_wait_for_its_search_slots_only() -> None:
    admission = Admission(AdmissionLimits(per_session_searches=1))
    admitted: list[str] = []
    release = trio.Event()

    async def hold_search(session: str, name: str, search: bool) -> None:
        async with admission.slot(session, READ_ONLY, search):
            admitted.append(name)
            await release.wait()

    with trio.fail_after(5):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(hold_search, "s", "grep1", True)
            await trio.testing.wait_all_tasks_blocked()
            nursery.start_soon(hold_search, "s", "grep2", True)
            nursery.start_soon(hold_search, "s", "read", False)  # not a search: at once
            nursery.start_soon(hold_search, "t", "other-grep", True)  # another session's
            await trio.testing.wait_all_tasks_blocked()
            assert sorted(admitted) == ["grep1", "other-grep", "read"] and admission.waiting == 1
            release.set()
            await trio.testing.wait_all_tasks_blocked()
            assert admitted[-1] == "grep2" and admission.waiting == 0
    assert admission.running == 0
