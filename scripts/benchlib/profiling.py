"""``scripts/bench --profile SCENARIO``: where each process's time per call goes.

The processes under test (the host, and the daemon for the client-link scenarios) are
started with ``profhook/`` on ``PYTHONPATH``: its ``sitecustomize`` profiles a process's
main thread with cProfile between SIGUSR1 and SIGUSR2, so the window is the flood alone
(no start-up, no shutdown). The bench process, which plays the runtime in
``read-throughput``, profiles itself over the same window. Each process's functions are
grouped into stages (by module: trio's scheduler, the link's endpoint, msgspec, the
host's call lifecycle, ...) and each stage's own time (cProfile's ``tottime``) is divided
by the calls of the window: µs per call per stage. The profile's clock is the
thread's CPU time (a wait in epoll or for the GIL is not work). cProfile slows what it measures
(about 2x here), so each process is also measured unprofiled over the same flood (CPU of
all its threads, psutil), and the stages are scaled to that: the shares are cProfile's,
the total is the real one. Worker threads (the `Read` body, trio's thread cache) are
not in cProfile's view: their time is the part of the unprofiled CPU the main thread
does not account for, reported as "other threads".
"""

from __future__ import annotations

import itertools
import os
import pathlib
import pstats
import signal
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import psutil
import trio

from benchlib.cputime import cpu_seconds
from benchlib.harness import now_ms
from benchlib.stats import Series
from protocol.messages.client import (
    DebugRunToolParams,
    ScriptedProviderConfig,
    SessionNewParams,
    SessionNewResult,
)
from protocol.messages.common import Empty
from protocol.messages.host import SessionOpenParams, ToolsExecuteParams
from runtime.clients.daemon_client import spawn_daemon
from runtime.supervision.link import HostLink

HOOK = pathlib.Path(__file__).resolve().parent / "profhook"
IN_FLIGHT = 64
SESSIONS = 4
SCENARIOS = ("read-throughput", "client-read", "session-list")

# (stage, predicate on "file:function"), first match wins; the order matters.
STAGES: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("thread hop (trio.to_thread, threading, queue)",
     ("trio/_threads", "_thread_cache", "threading.py", "queue.py", "_thread.lock",
      "_thread.start_new", "SimpleQueue")),
    ("Read body and path confinement", ("host/tools/read", "host/workspace", "host/fsnames",
                                        "posix.", "io.open", "_io.", "codecs")),
    ("host call lifecycle (registration, permission, admission, result)",
     ("host/execution", "host/calls", "host/manager", "host/admission", "host/permissions",
      "host/tombstones", "host/server", "host/sessions", "host/tools/context",
      "contextlib", "dataclasses", "<string>:__init__", "protocol/tools")),
    ("jsonrpcserver and oslash", ("jsonrpcserver", "oslash")),
    ("link endpoint and dispatch (runtime/link)", ("runtime/link/",)),
    ("JSON codec and framing (msgspec, protocol/)", ("msgspec", "protocol/")),
    ("runtime daemon handlers", ("runtime/daemon/", "runtime/supervision/")),
    ("bench driver", ("benchlib/",)),
    ("trio scheduler, epoll, streams, channels", ("trio/", "select.epoll", "outcome/",
                                                  "contextvars", "sniffio", "attr")),
    ("logging", ("logging/",)),
)
OTHER = "other (interpreter built-ins, stdlib)"


def stage_of(key: str) -> str:
    for stage, needles in STAGES:
        if any(n in key for n in needles):
            return stage
    return OTHER


