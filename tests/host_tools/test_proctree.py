"""Killing process trees: background, setsid, double-fork, nohup and TERM-ignoring members;
and the parent-death signal every spawned child gets.

Each test checks with psutil (and the autouse fixture, via the env marker and
the test process's children) that nothing is left alive.
"""

from __future__ import annotations

import os
import pathlib
import signal
import subprocess
import sys
import time

import psutil  # type: ignore[import-untyped, unused-ignore]
import pytest
import trio

from host import spawn, spawn_start
from runtime.proc import orphans
from runtime.proc.proctree import find_marked, kill_marked, kill_tree
from tests.kit.waiters import wait_until

from .conftest import TEST_GRACE

EVIL_TREE = """
sleep 60 &                                        # background job, same group
setsid sleep 61 &                                 # own session
( setsid sleep 62 & ) &                           # double fork, orphaned, own session
( sleep 63 & )                                    # double fork, orphaned, same session
nohup sleep 64 >/dev/null 2>&1 &                  # nohup
bash -c "trap '' TERM; sleep 65; :" &             # TERM-ignoring (sleep inherits SIG_IGN)
setsid bash -c "trap '' TERM; while :; do sleep 0.05; done" &   # escaped, ignoring, forking
echo ready
wait
"""
EVIL_MEMBERS = 9  # the shell, 6 sleeps, 2 TERM-ignoring bash (plus their short sleeps)


async def _wait_ready(child: spawn.Child, marker: tuple[str, str], count: int) -> None:
    with trio.fail_after(5):
        assert await child.stdout.receive_some(100) == b"ready\n"
    await wait_until(lambda: len(find_marked(*marker)) >= count)


async def test_evil_tree_dies_within_grace(marker: tuple[str, str], tmp_path: object) -> None:
    child = await spawn.spawn(["bash", "-c", EVIL_TREE], cwd="/", marker=marker)
    try:
        await _wait_ready(child, marker, EVIL_MEMBERS)
        members = find_marked(*marker)
        report = await kill_tree(child.pid, grace=TEST_GRACE, marker=marker)
        assert report.clean, report
        assert report.found >= EVIL_MEMBERS
        assert report.killed >= 3  # two TERM-ignoring shells and their sleep
        assert TEST_GRACE <= report.elapsed < TEST_GRACE + 1.0
        assert not any(p.is_running() and p.status() != psutil.STATUS_ZOMBIE for p in members)
        assert find_marked(*marker) == []
    finally:
        await child.finish(TEST_GRACE)
        await child.aclose()
    assert child.returncode == -15


async def test_term_honouring_tree_does_not_wait_for_the_grace(marker: tuple[str, str]) -> None:
    script = "sleep 60 & setsid sleep 61 & (sleep 62 &); echo ready; wait"
    child = await spawn.spawn(["bash", "-c", script], cwd="/", marker=marker)
    try:
        await _wait_ready(child, marker, 4)
        report = await kill_tree(child.pid, grace=2.0, marker=marker)
        assert report.clean and report.found == 4 and report.killed == 0
        assert report.elapsed < 0.5  # measured ~10-30 ms
    finally:
        await child.finish(2.0)
        await child.aclose()


async def test_session_attribution_without_a_marker(marker: tuple[str, str]) -> None:
    # No marker given to kill_tree: the orphaned double fork is found by its session.
    child = await spawn.spawn(["bash", "-c", "(sleep 60 &); sleep 61 & echo ready; wait"],
                                 cwd="/", marker=marker)
    try:
        await _wait_ready(child, marker, 3)
        orphan = [p for p in find_marked(*marker) if p.ppid() != child.pid and p.pid != child.pid]
        assert orphan  # reparented away from the shell
        report = await kill_tree(child.pid, grace=TEST_GRACE)
        assert report.clean and report.found == 3
    finally:
        await child.finish(TEST_GRACE)
        await child.aclose()


