"""Round trip, throughput and start-up, side by side with the floor and the peer.

quiesce's side is the runtime's own link to a host: ``runtime.supervision.link.HostLink``
spawns ``python -m host`` (default config, as ``quiesce serve`` does) and this process
plays the runtime, sending ``tools.execute`` for a ``Read`` of a 1-byte file in a
session with permission mode ``auto``. The floor is a raw pipe echo between two Python
processes (``pipe_floor.py``); the peer is the official MCP Python SDK over stdio
with a tool reading the same file (``mcp_peer.py``, its own asyncio process). Start-up
is a whole ``quiesce serve`` (runtime, then its host) spawned until ``initialize`` is
answered, beside the MCP server's spawn and handshake.
"""

from __future__ import annotations

import importlib.util
import itertools
import json
import os
import pathlib
import sys
from dataclasses import dataclass, field
from typing import Any

import psutil
import trio

from benchlib.cputime import cpu_seconds
from benchlib.harness import now_ms
from benchlib.stats import Goal, Series
from protocol.messages.client import (
    DebugRunToolParams,
    DebugRunToolResult,
    ScriptedProviderConfig,
    SessionNewParams,
    SessionNewResult,
)
from protocol.messages.common import Empty
from protocol.messages.host import SessionOpenParams, ToolsExecuteParams
from protocol.tools import ToolResult
from runtime.clients.daemon_client import spawn_daemon
from runtime.supervision.link import HostLink

HERE = pathlib.Path(__file__).resolve().parent
IN_FLIGHT = 64
FLOOD_SESSIONS = 4
"""The host admits 32 calls per session and 32 read-only calls at once (its defaults):
64 calls in flight over 4 sessions keep 32 running and 32 queued in admission."""
PEER_TIMEOUT = 300.0


@dataclass
class LinkPlan:
    """How much of each row to measure (quick mode measures less)."""

    calls: int
    warmup: int
    flood_calls: int
    rounds: int
    startups: int