@dataclass
class ProcessProfile:
    name: str
    calls: int
    cpu_us: float
    """Unprofiled CPU per call, all threads (psutil)."""
    profiled_cpu_us: float
    """CPU per call while profiled, all threads."""
    stages: dict[str, float] = field(default_factory=dict)
    """Main thread's own time per call, per stage (µs, as cProfile measured it)."""
    top: list[tuple[str, float, float]] = field(default_factory=list)
    """(function, µs per call, calls per call) of the costliest functions."""

    @property
    def main_us(self) -> float:
        return sum(self.stages.values())

    def scaled(self) -> list[tuple[str, float]]:
        """Stages scaled to the unprofiled CPU: the main thread's shares of it, then
        what the other threads took (estimated from the profiled run's split)."""
        main_share = min(1.0, self.main_us / self.profiled_cpu_us) if self.profiled_cpu_us else 1
        main_real = self.cpu_us * main_share
        rows = [(stage, us / self.main_us * main_real if self.main_us else 0.0)
                for stage, us in sorted(self.stages.items(), key=lambda kv: -kv[1])]
        rows.append(("other threads (not profiled: reader threads, trio's thread cache)",
                     self.cpu_us - main_real))
        return rows


def _key(func: tuple[str, int, str]) -> str:
    file, _line, name = func
    return f"{file}:{name}"


def load(path: pathlib.Path, name: str, calls: int, cpu_us: float,
         profiled_cpu_us: float) -> ProcessProfile:
    stats = pstats.Stats(str(path))
    out = ProcessProfile(name, calls, cpu_us, profiled_cpu_us)
    by_stage: dict[str, float] = defaultdict(float)
    funcs = []
    for func, (_cc, nc, tt, _ct, _callers) in stats.stats.items():  # type: ignore[attr-defined]
        key = _key(func)
        by_stage[stage_of(key)] += tt
        funcs.append((key, tt, nc))
    out.stages = {s: t / calls * 1e6 for s, t in by_stage.items()}
    funcs.sort(key=lambda f: -f[1])
    out.top = [(_short(k), t / calls * 1e6, n / calls) for k, t, n in funcs[:15]]
    return out


ROOT = str(pathlib.Path(__file__).resolve().parents[2]) + "/"
STDLIB = os.path.dirname(os.__file__) + "/"


def _short(key: str) -> str:
    if "site-packages/" in key:
        return key.split("site-packages/", 1)[1]
    return key.replace(ROOT, "").replace(STDLIB, "").replace("~:", "")


def _cpu(process: psutil.Process) -> float:
    """Seconds of CPU (every thread) to the nanosecond: a quick flood can use less CPU
    than one of ``cpu_times()``'s 10 ms ticks, which then reads 0."""
    return cpu_seconds(process)


def _hook_env() -> tuple[dict[str, str], pathlib.Path]:
    out = pathlib.Path(tempfile.mkdtemp(prefix="quiesce-profile-"))
    path = os.pathsep.join(p for p in (str(HOOK), os.environ.get("PYTHONPATH", "")) if p)
    return {**os.environ, "PYTHONPATH": path, "QUIESCE_PROFILE_DIR": str(out)}, out


async def _flood(call: Callable[[int], Awaitable[Any]], total: int) -> float:
    """``total`` calls with ``IN_FLIGHT`` outstanding; calls per second."""
    sent = 0

    async def worker(w: int) -> None:
        nonlocal sent
        while sent < total:
            sent += 1
            await call(w)

    start = now_ms()
    async with trio.open_nursery() as nursery:
        for w in range(IN_FLIGHT):
            nursery.start_soon(worker, w)
    return total / ((now_ms() - start) / 1000)


@dataclass
class Window:
    """One flood measured twice: unprofiled (rate and CPU), then profiled."""

    rate: float = 0.0
    cpu: dict[int, float] = field(default_factory=dict)
    profiled_cpu: dict[int, float] = field(default_factory=dict)


