"""Forcing a stopped mutating call whose body is stuck (the host's manager, in process)."""

from __future__ import annotations

import pathlib

import msgspec
import trio

from host.manager import CallManager, HostConfig
from host.tools.context import ToolContext, ToolSpec
from protocol.messages.host import (
    ToolsAbortParams,
    ToolsExecuteParams,
)
from protocol.toolclass import ToolClass
from protocol.tools import ToolResult, ok_result
from tests.kit.host import NoRuntime


class StuckArgs(msgspec.Struct, frozen=True):
    pass


async def test_force_releases_a_stopped_stuck_mutating_call(tmp_path: pathlib.Path) -> None:
    release = trio.Event()
    finished: list[bool] = []

    async def stuck(args: StuckArgs, ctx: ToolContext) -> ToolResult:
        await release.wait()  # shielded by the manager: a stop cannot end it
        finished.append(True)
        return ok_result("wrote it")

    manager = CallManager(HostConfig(), NoRuntime(), tools={
        "Stuck": ToolSpec("Stuck", StuckArgs, ToolClass.MUTATING, stuck)})
    manager.open_session("s", str(tmp_path), "auto")
    results: list[ToolResult] = []
    with trio.fail_after(5):
        async with trio.open_nursery() as background:
            manager.attach(background)

            async def run() -> None:
                results.append(await manager.execute(ToolsExecuteParams("s", "c1", "Stuck", {})))

            async with trio.open_nursery() as nursery:
                nursery.start_soon(run)
                await trio.sleep(0.05)
                assert manager.force("s", "c1", "Stuck") == (
                    False, "the call has not been stopped: stop it first")
                manager.abort(ToolsAbortParams("s", "c1", "Stuck"))
                await trio.sleep(0.1)
                assert results == []  # a stop alone waits for the mutating body
                forced, detail = manager.force("s", "c1", "Stuck")
                assert forced, detail
            (result,) = results
            assert result.code == "ABORTED" and result.details["forced"]
            assert finished == []  # the body is abandoned, not finished
            release.set()
    assert finished == [True]
    assert manager.force("s", "c1", "Stuck") == (False, "no such call in flight")
