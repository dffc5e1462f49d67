"""What the load test samples of the daemon and its host while it runs: RSS, descriptors
and CPU time (psutil) and, through the daemon's ops socket, the host's tombstones and calls
in flight."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from typing import Any

import psutil
import trio

from benchlib.harness import Bench
from benchlib.load_records import LoadResult, MemSample
from protocol.errors import RemoteError
from runtime.clients.ops.client import OpsClient, connect
from runtime.link import ConnectionClosed

MB = 1024 * 1024


def _proc_figures(pid: int | None) -> tuple[float | None, int | None, float | None]:
    """RSS (MB), open descriptors and CPU time (user + system, s) of ``pid``."""
    if pid is None:
        return None, None, None
    try:
        proc = psutil.Process(pid)
        with proc.oneshot():
            cpu = proc.cpu_times()
            return proc.memory_info().rss / MB, proc.num_fds(), cpu.user + cpu.system
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return None, None, None


def current_host_pid(bench: Bench) -> int | None:
    """The daemon's one child process (the host), as psutil sees it now."""
    try:
        children = psutil.Process(bench.daemon.process.pid).children()
    except psutil.NoSuchProcess:
        return None
    return children[0].pid if len(children) == 1 else None


class Sampler:
    """RSS, descriptors and CPU time of daemon and host (psutil); the host's tombstones
    and calls in flight through the daemon's ``ops.stats``."""

    def __init__(self, bench: Bench, ops: OpsClient | None) -> None:
        self.bench = bench
        self.ops = ops
        self.started = time.monotonic()
        self.lock = trio.Lock()

    async def sample(self, stops: int) -> MemSample:
        async with self.lock:
            bench = self.bench

            def figures() -> tuple[Any, ...]:
                host = current_host_pid(bench)
                d_rss, d_fds, d_cpu = _proc_figures(bench.daemon.process.pid)
                h_rss, h_fds, h_cpu = _proc_figures(host)
                return host, d_rss, d_fds, d_cpu, h_rss, h_fds, h_cpu, len(bench.members())

            (host, d_rss, d_fds, d_cpu, h_rss, h_fds, h_cpu,
             live) = await trio.to_thread.run_sync(figures)
            tombstones = in_flight = None
            if self.ops is not None:
                stats = await self.ops.stats()
                tombstones, in_flight = stats.tombstones, stats.calls_in_flight
            return MemSample(stops, round(time.monotonic() - self.started, 2), d_rss, h_rss,
                             d_fds, h_fds, d_cpu, h_cpu, host, live, tombstones, in_flight)


@asynccontextmanager
async def open_ops(bench: Bench, result: LoadResult) -> AsyncIterator[OpsClient | None]:
    """The daemon's ops socket (from ``initialize``), or ``None`` with the reason noted."""
    ops_info = bench.capabilities.get("ops")
    socket = ops_info.get("socket") if isinstance(ops_info, dict) else None
    if not isinstance(socket, str):
        result.ops_note = ("the daemon's `initialize` answer names no ops socket: host "
                           "tombstones not measured")
        yield None
        return
    result.ops_socket = socket
    stack = AsyncExitStack()
    try:
        client = await stack.enter_async_context(connect(socket))
        await client.stats()
    except (OSError, ConnectionClosed, RemoteError) as exc:
        await stack.aclose()
        result.ops_note = f"the ops socket {socket} did not answer `ops.stats` ({exc})"
        yield None
        return
    async with stack:
        result.ops_note = "host tombstones and calls in flight read with `ops.stats`"
        yield client
