"""Per-call resource limits (issue 31), against a real host: configured in its settings
(``[host.limits]`` of the daemon's file), enforced the strongest way the host has, said by
``host.stats``, named in the result of a call that failed under them, and a stop is the
same as without them."""

from __future__ import annotations

import os
import pathlib
import sys
import time

import trio

from host import limits
from protocol.tools import ToolResult
from runtime.proc import cgroups
from tests.conftest import Marked
from tests.kit.host import running_host

LIMITED = {"tools": {"kill_grace": 0.5}, "limits": {"max_memory_mb": 256,
                                                    "max_processes": 64}}
ALLOCATE = f"{sys.executable} -c 'bytearray({{mib}} << 20); print(\"allocated\")'"


def _controllers() -> set[str]:
    own = cgroups.own_cgroup_dir()
    try:
        with open(os.path.join(own or "/nonexistent", "cgroup.controllers")) as f:
            return set(f.read().split())
    except OSError:
        return set()


async def test_a_call_over_its_memory_limit_fails_naming_it(tmp_path: pathlib.Path,
                                                            marked: Marked) -> None:
    async with running_host(str(tmp_path), marked.env(), config=LIMITED) as host:
        stats = await host.stats()
        memory = stats.call_limits["memory"]
        if "memory" in _controllers():
            assert memory == "256 MiB per call (memory.max)"
        else:  # no memory controller delegated (as on the machines this was written on)
            assert memory == "256 MiB per process (RLIMIT_DATA)"
        processes = stats.call_limits["processes"]
        assert processes == ("64 processes per call (pids.max)" if "pids" in _controllers()
                             else "not enforced" if os.geteuid() == 0
                             else "64 processes per user (RLIMIT_NPROC)")
        with trio.fail_after(30):
            small = await host.execute("b1", "Bash", {"command": ALLOCATE.format(mib=64)})
            large = await host.execute("b2", "Bash", {"command": ALLOCATE.format(mib=600)})
        assert small.code is None and "allocated" in str(small.content), small
        text = str(large.content)
        assert "allocated" not in text, text
        assert "256 MiB" in text and ("RLIMIT_DATA" in text or "memory.max" in text), text

        # A stop is what it was: the tree is killed, the result is ABORTED at once.
        async with trio.open_nursery() as nursery:
            results: dict[str, ToolResult] = {}

            async def run() -> None:
                results["b3"] = await host.execute("b3", "Bash",
                                                   {"command": "echo up; sleep 60"})

            nursery.start_soon(run)
            with trio.fail_after(10):
                while "up" not in host.output_text("b3"):
                    await trio.sleep(0.02)
            sent = time.monotonic()
            await host.abort("b3", "Bash")
        assert results["b3"].code == "ABORTED"
        assert time.monotonic() - sent < 5
        assert results["b3"].details["survivors"] == []


async def test_limits_of_zero_are_none(tmp_path: pathlib.Path, marked: Marked) -> None:
    config = {"limits": {"max_memory_mb": 0, "max_processes": 0}}
    async with running_host(str(tmp_path), marked.env(), config=config) as host:
        stats = await host.stats()
        assert stats.call_limits == {"processes": "not enforced", "memory": "not enforced"}
        with trio.fail_after(30):
            large = await host.execute("b1", "Bash", {"command": ALLOCATE.format(mib=600)})
        assert large.code is None and "allocated" in str(large.content), large


def test_the_cgroup_path_on_a_host_with_delegated_controllers(tmp_path: pathlib.Path) -> None:
    """Where the host's directory has the ``pids`` and ``memory`` controllers (not on the
    machines this was written on: their v2 hierarchy has none), they are enabled for the
    calls' cgroups, each call's cgroup gets its limits, and a hit is read from the
    kernel's counts. A directory laid out as cgroupfs shows it (the kernel's own
    enforcement is not exercised here)."""
    host_dir = tmp_path / "quiesce-host-1"
    call = host_dir / "call-1"
    call.mkdir(parents=True)
    (host_dir / "cgroup.controllers").write_text("cpu memory pids\n")
    (host_dir / "cgroup.subtree_control").write_text("")
    for name in ("pids.max", "memory.max", "memory.swap.max"):
        (call / name).write_text("max\n")
    before = limits.enforcement()
    try:
        enforced = limits.setup(limits.CallLimits(max_processes=64, max_memory_mb=256),
                                str(host_dir))
        assert enforced.describe() == {"processes": "64 processes per call (pids.max)",
                                       "memory": "256 MiB per call (memory.max)"}
        assert (host_dir / "cgroup.subtree_control").read_text() == "+pids"  # the last write
        limits.apply_to_cgroup(str(call))
        assert (call / "pids.max").read_text() == "64"
        assert (call / "memory.max").read_text() == str(256 << 20)
        assert (call / "memory.swap.max").read_text() == "0"
        assert limits.wrap(["bash", "-c", "x"], "/") == ["bash", "-c", "x"]  # no rlimits
        (call / "pids.events").write_text("max 0\n")
        (call / "memory.events").write_text("low 0\nhigh 0\nmax 3\noom 1\noom_kill 0\n")
        assert limits.hit(str(call)) is None
        (call / "pids.events").write_text("max 2\n")
        assert "process limit (64 per call, pids.max)" in (limits.hit(str(call)) or "")
        (call / "memory.events").write_text("max 3\noom 1\noom_kill 1\n")
        assert "memory limit (256 MiB per call, memory.max)" in (limits.hit(str(call)) or "")
    finally:
        limits._active[0] = before