def plan(quick: bool, repeat: int) -> LinkPlan:
    if quick:
        return LinkPlan(calls=100, warmup=20, flood_calls=640, rounds=1, startups=1)
    return LinkPlan(calls=100 * repeat, warmup=100, flood_calls=5000, rounds=5,
                    startups=max(5, repeat // 2))


@dataclass
class LinkResults:
    series: list[Series] = field(default_factory=list)

    def add(self, series: Series) -> Series:
        self.series.append(series)
        return series


async def _run_json(argv: list[str], cwd: pathlib.Path) -> Any:
    done = await trio.run_process(argv, cwd=cwd, capture_stdout=True, capture_stderr=True,
                                  check=False)
    if done.returncode != 0:
        raise RuntimeError(f"{pathlib.Path(argv[1]).name} exited {done.returncode}: "
                           f"{done.stderr.decode(errors='replace')[-2000:]}")
    return json.loads(done.stdout)


async def pipe_floors(p: LinkPlan, out: LinkResults, workdir: pathlib.Path) -> None:
    for mode, title in (("raw", "floor: raw pipe echo between two Python processes "
                                "(`os.write`/`os.read`, 200 bytes)"),
                        ("epoll", "floor (diagnostic): the same echo, each side waiting in "
                                  "`epoll` before `os.read`")):
        samples = await _run_json([sys.executable, str(HERE / "pipe_floor.py"),
                                   str(p.calls * 4), str(p.warmup), "200", mode], workdir)
        out.add(Series(f"floor-pipe-{mode}", title, samples))


def _workspace(workdir: pathlib.Path) -> pathlib.Path:
    ws = workdir / "ws-link"
    ws.mkdir(exist_ok=True)
    (ws / "one").write_bytes(b"x")
    return ws


async def quiesce_link(p: LinkPlan, out: LinkResults, workdir: pathlib.Path,
                       env: dict[str, str]) -> None:
    ws = _workspace(workdir)
    ids = itertools.count()
    link = HostLink(env=env)
    async with trio.open_nursery() as nursery:
        await link.start(nursery)
        try:
            for s in range(FLOOD_SESSIONS):
                await link.request("session.open", SessionOpenParams(f"s{s}", str(ws), "auto"))

            async def read(session: str) -> ToolResult:
                result: ToolResult = await link.request("tools.execute", ToolsExecuteParams(
                    session, f"c{next(ids)}", "Read", {"path": "one"}))
                return result

            first = await read("s0")
            text = "".join(getattr(c, "text", "") for c in first.content)
            if first.is_error or "\tx" not in text:
                raise RuntimeError(f"the host's Read failed: {first}")
            stats = out.add(Series("link-host-stats", "quiesce: `host.stats` round trip "
                                   "(runtime link, no tool)"))
            rtt = out.add(Series("rtt-quiesce", "quiesce: tool call round trip (`Read` of a "
                                 "1-byte file, runtime -> host -> runtime)"))
            for i in range(p.warmup + p.calls):
                start = now_ms()
                await link.request("host.stats", Empty())
                mid = now_ms()
                await read("s0")
                end = now_ms()
                if i >= p.warmup:
                    stats.samples.append(mid - start)
                    rtt.samples.append(end - mid)
            flood = out.add(Series("throughput-quiesce", f"quiesce: calls/s with {IN_FLIGHT} "
                                   f"`Read` calls in flight over {FLOOD_SESSIONS} sessions",
                                   unit="calls/s"))
            bare = out.add(Series("throughput-host-stats", f"quiesce: `host.stats` requests/s "
                                  f"with {IN_FLIGHT} in flight (the same link, no tool)",
                                  unit="calls/s"))

            async def stats_call(session: str) -> object:
                return await link.request("host.stats", Empty())

            host, me = psutil.Process(link.pid), psutil.Process()
            for r in range(p.rounds + 1):  # the first round warms up
                for series, call in ((flood, read), (bare, stats_call)):
                    cpu = _cpu(host), _cpu(me)
                    rate = await _flood(call, p.flood_calls)
                    if r:
                        series.samples.append(rate)
                        series.add_extra("hostCpuUs",
                                         (_cpu(host) - cpu[0]) / p.flood_calls * 1e6)
                        series.add_extra("runtimeCpuUs",
                                         (_cpu(me) - cpu[1]) / p.flood_calls * 1e6)
        finally:
            await link.stop()
            nursery.cancel_scope.cancel()


def _cpu(process: psutil.Process) -> float:
    """Seconds of CPU (user + system, every thread) ``process`` has used, to the ns."""
    return cpu_seconds(process)


async def _flood(read: Any, total: int) -> float:
    sent = 0

    async def worker(w: int) -> None:
        nonlocal sent
        while sent < total:
            sent += 1
            await read(f"s{w % FLOOD_SESSIONS}")

    start = now_ms()
    async with trio.open_nursery() as nursery:
        for w in range(IN_FLIGHT):
            nursery.start_soon(worker, w)
    return total / ((now_ms() - start) / 1000)


async def client_link(p: LinkPlan, out: LinkResults, workdir: pathlib.Path,
                      env: dict[str, str]) -> None:
    """Through the client link of a whole ``quiesce serve``: ``debug.runTool`` of the same
    ``Read`` (client -> runtime -> host and back) and ``session.list``, each with
    ``IN_FLIGHT`` requests in flight, with the CPU the daemon and its host spend a call."""
    ws = _workspace(workdir)
    data = workdir / "data-client-link"
    data.mkdir()
    log = os.open(workdir / "client-link.log", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    try:
        async with spawn_daemon(env={**env, "QUIESCE_DATA_DIR": str(data)},
                                stderr=log) as daemon:
            info = await daemon.initialize()
            host_info = info.capabilities.get("host")
            assert isinstance(host_info, dict)
            sessions = []
            for _ in range(FLOOD_SESSIONS):
                made: SessionNewResult = await daemon.request("session.new", SessionNewParams(
                    str(ws), "auto", ScriptedProviderConfig(script=[])))
                sessions.append(made.session_id)
            served = itertools.count()

            async def run_tool(session: str) -> object:
                done: DebugRunToolResult = await daemon.request(
                    "debug.runTool", DebugRunToolParams(
                        sessions[next(served) % FLOOD_SESSIONS], "Read", {"path": "one"}))
                return done

            async def listing(session: str) -> object:
                return await daemon.request("session.list", Empty())

            first = await run_tool("")
            assert isinstance(first, DebugRunToolResult)
            if first.result.is_error:
                raise RuntimeError(f"debug.runTool Read failed: {first.result}")
            rows = (
                (out.add(Series("throughput-runtool", f"quiesce: `debug.runTool` `Read` calls/s "
                                f"with {IN_FLIGHT} in flight (client -> runtime -> host)",
                                unit="calls/s")), run_tool),
                (out.add(Series("throughput-session-list", f"quiesce: `session.list` "
                                f"requests/s with {IN_FLIGHT} in flight (client link)",
                                unit="calls/s")), listing))
            daemon_proc = psutil.Process(daemon.process.pid)
            host_proc = psutil.Process(int(host_info["pid"]))
            for r in range(p.rounds + 1):  # the first round warms up
                for series, call in rows:
                    cpu = _cpu(daemon_proc), _cpu(host_proc)
                    rate = await _flood(call, p.flood_calls)
                    if r:
                        series.samples.append(rate)
                        series.add_extra("runtimeCpuUs",
                                         (_cpu(daemon_proc) - cpu[0]) / p.flood_calls * 1e6)
                        series.add_extra("hostCpuUs",
                                         (_cpu(host_proc) - cpu[1]) / p.flood_calls * 1e6)
    finally:
        os.close(log)


async def mcp_peer(p: LinkPlan, out: LinkResults, workdir: pathlib.Path) -> None:
    ws = _workspace(workdir)
    spec = {"workspace": str(ws), "file": "one", "startups": p.startups, "warmup": p.warmup,
            "calls": p.calls, "rounds": p.rounds, "floodCalls": p.flood_calls // 4,
            "inFlight": IN_FLIGHT}
    with trio.fail_after(PEER_TIMEOUT):
        data = await _run_json([sys.executable, str(HERE / "mcp_peer.py"), "client",
                                json.dumps(spec)], workdir)
    if data.get("content") != "x":
        raise RuntimeError(f"the MCP read returned {data.get('content')!r}")
    out.add(Series("rtt-mcp", "peer: the MCP Python SDK's tool call round trip (stdio, "
                   "`read` of the same file)", data["rttMs"]))
    out.add(Series("throughput-mcp", f"peer: the MCP SDK's calls/s with {IN_FLIGHT} calls in "
                   "flight (one session)", data["throughput"], unit="calls/s"))
    out.add(Series("startup-mcp", "peer: the MCP SDK server spawned until `initialize` is "
                   "answered", data["startupMs"]))


IMPORTS = (("startup-python", "start-up part: a bare `python -c pass`", "pass"),
           ("startup-import-trio", "start-up part: `python` importing trio alone",
            "import trio"),
           ("startup-import-libraries", "start-up part: `python` importing the libraries "
            "the host needs before its handshake (trio, msgspec, psutil)",
            "import trio, msgspec, psutil"),
           ("startup-import-runtime", "start-up part: `python` importing the runtime "
            "(`runtime.cli`, `runtime.daemon.daemon`)",
            "import runtime.cli, runtime.daemon.daemon"),
           ("startup-import-host", "start-up part: `python` importing the host (`host.main`)",
            "import host.main"),
           ("startup-import-jsonrpcserver", "start-up part: `python` importing jsonrpcserver "
            "as both processes load it (`runtime/link/jsonrpcserver_load.py` run alone: "
            "three submodules, the package `__init__` skipped)", None),
           ("startup-import-jsonrpcserver-whole", "start-up part: `python` importing the whole "
            "jsonrpcserver package (how it was loaded before: asyncio, jsonschema)",
            "import jsonrpcserver"))
LOADER = HERE.parent.parent / "runtime" / "link" / "jsonrpcserver_load.py"


async def startup_parts(p: LinkPlan, out: LinkResults, workdir: pathlib.Path,
                        env: dict[str, str]) -> None:
    """What start-up is made of: the interpreter, and each process's imports (spawned
    until exit, interleaved)."""
    parts = [out.add(Series(key, title)) for key, title, _ in IMPORTS]
    host = next(s for s in parts if s.key == "startup-import-host")
    host.notes.append(f"the project's own modules byte-compiled: {_compiled()}")
    for _ in range(p.startups):
        for series, (_, _, code) in zip(parts, IMPORTS, strict=True):
            argv = [sys.executable, str(LOADER)] if code is None else [sys.executable, "-c", code]
            start = now_ms()
            await trio.run_process(argv, env=env, cwd=workdir)
            series.samples.append(now_ms() - start)


def _compiled() -> str:
    """Whether every module of runtime/, host/ and protocol/ has a current cached bytecode
    file (``scripts/bootstrap`` writes them; else each start compiles from source)."""
    root = HERE.parent.parent
    sources = [f for d in ("runtime", "host", "protocol") for f in (root / d).rglob("*.py")]
    stale = [f for f in sources
             if not (pyc := pathlib.Path(importlib.util.cache_from_source(str(f)))).exists()
             or pyc.stat().st_mtime < f.stat().st_mtime]
    return "yes" if not stale else f"no ({len(stale)} of {len(sources)} modules are not)"


async def quiesce_startup(p: LinkPlan, out: LinkResults, workdir: pathlib.Path,
                          env: dict[str, str]) -> None:
    series = out.add(Series("startup-quiesce", "quiesce: `quiesce serve` spawned until "
                            "`initialize` is answered, host ready",
                            goal=Goal(250.0, "< 250 ms and < half the peer's")))
    log = os.open(workdir / "startup.log", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    try:
        for i in range(p.startups):
            data = workdir / f"data-startup-{i}"
            data.mkdir()
            start = now_ms()
            async with spawn_daemon(env={**env, "QUIESCE_DATA_DIR": str(data)},
                                    stderr=log) as daemon:
                info = await daemon.initialize()
                elapsed = now_ms() - start
                host = info.capabilities.get("host")
                if not isinstance(host, dict) or not host.get("pid") or not host.get("tools"):
                    series.anomalies.append(f"rep {i}: initialize answered without a ready "
                                            f"host: {host}")
            series.samples.append(elapsed)
    finally:
        os.close(log)
