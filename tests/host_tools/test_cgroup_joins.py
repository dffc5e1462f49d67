"""A process cannot outlive its call's stop by joining another live call's cgroup (issue
31, item 3), against a real host with cgroups.

A root process may write itself into any ``cgroup.procs``. Which call a process belongs
to is decided by the host, not by the cgroup it wrote itself into: one that moved from
call b1 into call b2's cgroup is still b1's (it kept b1's session), and dies at b1's stop,
or at its completion, before b1's result, while b2 runs on untouched.
"""

from __future__ import annotations

import os
import pathlib
import signal

import psutil
import pytest
import trio

from protocol.tools import ToolResult
from runtime.proc import cgroups
from runtime.supervision import cgroup_sweeps
from tests.conftest import Marked
from tests.host.harness import Host, running_host

# The sandbox refuses the write into another cgroup's cgroup.procs outright
# (tests/e2e/test_sandbox.py); the host's own attribution must hold without it too.
FAST = {"tools": {"kill_grace": 0.5}, "sandbox": {"mode": "off"}}


def _v2_point() -> str | None:
    mount = cgroups._v2_mount()
    return None if mount is None else mount[1]


# b2 says where its cgroup is; b1 moves a backgrounded subshell of its own into it.
OTHER = "sed -n 's/^0:://p' /proc/$$/cgroup > {where}; echo up; sleep 60"
JOIN = ("( while [ ! -s {where} ]; do sleep 0.01; done; "
        "echo $BASHPID > {point}$(cat {where})/cgroup.procs && "
        "echo $BASHPID > {pid_file} && exec sleep 300 ) & echo up; {tail}")
TAILS = {"stop": "sleep 60",  # b1 is stopped
         # b1 ends once the joiner is in b2's cgroup (and says so).
         "completion": "while [ ! -s {pid_file} ]; do sleep 0.01; done; "
                       "grep -qF \"$(cat {where})\" /proc/$(cat {pid_file})/cgroup && "
                       "echo joined-b2"}


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


async def _run(host: Host, call_id: str, command: str,
               results: dict[str, ToolResult]) -> None:
    results[call_id] = await host.execute(call_id, "Bash", {"command": command})


@pytest.mark.parametrize("ending", ["stop", "completion"])
async def test_a_process_that_joined_another_calls_cgroup_dies_at_its_own_stop(
        tmp_path: pathlib.Path, marked: Marked, ending: str) -> None:
    point = _v2_point()
    if point is None:
        pytest.skip("no cgroup v2 hierarchy")
    where, pid_file = tmp_path / "b2.cgroup", tmp_path / "joiner.pid"
    results: dict[str, ToolResult] = {}
    joiner = 0
    try:
        async with running_host(str(tmp_path), marked.env(), config=FAST) as host:
            if (await host.stats()).process_isolation != "cgroup":
                pytest.skip("this host cannot make cgroups")
            async with trio.open_nursery() as nursery:
                nursery.start_soon(_run, host, "b2", OTHER.format(where=where), results)
                nursery.start_soon(_run, host, "b1", JOIN.format(
                    where=where, point=point, pid_file=pid_file,
                    tail=TAILS[ending].format(pid_file=pid_file, where=where)), results)
                with trio.fail_after(10):
                    while not pid_file.exists() or not pid_file.read_text().strip():
                        await trio.sleep(0.02)
                joiner = int(pid_file.read_text())
                if ending == "stop":
                    in_b2 = cgroups.own_cgroup_dir(joiner)
                    assert in_b2 is not None and in_b2.endswith(where.read_text().strip())
                    assert _alive(joiner)
                    with trio.fail_after(10):
                        aborted = await host.abort("b1", "Bash")
                    assert aborted.found
                with trio.fail_after(10):  # b1's result: its processes are gone by then
                    while "b1" not in results:
                        await trio.sleep(0.01)
                assert not _alive(joiner), "it outlived its own call's stop"
                assert "b2" not in results  # the call it joined runs on
                await host.abort("b2", "Bash")
        assert results["b1"].code == ("ABORTED" if ending == "stop" else None)
        if ending == "completion":
            assert "joined-b2" in str(results["b1"].content), results["b1"]
        assert results["b2"].code == "ABORTED"
        assert results["b1"].details["survivors"] == []
    finally:
        if joiner and _alive(joiner):
            os.kill(joiner, 9)


async def test_the_runtimes_kill_of_a_frozen_hosts_call_takes_its_joiners_too(
        tmp_path: pathlib.Path, marked: Marked) -> None:
    """When the host does not answer a stop, the runtime kills the call's cgroup itself
    (``cgroup_sweeps.kill_call_cgroup``): the process of that call in another call's
    cgroup dies with it, and the other call's own processes do not."""
    point = _v2_point()
    if point is None:
        pytest.skip("no cgroup v2 hierarchy")
    where, pid_file = tmp_path / "b2.cgroup", tmp_path / "joiner.pid"
    results: dict[str, ToolResult] = {}
    joiner = 0
    try:
        async with running_host(str(tmp_path), marked.env(), config=FAST) as host:
            if (await host.stats()).process_isolation != "cgroup":
                pytest.skip("this host cannot make cgroups")
            host_pid = host.link.pid
            assert host_pid is not None
            async with trio.open_nursery() as nursery:
                nursery.start_soon(_run, host, "b2", OTHER.format(where=where), results)
                nursery.start_soon(_run, host, "b1", JOIN.format(
                    where=where, point=point, pid_file=pid_file,
                    tail=TAILS["stop"]), results)
                with trio.fail_after(10):
                    while not pid_file.exists() or not pid_file.read_text().strip():
                        await trio.sleep(0.02)
                joiner = int(pid_file.read_text())
                b2_cgroup = point + where.read_text().strip()
                b2_members = set(cgroups.pids_below(b2_cgroup)) - {joiner}
                assert b2_members and _alive(joiner)
                os.kill(host_pid, signal.SIGSTOP)
                try:
                    with trio.fail_after(10):
                        empty = await cgroup_sweeps.kill_call_cgroup(host_pid, "s-test", "b1")
                    assert empty
                    assert not _alive(joiner), "it outlived its call's kill"
                    assert all(_alive(pid) for pid in b2_members)  # b2 runs on
                finally:
                    os.kill(host_pid, signal.SIGCONT)
                await host.abort("b1", "Bash")
                await host.abort("b2", "Bash")
    finally:
        if joiner and _alive(joiner):
            os.kill(joiner, 9)