async def _measure(pids: dict[str, int], call: Callable[[int], Awaitable[Any]], total: int,
                   profile_self: Any | None) -> Window:
    procs = {pid: psutil.Process(pid) for pid in pids.values()}
    w = Window()
    await _flood(call, total)  # warm-up
    before = {pid: _cpu(p) for pid, p in procs.items()}
    w.rate = await _flood(call, total)
    w.cpu = {pid: (_cpu(p) - before[pid]) / total * 1e6 for pid, p in procs.items()}
    for pid in pids.values():
        if pid != os.getpid():
            os.kill(pid, signal.SIGUSR1)
    await trio.sleep(0.2)  # the handlers run at the processes' next wake-up
    if profile_self is not None:
        profile_self.enable()
    before = {pid: _cpu(p) for pid, p in procs.items()}
    await _flood(call, total)
    w.profiled_cpu = {pid: (_cpu(p) - before[pid]) / total * 1e6 for pid, p in procs.items()}
    if profile_self is not None:
        profile_self.disable()
    for pid in pids.values():
        if pid != os.getpid():
            os.kill(pid, signal.SIGUSR2)
    await trio.sleep(0.5)
    return w


async def _wait_for(path: pathlib.Path) -> None:
    with trio.fail_after(20):
        while not os.path.exists(path):  # noqa: ASYNC110, ASYNC240 - another process writes it
            await trio.sleep(0.05)


async def profile_read_throughput(workdir: pathlib.Path, total: int
                                  ) -> tuple[float, list[ProcessProfile]]:
    """The bench plays the runtime (``HostLink``) against a profiled host: 64 ``Read``
    calls in flight over 4 sessions."""
    import cProfile

    env, out = _hook_env()
    ws = workdir / "ws-profile"
    ws.mkdir(exist_ok=True)
    (ws / "one").write_bytes(b"x")
    ids = itertools.count()
    link = HostLink(env=env)
    me = cProfile.Profile(time.thread_time)  # CPU, as the hook's
    async with trio.open_nursery() as nursery:
        await link.start(nursery)
        try:
            for s in range(SESSIONS):
                await link.request("session.open", SessionOpenParams(f"s{s}", str(ws), "auto"))

            async def read(w: int) -> Any:
                return await link.request("tools.execute", ToolsExecuteParams(
                    f"s{w % SESSIONS}", f"c{next(ids)}", "Read", {"path": "one"}))

            assert link.pid is not None
            pids = {"host": link.pid, "runtime (the bench's HostLink)": os.getpid()}
            w = await _measure(pids, read, total, me)
        finally:
            await link.stop()
            nursery.cancel_scope.cancel()
    me_path = out / "self.prof"
    me.dump_stats(str(me_path))
    host_path = out / f"{pids['host']}.prof"
    await _wait_for(host_path)
    return w.rate, [
        load(host_path, "host", total, w.cpu[pids["host"]], w.profiled_cpu[pids["host"]]),
        load(me_path, "runtime (HostLink in the bench process)", total, w.cpu[os.getpid()],
             w.profiled_cpu[os.getpid()])]


