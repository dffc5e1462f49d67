"""The floors the stop rows are measured against: a bare client round trip, a host tool
round trip, completed turns (no-op, Bash ``true``, sandboxed or not), one process-table
scan and one append + fsync (a scenario takes a :class:`~benchlib.harness.Bench` and a
repetition count and returns a :class:`~benchlib.stats.Series`)."""

from __future__ import annotations

import os
from typing import Any

import psutil
import trio
import trio.lowlevel

from benchlib.harness import Bench, now_ms
from benchlib.stats import Series
from protocol.messages.common import Empty


async def floor_session_list(bench: Bench, n: int, warmup: int) -> Series:
    series = Series("floor-session-list", "floor: `session.list` round trip (client link)")
    for i in range(warmup + n):
        rtt, _ = await bench.timed("session.list", Empty())
        if i >= warmup:
            series.samples.append(rtt)
    return series


async def floor_host_tool(bench: Bench, n: int, warmup: int) -> Series:
    """``debug.runTool`` Read of a one-line file: client -> runtime -> host and back."""
    from protocol.messages.client import DebugRunToolParams

    series = Series("floor-host-tool",
                    "floor: host tool round trip (`debug.runTool` Read of a 6-byte file)")
    workspace = bench.workdir / "ws-floor-tool"
    workspace.mkdir()
    (workspace / "tiny.txt").write_text("hello\n")
    session = await bench.new_session(workspace, [])
    for i in range(warmup + n):
        rtt, result = await bench.timed("debug.runTool", DebugRunToolParams(
            session.session_id, "Read", {"path": "tiny.txt"}))
        if result.result.is_error:
            series.anomalies.append(f"rep {i}: Read failed: {result.result.code}")
        if i >= warmup:
            series.samples.append(rtt)
    return series


async def floor_noop_turn(bench: Bench, n: int, warmup: int) -> Series:
    """A completed turn with no tool call (its ``turn/end`` is fsynced, as a stop's is)."""
    series = Series("floor-noop-turn", "floor: completed no-op turn (`agent.prompt`, "
                    "one text chunk)")
    workspace = bench.workdir / "ws-noop"
    workspace.mkdir()
    session = await bench.new_session(workspace, [[{"text": "ok"}]] * (warmup + n))
    for i in range(warmup + n):
        start = now_ms()
        result = await bench.prompt(session, f"noop {i}")
        rtt = now_ms() - start
        if result.stop_reason != "end_turn":
            series.anomalies.append(f"rep {i}: stop reason {result.stop_reason!r}")
        if i >= warmup:
            series.samples.append(rtt)
    return series


async def floor_bash_turn(bench: Bench, n: int, warmup: int,
                          sandbox: str | None = None) -> Series:
    """A completed turn running Bash ``true``: spawn, exit, tree check, reap, two steps
    (``sandbox``: in a session narrowed to that sandbox mode)."""
    series = (Series("floor-bash-turn", "floor: completed turn running Bash `true` "
                     "(two steps)") if sandbox is None else
              Series("floor-bash-turn-sandboxed", "floor: completed turn running Bash "
                     f"`true` (two steps), sandboxed ({sandbox}: forked, Landlock)"))
    workspace = bench.workdir / ("ws-bash-true" + ("-sandboxed" if sandbox else ""))
    workspace.mkdir()
    script: list[list[dict[str, Any]]] = []
    for i in range(warmup + n):
        script += [[{"toolCall": {"id": f"t{i}", "name": "Bash", "args": {"command": "true"}}}],
                   [{"text": "ok"}]]
    session = await bench.new_session(workspace, script, sandbox=sandbox)
    for i in range(warmup + n):
        start = now_ms()
        result = await bench.prompt(session, f"true {i}")
        rtt = now_ms() - start
        if result.stop_reason != "end_turn":
            series.anomalies.append(f"rep {i}: stop reason {result.stop_reason!r}")
        if i >= warmup:
            series.samples.append(rtt)
    return series


def _scan_process_table() -> int:
    """What one listing of a tree costs the host: every process, and its environment."""
    count = 0
    for proc in psutil.process_iter(["pid"]):
        try:
            proc.environ().get("QUIESCE_HOST_CALL")
            proc.status()
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            pass
        count += 1
    return count


async def floor_process_scan(bench: Bench, n: int, warmup: int) -> Series:
    series = Series("floor-process-scan", "floor: one process-table scan with environments "
                    "(psutil, in the bench process)")
    sizes: list[int] = []
    for i in range(warmup + n):
        start = now_ms()
        sizes.append(_scan_process_table())
        elapsed = now_ms() - start
        if i >= warmup:
            series.samples.append(elapsed)
        await trio.lowlevel.checkpoint()
    seen = f"{min(sizes)}" if min(sizes) == max(sizes) else f"{min(sizes)} to {max(sizes)}"
    series.notes.append(f"{seen} processes on the machine during the scans")
    return series


async def floor_fsync(bench: Bench, n: int, warmup: int) -> Series:
    """Append a line to a file in the data directory's file system and fsync it (as the
    session log does for ``turn/end``), in the bench process."""
    series = Series("floor-fsync", "floor: append one line and fsync, same file system as the "
                    "session logs (in the bench process)")
    path = bench.workdir / "data" / "fsync-floor.jsonl"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    try:
        for i in range(warmup + n):
            start = now_ms()
            os.write(fd, b'{"kind":"turn/end","seq":%d}\n' % i)
            os.fsync(fd)
            elapsed = now_ms() - start
            if i >= warmup:
                series.samples.append(elapsed)
            await trio.lowlevel.checkpoint()
    finally:
        os.close(fd)
    return series


async def floor_bash_turn_sandboxed(bench: Bench, n: int, warmup: int) -> Series:
    return await floor_bash_turn(bench, n, warmup, sandbox="workspace-write")
