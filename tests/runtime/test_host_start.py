"""A host that cannot be started: the calls that needed it were never sent, the runtime
keeps serving, and the start is not retried by every waiting call."""

from __future__ import annotations

import os
import pathlib
import signal
import sys

import psutil
import trio

from protocol.tools import ToolResult
from runtime.agent.hosttools import HostTools
from runtime.agent.registry import AbortController, ToolCallRequest, ToolRegistry, run_tool_calls
from runtime.supervision.supervisor import START_RETRY_AFTER, HostStartFailed, HostSupervisor
from tests.conftest import Marked
from tests.runtime.test_hosttools import Recorder
from tests.support import MARK_VAR

# A host that starts until the flag file exists, then fails at once; each start is counted.
BREAKABLE_HOST = 'echo start >> "$2"; if [ -e "$0" ]; then exit 1; fi; exec "$1" -m host'


async def run_calls(supervisor: HostSupervisor, background: trio.Nursery,
                    *calls: ToolCallRequest) -> tuple[ToolResult, ...]:
    lease = supervisor.lease()  # held as a turn holds it: its nursery awaits read-only calls
    tools = HostTools(lease, "s-1", "t1", on_progress=lambda *a: None,
                      on_abort=lambda *a: None)
    with trio.fail_after(20):
        async with lease.held():
            return await run_tool_calls(calls, registry=ToolRegistry(tools.definitions()),
                                        recorder=Recorder(), signal=AbortController().signal)


async def test_calls_that_need_a_host_that_cannot_start_are_never_sent(
        tmp_path: os.PathLike[str], marked: Marked) -> None:
    broken = os.path.join(tmp_path, "broken")
    starts = pathlib.Path(tmp_path, "starts")
    supervisor = HostSupervisor(
        command=["env", f"{MARK_VAR}={marked.mark}", "sh", "-c", BREAKABLE_HOST, broken,
                 sys.executable, str(starts)], ping_interval=100)
    async with trio.open_nursery() as daemon:  # the daemon's nursery: it must not fail
        with trio.fail_after(20):
            await daemon.start(supervisor.run)
        first = supervisor.pid
        assert first is not None
        open(broken, "w").close()
        os.kill(first, signal.SIGKILL)
        with trio.fail_after(10):
            while supervisor.alive():
                await trio.sleep(0.02)

        # A read-only call's request runs in the daemon's nursery: its failure to find a
        # host is the call's result, not the nursery's exception.
        grep, bash = await run_calls(supervisor, daemon,
                                     ToolCallRequest("g1", "Grep", {"pattern": "x"}),
                                     ToolCallRequest("b1", "Bash", {"command": "true"}))
        for result in (grep, bash):
            assert result.code == "ABORTED_BEFORE_DISPATCH", result
            assert not result.body_invoked
            assert "could not be started" in str(result.details["hostUnavailable"])
        assert supervisor.current is not None and supervisor.current.link.pid == first

        # Within the retry pause, a caller fails at once: no start is tried again.
        tried = starts.read_text().count("start")
        assert tried == 2  # the first host, then one failed start the two calls shared
        started = trio.current_time()
        try:
            await supervisor.ensure()
        except HostStartFailed:
            pass
        else:
            raise AssertionError("a host started while the command is broken")
        assert starts.read_text().count("start") == tried
        assert trio.current_time() - started < 0.5

        # Mended, and past the pause: the next request starts a fresh host.
        os.unlink(broken)
        await trio.sleep(START_RETRY_AFTER)
        with trio.fail_after(20):
            link = await supervisor.ensure()
        assert link.pid not in (None, first) and psutil.pid_exists(link.pid or 0)
        await supervisor.stop()
        daemon.cancel_scope.cancel()