async def profile_client(workdir: pathlib.Path, total: int, scenario: str
                         ) -> tuple[float, list[ProcessProfile]]:
    """A profiled ``quiesce serve`` (and its host): ``debug.runTool`` Read, or
    ``session.list``, 64 in flight from this client."""
    env, out = _hook_env()
    ws = workdir / "ws-profile-client"
    ws.mkdir(exist_ok=True)
    (ws / "one").write_bytes(b"x")
    data = workdir / "data-profile"
    data.mkdir(exist_ok=True)
    env["QUIESCE_DATA_DIR"] = str(data)
    log = os.open(workdir / "profile-daemon.log", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    try:
        async with spawn_daemon(env=env, stderr=log) as daemon:
            info = await daemon.initialize()
            host = info.capabilities.get("host")
            assert isinstance(host, dict)
            host_pid = int(host["pid"])
            sessions = []
            for _ in range(SESSIONS):
                made: SessionNewResult = await daemon.request("session.new", SessionNewParams(
                    str(ws), "auto", ScriptedProviderConfig(script=[])))
                sessions.append(made.session_id)

            async def run_tool(w: int) -> Any:
                return await daemon.request("debug.runTool", DebugRunToolParams(
                    sessions[w % SESSIONS], "Read", {"path": "one"}))

            async def listing(w: int) -> Any:
                return await daemon.request("session.list", Empty())

            pids = {"runtime (quiesce serve)": daemon.process.pid}
            if scenario == "client-read":  # session.list never reaches the host
                pids["host"] = host_pid
            w = await _measure(pids, run_tool if scenario == "client-read" else listing,
                               total, None)
    finally:
        os.close(log)
    profiles = []
    for name, pid in pids.items():
        path = out / f"{pid}.prof"
        await _wait_for(path)
        profiles.append(load(path, name, total, w.cpu[pid], w.profiled_cpu[pid]))
    return w.rate, profiles


def render(scenario: str, rate: float, total: int, profiles: list[ProcessProfile]) -> str:
    lines = [f"## Profile: {scenario} ({IN_FLIGHT} in flight, {total:,} calls a window)", "",
             f"Unprofiled: {rate:,.0f} calls/s.", ""]
    for p in profiles:
        lines += [f"### {p.name}: {p.cpu_us:.0f} µs CPU per call (all threads, unprofiled; "
                  f"{p.profiled_cpu_us:.0f} µs profiled, main thread seen {p.main_us:.0f} µs)",
                  "", "| stage | µs per call (scaled to unprofiled CPU) | share |",
                  "|---|---:|---:|"]
        for stage, us in p.scaled():
            share = us / p.cpu_us * 100 if p.cpu_us else 0
            lines.append(f"| {stage} | {us:.1f} | {share:.0f}% |")
        lines += ["", "Costliest functions (own time, profiled µs per call; calls per call):",
                  "", "| function | µs | calls |", "|---|---:|---:|"]
        lines += [f"| `{f}` | {us:.1f} | {n:.1f} |" for f, us, n in p.top]
        lines.append("")
    return "\n".join(lines)


async def run_profile(scenario: str, quick: bool, workdir: pathlib.Path) -> str:
    total = 1000 if quick else 5000
    if scenario == "read-throughput":
        rate, profiles = await profile_read_throughput(workdir, total)
    else:
        rate, profiles = await profile_client(workdir, total, scenario)
    return render(scenario, rate, total, profiles)


def main_profile(scenarios: list[str], quick: bool, out: pathlib.Path | None) -> int:
    work = pathlib.Path(tempfile.mkdtemp(prefix="quiesce-bench-profile-"))
    texts = []
    for scenario in scenarios:
        print(f"  profile {scenario} ...", file=sys.stderr, flush=True)
        texts.append(trio.run(run_profile, scenario, quick, work))
    text = "\n".join(texts)
    print(text)
    if out is not None:
        out.write_text(text)
        print(f"wrote {out}", file=sys.stderr)
    return 0


PROFILE_PREFIX = "profile-"


def as_series(scenario: str, rate: float, profiles: list[ProcessProfile]) -> list[Series]:
    """One series per process: the sample is its unprofiled CPU per call; the extras are
    the scaled stages (µs per call), in the report's "Where the time goes"."""
    out = []
    for p in profiles:
        s = Series(f"{PROFILE_PREFIX}{scenario}-{'host' if p.name == 'host' else 'runtime'}",
                   f"{scenario}: {p.name}", [p.cpu_us], unit="µs")
        for stage, us in p.scaled():
            s.extra[stage] = [us]
        s.extra["callsPerSecond"] = [rate]
        out.append(s)
    return out


async def profile_series(workdir: pathlib.Path, quick: bool) -> list[Series]:
    """The three floods profiled, for the report (``scripts/bench`` runs this group)."""
    total = 300 if quick else 3000
    out: list[Series] = []
    rate, profiles = await profile_read_throughput(workdir, total)
    out += as_series("read-throughput", rate, profiles)
    for scenario in ("client-read", "session-list"):
        rate, profiles = await profile_client(workdir, total, scenario)
        out += as_series(scenario, rate, profiles)
    return out
