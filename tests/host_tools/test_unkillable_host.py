"""A host that cannot die must not hang the runtime (issue 31).

A Read of a file whose lower layer (a FUSE server of the test's own, ``slowfuse.py``) never
answers leaves a thread of the host in uninterruptible sleep: SIGKILLed, the host cannot
exit until that read returns. Whatever happens to it then (killed from outside under a
turn, replaced by an operator's ``restart-host``, or the daemon asked to shut down), each
answers within a bound, a fresh host serves the next turn, the daemon's log names the pid,
and the old host is reaped once the FUSE server finally dies; nothing is left behind.
"""

from __future__ import annotations

import os
import pathlib
import signal
import sys

import psutil
import pytest
import trio

from protocol.messages.client import AgentPromptResult
from protocol.messages.events import ToolCallEvent
from runtime.clients.daemon_client import SHUTDOWN_TIMEOUT
from runtime.supervision.link import KILL_EXIT_TIMEOUT
from tests.conftest import Marked
from tests.host_tools.test_slow_mounts import pytestmark as needs_fuse
from tests.host_tools.test_slow_mounts import slow_fuse
from tests.kit.daemon import Agent, agent_daemon, call, text
from tests.support import command_line

pytestmark = needs_fuse

LIVENESS = ("--ping-interval", "0.2", "--liveness-timeout", "1")


def hosts_of(daemon_pid: int) -> list[psutil.Process]:
    return [p for p in psutil.Process(daemon_pid).children()
            if "host" in command_line(p).split()]


def exists_unreaped(pid: int) -> bool:
    """The process is there: running, stuck, or exited and not yet reaped (a zombie)."""
    try:
        psutil.Process(pid).status()
    except psutil.NoSuchProcess:
        return False
    return True


def in_fuse_read(pid: int) -> bool:
    """A thread of ``pid`` waits in the kernel for a FUSE server's answer (fs/fuse/dev.c)."""
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return False
    for tid in tids:
        try:
            if pathlib.Path(f"/proc/{pid}/task/{tid}/wchan").read_text() == \
                    "request_wait_answer":
                return True
        except OSError:
            continue
    return False


async def stuck_read(agent: Agent, nursery: trio.Nursery,
                     host: int) -> list[AgentPromptResult]:
    """Prompt a turn whose Read hangs in the FUSE server; return once its body runs."""
    answers = agent.prompt_soon(nursery, "go")
    await agent.wait_for(lambda e: isinstance(e, ToolCallEvent))
    with trio.fail_after(10):  # a thread of the host waits in the kernel, in the read
        while not in_fuse_read(host):
            await trio.sleep(0.05)
    return answers


@pytest.mark.parametrize("how", ["killed", "restarted"])
async def test_a_killed_host_stuck_in_a_read_is_replaced_and_reaped_later(
        tmp_path: pathlib.Path, marked: Marked, how: str) -> None:
    script = [[call("r1", "Read", path="slow.txt")], [call("r2", "Read", path="fast.txt")],
              [text("second turn works")]]
    log = tmp_path / "daemon.log"
    with slow_fuse(tmp_path, overlay=True) as (fuse, workspace):
        async with agent_daemon(marked, extra_args=(*LIVENESS, "--log-file", str(log))
                                ) as agent:
            await agent.new_session(workspace, script)
            old = agent.host_pid
            with trio.fail_after(30):
                async with trio.open_nursery() as nursery:
                    answers = await stuck_read(agent, nursery, old)
                    killed_at = trio.current_time()
                    if how == "killed":  # from outside: the liveness ping notices
                        os.kill(old, signal.SIGKILL)
                    else:  # an operator's restart-host kills it and starts another
                        await restart_host(marked)
            # A liveness ping (0.2 + 1 s) and the killed host's exit wait (3 s), or the
            # exit wait alone; nothing waits for the host to exit.
            assert trio.current_time() - killed_at < 1.2 + KILL_EXIT_TIMEOUT + 3
            (first,) = answers
            assert first.stop_reason == "error"
            turn = first.turn_id or ""
            assert agent.results(turn)["r1"].code == "HOST_CRASHED"
            agent.assert_balanced()
            # The old host is still there (it cannot exit): the case is real.
            assert in_fuse_read(old)
            with trio.fail_after(20):  # a fresh host serves the next turn
                second = await agent.prompt("again")
            assert second.stop_reason == "end_turn"
            assert agent.results(second.turn_id or "")["r2"].code is None
            (new,) = [p.pid for p in hosts_of(agent.daemon.process.pid) if p.pid != old]
            assert new != old
            # The FUSE server dies: the read fails, the old host exits and is reaped.
            fuse.release()
            with trio.fail_after(10):
                while exists_unreaped(old):
                    await trio.sleep(0.05)
            assert [p.pid for p in hosts_of(agent.daemon.process.pid)] == [new]
    said = log.read_text()  # the pid given up is named, and so is its late reaping
    assert f"host {old} was killed but cannot exit" in said
    assert f"host {old} exited at last" in said


@pytest.mark.parametrize("how", ["stop-then-shutdown", "shutdown"])
async def test_a_daemon_with_a_host_stuck_in_a_read_exits_in_bounded_time(
        tmp_path: pathlib.Path, marked: Marked, how: str) -> None:
    script = [[call("r1", "Read", path="slow.txt")], [text("not reached")]]
    old = 0
    log = tmp_path / "daemon.log"
    with slow_fuse(tmp_path, overlay=True) as (fuse, workspace):
        try:
            async with agent_daemon(marked, extra_args=("--log-file", str(log))) as agent:
                await agent.new_session(workspace, script)
                old = agent.host_pid
                daemon = agent.daemon.process
                async with trio.open_nursery() as nursery:
                    await stuck_read(agent, nursery, old)
                    if how == "stop-then-shutdown":
                        with trio.fail_after(5):  # a read-only call's stop answers at once
                            aborted = await agent.abort()
                        assert [(c.call_id, c.code) for c in aborted.tool_calls] == [
                            ("r1", "ABORTED")]
                    started = trio.current_time()
                    nursery.cancel_scope.cancel()  # a pending prompt is not awaited
            # Leaving the block closed the daemon's stdin (EOF) and awaited its exit: it
            # exited by itself (not killed past the client's deadline), within a bound.
            took = trio.current_time() - started
            assert daemon.returncode == 0, daemon.returncode
            assert took < SHUTDOWN_TIMEOUT, took
            assert in_fuse_read(old)  # the host it could not reap outlived it
            assert f"host {old} cannot exit" in log.read_text()  # and it said so
        finally:
            fuse.release()
            if old:
                await reap_orphan(old)


async def restart_host(marked: Marked) -> None:
    command = [sys.executable, "-m", "runtime", "ops", "restart-host", "--json"]
    done = await trio.run_process(command, env=marked.env(), capture_stdout=True,
                                  capture_stderr=True, check=False)
    assert done.returncode == 0, done.stderr


async def reap_orphan(pid: int) -> None:
    """Once its read fails, the old host exits; re-parented (to us, a subreaper, in these
    tests), it is reaped here: nothing is left behind. (Its leader shows as a zombie while
    the stuck thread lives: only a ``waitpid`` that returns it says it is gone.)"""
    with trio.fail_after(10):
        while True:
            try:
                if psutil.Process(pid).ppid() == os.getpid():
                    # A zombie or a process still exiting: never blocks.
                    if os.waitpid(pid, os.WNOHANG)[0] == pid:  # noqa: ASYNC222
                        return
            except (psutil.NoSuchProcess, ChildProcessError):
                return
            await trio.sleep(0.05)
