"""Stops of process and read-only tools against a real host process.

- An evil process tree, every member confirmed running (the TERM-ignoring one
  included) before the stop: all die, the orphans were adopted by the host while
  running, and the host is left with no child, not even a zombie.
- Grep over a large tree with a FIFO in it: the FIFO does not hold a scan, a stop
  mid-walk returns at once, and the abandoned worker really stops (the host stops
  burning CPU).
- GenerateImages: a stop returns the images already written, and no backend
  process is left.
"""

from __future__ import annotations

import os
import pathlib
import time
from typing import Any

import psutil  # type: ignore[import-untyped, unused-ignore]
import trio

from host.tools import ripgrep
from protocol.tools import ImageContent, ToolResult
from tests.conftest import Marked
from tests.kit.host import Host, running_host
from tests.kit.waiters import wait_until
from tests.support import command_line, marked_processes

GRACE = 0.5
FAST = {"tools": {"kill_grace": GRACE}}
TREE = (
    "echo started; "
    "sleep 61 & "                                    # background job
    "setsid sleep 62 & "                             # own session
    "( sleep 63 & ) ; "                              # double fork: an orphan, same session
    "( setsid sleep 64 & ) ; "                       # double fork: an orphan, own session
    "nohup sleep 65 >/dev/null 2>&1 & "              # nohup
    "bash -c 'trap \"\" TERM; sleep 66' & "          # TERM-ignoring (its sleep inherits it)
    "sleep 67"                                       # the foreground
)
SLEEPS = {f"sleep {n}" for n in range(61, 68)}
TREE_MEMBERS = 8  # the root shell and 7 sleeps (bash may exec "sleep 66" in place of the
# TERM-ignoring shell, which is then one more member)


def _ignores_term(proc: psutil.Process) -> bool:
    try:
        with open(f"/proc/{proc.pid}/status") as status:
            for line in status:
                if line.startswith("SigIgn:"):
                    return bool(int(line.split()[1], 16) & (1 << (15 - 1)))
    except OSError:
        pass
    return False


async def _execute(host: Host, call_id: str, tool: str, args: dict[str, Any],
                   results: dict[str, ToolResult]) -> None:
    results[call_id] = await host.execute(call_id, tool, args)


async def test_every_member_of_an_evil_tree_dies_and_is_reaped(tmp_path: pathlib.Path,
                                                               marked: Marked) -> None:
    results: dict[str, ToolResult] = {}
    async with running_host(str(tmp_path), marked.env(), config=FAST) as host:
        host_pid = host.link.pid
        assert host_pid is not None
        async with trio.open_nursery() as nursery:
            nursery.start_soon(_execute, host, "b1", "Bash", {"command": TREE}, results)

            def ready() -> bool:
                procs = [p for p in marked_processes(marked.mark) if p.pid != host_pid]
                lines = {command_line(p): p for p in procs}
                term_ignoring = lines.get("sleep 66")
                return (len(procs) >= TREE_MEMBERS and SLEEPS <= set(lines)
                        and any(line.endswith(TREE) for line in lines)  # the root
                        and term_ignoring is not None and _ignores_term(term_ignoring))

            await wait_until(ready, 10)
            members = [p for p in marked_processes(marked.mark) if p.pid != host_pid]
            by_line = {command_line(p): p for p in members}
            for orphan in ("sleep 63", "sleep 64"):  # their parent exited: adopted
                assert by_line[orphan].ppid() == host_pid, orphan
            sent = time.monotonic()
            state = await host.abort("b1", "Bash")
            assert state.found and state.body_invoked
        elapsed = time.monotonic() - sent
        result = results["b1"]
        assert result.code == "ABORTED" and result.body_invoked
        assert "started" in str(result.content)
        assert result.details["processesKilled"] >= TREE_MEMBERS
        assert result.details["killedAfterGrace"] >= 1  # the TERM-ignoring member
        assert result.details["survivors"] == []
        assert GRACE <= elapsed < GRACE + 3.0, elapsed
        assert [p for p in members if p.is_running()
                and p.status() != psutil.STATUS_ZOMBIE] == []
        # Everything reaped, orphans included, before the result: not even a zombie.
        assert psutil.Process(host_pid).children(recursive=True) == []


def _large_tree(root: pathlib.Path) -> None:
    # A thousand files whose lines make the regex below backtrack (some ms a line): a
    # walk of many seconds, made in well under one.
    line = "a" * 18 + "\n"
    for d in range(20):
        folder = root / "tree" / f"d{d}"
        folder.mkdir(parents=True)
        for f in range(50):
            (folder / f"f{f}.txt").write_text(line * 3)
    os.mkfifo(root / "tree" / "d7" / "fifo")  # nobody ever writes it