async def test_kill_marked_cleans_up_after_a_dead_owner(marker: tuple[str, str]) -> None:
    # The shell exits at once; its setsid children are orphans carrying the marker,
    # as a crashed host's trees would be.
    script = "setsid sleep 60 & setsid bash -c \"trap '' TERM; sleep 61; :\" & echo ready"
    child = await spawn.spawn(["bash", "-c", script], cwd="/", marker=marker)
    await _wait_ready(child, marker, 3)
    await child.wait_exited()
    assert child.popen.wait() == 0
    await child.aclose()
    key, value = marker
    report = await kill_marked(key, value[:8], prefix=True, grace=TEST_GRACE)
    assert report.clean and report.found == 3 and report.killed == 2
    assert find_marked(key, value) == []


async def test_cancelled_caller_still_gets_a_dead_tree(marker: tuple[str, str]) -> None:
    started = time.monotonic()
    with trio.move_on_after(0.3):
        async with spawn.spawned(["bash", "-c", EVIL_TREE], cwd="/", marker=marker,
                                    grace=TEST_GRACE) as child:
            await trio.sleep_forever()
    assert time.monotonic() - started < 0.3 + TEST_GRACE + 1.0
    assert child.kill_report is not None and child.kill_report.clean
    assert find_marked(*marker) == []


def test_become_subreaper() -> None:
    assert orphans.become_subreaper() is True


def test_find_marked_tolerates_foreign_processes() -> None:
    assert find_marked("QUIESCE_NO_SUCH_MARKER") == []
    assert all(p.pid != 1 for p in find_marked("PATH"))  # may or may not read pid 1


PDEATHSIG_OF_SELF = """
import ctypes, ctypes.util, sys
sig = ctypes.c_int(-1)
ctypes.CDLL(ctypes.util.find_library("c")).prctl(2, ctypes.byref(sig), 0, 0, 0)  # PR_GET_PDEATHSIG
print(sig.value)
"""


async def test_children_get_a_parent_death_signal() -> None:
    with trio.fail_after(10):
        popen = await spawn.start_process([sys.executable, "-c", PDEATHSIG_OF_SELF],
                                             stdout=subprocess.PIPE)
        out, _ = await trio.to_thread.run_sync(popen.communicate)
    assert out.strip() == str(int(signal.SIGKILL)).encode()