def _cpu(pid: int) -> float:
    times = psutil.Process(pid).cpu_times()
    return float(times.user + times.system)


async def test_grep_over_a_large_tree_with_a_fifo_stops_at_once(tmp_path: pathlib.Path,
                                                                marked: Marked) -> None:
    _large_tree(tmp_path)
    results: dict[str, ToolResult] = {}
    # An rg that runs for ever on the pattern of the stopped call (the real one is fast).
    slow = tmp_path / "slow-rg"
    pidfile = tmp_path / "rg.pid"
    slow.write_text(f'#!/bin/sh\ncase "$*" in *zzz*) exec {ripgrep.rg_binary()} "$@";; esac\n'
                    f"echo $$ > {pidfile}\nexec sleep 30\n")
    slow.chmod(0o755)
    env = marked.env(QUIESCE_RG=str(slow))
    async with running_host(str(tmp_path / "tree"), env, config=FAST) as host:
        host_pid = host.link.pid
        assert host_pid is not None
        with trio.fail_after(10):  # the FIFO is skipped, not opened for a read that blocks
            done = await host.execute("g0", "Grep", {"pattern": "zzz"})
        assert done.code is None and done.details["matches"] == 0
        async with trio.open_nursery() as nursery:
            nursery.start_soon(_execute, host, "g1", "Grep", {"pattern": "(a|aa)*c"}, results)
            with trio.fail_after(10):  # its body runs: the host says so
                while not any(c.call_id == "g1" and c.state == "running"
                              for c in (await host.stats()).calls):
                    await trio.sleep(0.01)
            await wait_until(lambda: pidfile.exists() and pidfile.read_text().strip(), 10)
            sent = time.monotonic()
            state = await host.abort("g1", "Grep")
            assert state.found and state.state == "running"
        elapsed = time.monotonic() - sent
        result = results["g1"]
        assert result.code == "ABORTED" and result.details.get("discarded") is True
        assert elapsed < 2.0, elapsed  # a scan takes far longer; slack for a loaded machine
        # Its rg is killed at once, and the host goes idle.
        await wait_until(lambda: not psutil.pid_exists(int(pidfile.read_text())), 2)
        await trio.sleep(0.2)
        before = _cpu(host_pid)
        await trio.sleep(1.0)
        assert _cpu(host_pid) - before < 0.1  # a worker still scanning: 0.3-1.0 s


def _backends(marked: Marked) -> list[psutil.Process]:
    return [p for p in marked_processes(marked.mark) if "host.imaging.render" in command_line(p)]


async def test_generate_images_stop_returns_what_was_written(tmp_path: pathlib.Path,
                                                             marked: Marked) -> None:
    results: dict[str, ToolResult] = {}
    env = marked.env(QUIESCE_IMAGE_DELAY_MS="300")
    async with running_host(str(tmp_path), env, config=FAST) as host:
        host_pid = host.link.pid
        assert host_pid is not None
        async with trio.open_nursery() as nursery:
            nursery.start_soon(_execute, host, "i1", "GenerateImages",
                               {"prompt": "a slow lighthouse", "count": 8, "size": "32x32"},
                               results)
            await wait_until(lambda: "wrote " in host.output_text("i1"), 15)
            assert _backends(marked), "the backend should still be rendering"
            await host.abort("i1", "GenerateImages")
        result = results["i1"]
        assert result.code == "ABORTED" and result.body_invoked
        written = result.details["written"]
        assert 1 <= len(written) < 8
        assert [c.path for c in result.content if isinstance(c, ImageContent)] == written
        assert all((tmp_path / path).is_file() for path in written)
        assert not list(tmp_path.rglob(".*.tmp"))
        assert _backends(marked) == []
        assert psutil.Process(host_pid).children(recursive=True) == []


async def test_a_stop_sends_each_member_one_term(tmp_path: pathlib.Path,
                                                 marked: Marked) -> None:
    """The tree is sent TERM as the stop arrives and the stop's kill goes on from there:
    a member that traps TERM runs its trap once, not once for each (then KILL, past the
    grace)."""
    traps = tmp_path / "traps"
    command = (f"trap 'echo trapped >> {traps}' TERM; echo up; "
               "while :; do sleep 0.01; done")
    results: dict[str, ToolResult] = {}
    async with running_host(str(tmp_path), marked.env(), config=FAST) as host:
        with trio.fail_after(20):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(_execute, host, "b1", "Bash", {"command": command},
                                   results)
                await wait_until(lambda: any(command_line(p).endswith("sleep 0.01")
                                             for p in marked_processes(marked.mark)), 10)
                await host.abort("b1", "Bash")
    result = results["b1"]
    assert result.code == "ABORTED" and result.details["survivors"] == []
    assert traps.read_text() == "trapped\n"