def test_a_child_whose_parent_died_before_the_signal_was_armed_exits(
        tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # As if the parent had died between the fork and the prctl: getppid() is not it.
    monkeypatch.setattr(os, "getpid", lambda: 1)
    in_child = spawn_start._die_with_parent()
    monkeypatch.undo()
    assert in_child is not None
    ran = tmp_path / "ran"
    popen = subprocess.Popen(["touch", str(ran)], preexec_fn=in_child)
    assert popen.wait(timeout=10) == 1
    assert not ran.exists()  # it never got to exec the command


async def test_a_tool_process_gets_its_parent_death_signal_through_the_gate(
        tmp_path: pathlib.Path) -> None:
    """``spawn`` (stdin from /dev/null) starts through the gate: no ``preexec_fn``, the
    signal armed by ``setpriv``, stdin /dev/null for the command."""
    if spawn_start.gate_tools() is None:
        pytest.skip("no setpriv or bash here: children are forked with a preexec_fn")
    code = PDEATHSIG_OF_SELF + "import os; print(os.readlink('/proc/self/fd/0'))\n"
    with trio.fail_after(10):
        child = await spawn.spawn([sys.executable, "-c", code], cwd=tmp_path, marker=None)
        out = b""
        while chunk := await child.stdout.receive_some(4096):
            out += chunk
        await child.finish(TEST_GRACE)
        await child.aclose()
    assert out.split() == [str(int(signal.SIGKILL)).encode(), b"/dev/null"]


def test_a_gated_child_whose_host_never_opens_the_gate_runs_nothing(
        tmp_path: pathlib.Path) -> None:
    """As if the host had died before the go line: the gate reads EOF and exits."""
    tools = spawn_start.gate_tools()
    if tools is None:
        pytest.skip("no setpriv or bash here")
    setpriv, shell = tools
    ran = tmp_path / "ran"
    gate_r, gate_w = os.pipe()
    popen = subprocess.Popen([setpriv, "--pdeathsig", "KILL", "--", shell, "-c",
                              spawn_start.GATE_SCRIPT, "gate", "/usr/bin/touch", str(ran)],
                             stdin=gate_r)
    os.close(gate_r)
    os.close(gate_w)
    assert popen.wait(timeout=10) != 0
    assert not ran.exists()


def test_a_missing_command_fails_as_popen_would(tmp_path: pathlib.Path) -> None:
    async def start() -> None:
        await spawn.spawn(["no-such-command-quiesce"], cwd=tmp_path, marker=None)

    with pytest.raises(FileNotFoundError):
        trio.run(start)


async def test_trees_stopped_together_share_their_listings(
        monkeypatch: pytest.MonkeyPatch, marker: tuple[str, str]) -> None:
    """The fallback lists the process table once per wave, not once per tree."""
    from runtime.proc import proclisting

    taken = 0
    take = proclisting.Listing.take

    def counted() -> proclisting.Listing:
        nonlocal taken
        taken += 1
        return take()

    monkeypatch.setattr(proclisting.Listing, "take", staticmethod(counted))
    trees = 8
    markers = [(marker[0], f"{marker[1]}-{k}") for k in range(trees)]  # one tree each
    children = [await spawn.spawn(["bash", "-c", "sleep 60 & setsid sleep 61 & echo ready; "
                                   "sleep 62"], cwd="/", marker=mine)
                for mine in markers]
    with trio.fail_after(20):
        for child in children:
            assert await child.stdout.receive_some(100) == b"ready\n"
        async def stop(pid: int, mine: tuple[str, str]) -> None:
            report = await kill_tree(pid, grace=TEST_GRACE, marker=mine)
            assert report.found == 3 and report.clean

        async with trio.open_nursery() as nursery:
            for child, mine in zip(children, markers, strict=True):
                nursery.start_soon(stop, child.pid, mine)
        together = taken
        for child in children:
            await child.finish(TEST_GRACE)
            await child.aclose()
    # One tree alone lists at least twice (its members, then a verifying listing once they
    # died): the eight together share theirs.
    assert 0 < together <= 5, together


async def test_the_gate_passes_the_environment_on_as_it_was(tmp_path: pathlib.Path) -> None:
    """A variable whose name is no shell identifier and an exported bash function reach the
    command as they would without the gate (dash's exec drops both)."""
    if spawn_start.gate_tools() is None:
        pytest.skip("no setpriv or bash here: children are forked with a preexec_fn")
    env = {"MY-VAR": "kept", "BASH_FUNC_greet%%": "() {  echo hello\n}"}
    code = "import os; print(os.environ.get('MY-VAR'), os.environ.get('BASH_FUNC_greet%%'))"
    with trio.fail_after(10):
        child = await spawn.spawn([sys.executable, "-c", code], cwd=tmp_path, marker=None,
                                  env_extra=env)
        out = b""
        while chunk := await child.stdout.receive_some(4096):
            out += chunk
        await child.finish(TEST_GRACE)
        await child.aclose()
    assert out.decode() == "kept () {  echo hello\n}\n"


async def test_a_lowered_child_is_lowered_against_other_sessions_too(
        tmp_path: pathlib.Path) -> None:
    """A search's niceness must hold against the host, not only within its own session:
    where the kernel groups tasks by session (autogroups), the child's new session gets
    the same niceness, or 25 searches take 25 shares of the CPU against the host's one."""
    if not os.path.exists("/proc/self/autogroup"):
        pytest.skip("this kernel has no autogroups")
    code = ("import os; print(os.getpriority(os.PRIO_PROCESS, 0));"
            "print(open('/proc/self/autogroup').read())")
    with trio.fail_after(10):
        child = await spawn.spawn([sys.executable, "-c", code], cwd=tmp_path, marker=None,
                                  niceness=19)
        out = b""
        while chunk := await child.stdout.receive_some(4096):
            out += chunk
        await child.finish(TEST_GRACE)
        await child.aclose()
    own_nice, group = out.decode().split("\n", 1)
    assert own_nice == "19"
    assert group.strip().endswith("nice 19"), group
