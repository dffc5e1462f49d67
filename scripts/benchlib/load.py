"""The load test: many sessions stopped at once, then thousands of stops interleaved
with executions, all in one real ``quiesce serve`` (driven through :mod:`benchlib.harness`).

Phase A
    ``sessions`` sessions, each prompted with one step holding a call of every host
    class (Bash, Grep, Write, Read). The scheduler runs an exclusive call (Bash, Write)
    alone and starts calls in model order, so each session puts its call of interest
    first, by role:

    - ``process`` (mode ``auto``): ``[Bash tree, Grep, Write, Read]``, the tree running
      (or queued in the host's admission beyond its process slots);
    - ``read-only`` (mode ``auto``): ``[Grep, Read, Bash, Write]``, the Grep (a
      catastrophic regular expression over a large file) running beside the Read;
    - ``permission`` (mode ``ask``): ``[Write, Bash, Grep, Read]``, the Write waiting in
      a permission prompt the client never answers;
    - ``plugin`` (mode ``auto``, its own workspace and MCP server, the SDK test server of
      ``tests/plugins``): ``[plugin wait, Write, Bash, Grep, Read]``, the plugin call
      running in its server (which left its pid in a file), or queued in the host's
      admission beyond its plugin slots, when the stop comes; the stop must cancel every
      running one at its server (the server leaves a file saying so), and once the
      session is closed its server must be gone.

    Once every call is provably in flight (``tool/call`` events, the trees' progress
    marker and their processes seen with psutil, the permission requests received), one
    ``agent.abort`` per session is released at once. Every answer must be ``aborted``
    with the codes the calls' states call for; every prompt must answer ``cancelled``;
    every permission prompt must be withdrawn and no Write run; no process carrying the
    run's marker may be left right after the answers; every transcript on disk must
    balance.

Phase B
    ``stops`` stops interleaved with executions, spread evenly over ``b_sessions``
    sessions (mode ``auto``); ``workers`` loops run in parallel, each going round its
    share of the sessions: ``agent.prompt``, a random (seeded) delay of
    0..``max_delay_ms``, ``agent.abort``. The scripts hold short calls (Read, Glob, Bash
    ``true``, Write of ``WRITE_BYTES``) and short model pauses, so stops land before a
    turn, in a stream, in a call (a Write's body included), and after the turn ended
    (answer ``idle``). Every file a Write targeted must hold, at the end, exactly what one
    of its Writes meant to leave (a stopped Write never leaves a partial file). Every
    abort and every prompt must answer (each abort under ``trio.fail_after``); an
    ``aborted`` answer must match a ``cancelled`` prompt of the same turn and an ``idle``
    one a turn that ended by itself; every transcript must balance and the session logs
    agree with the answers. Every ``sample_every`` stops the daemon's and the host's RSS,
    descriptors and CPU time (psutil) and, through the daemon's ops socket, the host's
    tombstones are sampled; RSS growth over the phase must stay under ``rss_bound_mb``.
"""

from __future__ import annotations

import dataclasses
import math
import os
import pathlib
import random
import statistics
import sys
import time
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import asdict, dataclass, field
from typing import Any

import msgspec
import psutil
import trio

from benchlib.harness import Bench, Session, kill_all, marked, now_ms, open_bench
from host.admission import DEFAULT_PER_CLASS
from host.manager import HostConfig
from protocol.errors import RemoteError
from protocol.messages.client import (
    AgentAbortResult,
    AgentPromptResult,
    ScriptedProviderConfig,
    SessionCloseParams,
    SessionNewParams,
    SessionNewResult,
)
from protocol.messages.common import McpServerConfig
from protocol.messages.events import (
    DurableEvent,
    SessionMeta,
    ToolAbortEvent,
    ToolCallEvent,
    ToolProgressEvent,
    ToolResultEvent,
    TurnEnd,
)
from protocol.toolclass import ToolClass
from protocol.transcript import Transcript
from runtime.agent.sessionlog import read_log
from runtime.clients.ops.client import OpsClient, connect
from runtime.daemon.percentiles import percentile
from runtime.link import ConnectionClosed

ABD = "ABORTED_BEFORE_DISPATCH"
ABORTED = "ABORTED"
PROCESS_SLOTS = DEFAULT_PER_CLASS[ToolClass.PROCESS]
"""Bash trees the host runs at once (its default admission limit); the rest queue."""
PLUGIN_SLOTS = DEFAULT_PER_CLASS[ToolClass.PLUGIN]
"""Plugin calls the host runs at once; the rest queue in its admission."""
TOMBSTONE_CAPACITY = HostConfig().tombstone_capacity

GREP_FILE_BYTES = 256 * 1024**3
GREP_PATTERN = "zzz"
"""ripgrep reading a sparse file of that size (named explicitly, so read whole): minutes of
work in its own process, so every Grep is in flight when stopped."""
TREE = "sleep 300 & echo tree-started; sleep 300"
TREE_SLEEPS = 2
TREE_TIMEOUT_MS = 600_000
"""Past the time phase A may take to get every call in flight (the default is 120 s)."""
GREP_SETTLE = 0.3
"""Seconds between "everything is in flight" and the stop: the Greps reach the host."""
LEFTOVER_WAIT = 5.0
MB = 1024 * 1024
PLUGIN_SERVER = (pathlib.Path(__file__).resolve().parents[2] / "tests" / "plugins"
                 / "servers" / "tools_server.py")
"""The MCP SDK server of the plugin tests: ``wait_politely`` waits a minute, and a cancel
ends it at once (it writes ``started-politely`` with its pid, then ``cancelled-politely``)."""
PLUGIN_TOOL = "mcp__tools__wait_politely"
WRITE_BYTES = 8 * 1024
"""Phase B: the size of each Write (each is in a session's script, so kept small)."""

ROLES = ("process", "read-only", "permission", "plugin")


@dataclass(frozen=True)
class LoadConfig:
    mode: str
    sessions: int
    """Phase A: sessions stopped at once."""
    stops: int
    """Phase B: ``agent.abort`` requests interleaved with executions."""
    b_sessions: int
    """Phase B: sessions the stops are spread over (each gets an equal quota)."""
    workers: int
    """Phase B: prompt + abort loops in parallel (the concurrency bound), each going round
    its share of the sessions."""
    sample_every: int
    """Phase B: stops between two memory samples."""
    ready_timeout: float
    """Phase A: seconds allowed for every call to be in flight."""
    max_delay_ms: float = 20.0
    seed: int = 1
    roles: tuple[str, ...] = ROLES
    """Phase A: the roles the sessions take in turn (a diagnostic may leave one out)."""
    control: bool = False
    """Run phase A a second time without its Grep sessions, in the same daemon right
    after, to show what the Greps' ripgrep processes cost the other stops."""
    rss_bound_mb: float = 100.0
    abort_timeout: float = 30.0
    """Seconds an ``agent.abort`` may take before it counts as unanswered (the process
    grace is 10 s, the kill grace 2 s)."""
    prompt_timeout: float = 30.0


FULL = LoadConfig("full", sessions=100, stops=10_000, b_sessions=48, workers=8,
                  sample_every=1000, ready_timeout=90.0, control=True)
SMOKE = LoadConfig("smoke", sessions=10, stops=200, b_sessions=8, workers=4, sample_every=50,
                   ready_timeout=20.0)


# -- figures ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Summary:
    n: int
    median: float | None
    p90: float | None
    """Quoted from 10 samples up."""
    p99: float | None
    """Quoted from 50 samples up."""
    min: float | None
    max: float | None


def summarize(values: list[float]) -> Summary:
    if not values:
        return Summary(0, None, None, None, None, None)
    return Summary(len(values), statistics.median(values),
                   percentile(values, 90) if len(values) >= 10 else None,
                   percentile(values, 99) if len(values) >= 50 else None,
                   min(values), max(values))


@dataclass
class Check:
    name: str
    passed: bool | None
    """``None``: could not be measured in this run (said in ``detail``)."""
    detail: str


@dataclass
class PhaseA:
    sessions: int = 0
    roles: dict[str, int] = field(default_factory=dict)
    ready: bool = False
    ready_s: float = math.nan
    """From the first prompt sent until every call was in flight."""
    trees_running: int = 0
    tree_members: int = 0
    """Marked processes seen with psutil just before the stop."""
    ops_states: dict[str, dict[str, int]] = field(default_factory=dict)
    """``ops.sessions`` just before the stop: tool -> state -> calls (if the ops socket
    is served)."""
    rtt_ms: list[float] = field(default_factory=list)
    settled_ms: list[float] = field(default_factory=list)
    answered_at_ms: list[float] = field(default_factory=list)
    """Each answer's arrival, from the moment the aborts were released."""
    all_settled_ms: float = math.nan
    outcomes: dict[str, int] = field(default_factory=dict)
    codes: dict[str, dict[str, int]] = field(default_factory=dict)
    """tool -> code (``ok`` for a result without one) -> calls, from the answers."""
    host_states: dict[str, dict[str, int]] = field(default_factory=dict)
    """tool -> the host's state when ``tools.abort`` reached it -> calls."""
    unanswered_aborts: int = 0
    unanswered_prompts: int = 0
    prompt_reasons: dict[str, int] = field(default_factory=dict)
    permission_requests: int = 0
    withdrawn: int = 0
    writes_ran: int = 0
    plugin_calls: int = 0
    """Plugin calls that reached their server (the rest were queued in the host)."""
    plugin_cancelled: int = 0
    """Plugin calls whose server saw the cancel (``cancelled-politely``)."""
    plugin_servers_left: list[str] = field(default_factory=list)
    """Plugin servers still alive once their sessions were closed."""
    survivors: list[str] = field(default_factory=list)
    survivors_later: list[str] = field(default_factory=list)
    unbalanced: list[str] = field(default_factory=list)
    anomalies: list[str] = field(default_factory=list)


@dataclass
class MemSample:
    stops: int
    elapsed_s: float
    daemon_rss_mb: float | None
    host_rss_mb: float | None
    daemon_fds: int | None
    host_fds: int | None
    daemon_cpu_s: float | None
    host_cpu_s: float | None
    host_pid: int | None
    marked_processes: int
    tombstones: int | None = None
    calls_in_flight: int | None = None


@dataclass
class PhaseB:
    stops: int = 0
    sessions: int = 0
    workers: int = 0
    duration_s: float = math.nan
    outcomes: dict[str, int] = field(default_factory=dict)
    prompt_reasons: dict[str, int] = field(default_factory=dict)
    rtt_aborted_ms: list[float] = field(default_factory=list)
    rtt_idle_ms: list[float] = field(default_factory=list)
    settled_ms: list[float] = field(default_factory=list)
    delays_ms: list[float] = field(default_factory=list)
    codes: dict[str, dict[str, int]] = field(default_factory=dict)
    """tool -> code -> calls, from the ``aborted`` answers."""
    host_states: dict[str, int] = field(default_factory=dict)
    """The host's state when each ``tools.abort`` reached it (``tool/abort`` events)."""
    log_turns: dict[str, int] = field(default_factory=dict)
    """Turn ends on disk, by kind."""
    log_calls: dict[str, int] = field(default_factory=dict)
    log_codes: dict[str, int] = field(default_factory=dict)
    log_events: int = 0
    """Durable events the phase added to its session logs (the daemon's journals hold them
    too)."""
    unanswered_aborts: list[str] = field(default_factory=list)
    unanswered_prompts: list[str] = field(default_factory=list)
    inconsistent: list[str] = field(default_factory=list)
    write_targets: int = 0
    torn_writes: list[str] = field(default_factory=list)
    """Write targets holding anything but one of their Writes' content, whole."""
    unbalanced: list[str] = field(default_factory=list)
    survivors: list[str] = field(default_factory=list)
    samples: list[MemSample] = field(default_factory=list)
    ops_stats: dict[str, Any] | None = None
    anomalies: list[str] = field(default_factory=list)


@dataclass
class LoadResult:
    config: LoadConfig
    phase_a: PhaseA = field(default_factory=PhaseA)
    phase_a_control: PhaseA | None = None
    """Phase A again without its Grep sessions (``LoadConfig.control``)."""
    phase_b: PhaseB = field(default_factory=PhaseB)
    ops_socket: str | None = None
    ops_note: str = ""
    failures: list[str] = field(default_factory=list)
    leftovers: list[str] = field(default_factory=list)
    checks: list[Check] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return not self.failures and all(c.passed is not False for c in self.checks)

    def to_json(self) -> dict[str, Any]:
        # asdict keeps the protocol's Structs in it (the host's stats): to plain data.
        data: dict[str, Any] = msgspec.to_builtins(asdict(self))
        data["passed"] = self.passed
        return data


def _bump(table: dict[str, dict[str, int]], key: str, sub: str) -> None:
    row = table.setdefault(key, {})
    row[sub] = row.get(sub, 0) + 1


def _count(table: dict[str, int], key: str, by: int = 1) -> None:
    table[key] = table.get(key, 0) + by


def transcript_problems(events: tuple[DurableEvent, ...] | list[DurableEvent]) -> list[str]:
    """Why a session log does not balance, by the transcript rulebook: a ``tool/call``
    without exactly one ``tool/result`` in the same turn and step (or the reverse), a turn
    without exactly one ``turn/start`` and one ``turn/end``."""
    transcript = Transcript(events)
    return transcript.call_problems() + transcript.turn_problems()


def session_log(bench: Bench, session: Session) -> tuple[DurableEvent, ...]:
    return read_log(bench.workdir / "data" / "sessions" / f"{session.session_id}.jsonl").events


# -- processes and memory ---------------------------------------------------------------------


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


# -- phase A: every session stopped at once -----------------------------------------------


def _call(call_id: str, name: str, **args: Any) -> dict[str, Any]:
    return {"toolCall": {"id": call_id, "name": name, "args": args}}


def _phase_a_step(role: str, i: int) -> list[dict[str, Any]]:
    """The call of interest first: nothing in the session holds it back."""
    read = _call("r", "Read", path="small.txt")
    bash = _call("b", "Bash", command=TREE, timeoutMs=TREE_TIMEOUT_MS)
    grep = _call("g", "Grep", pattern=GREP_PATTERN, path="big.txt")
    write = _call("w", "Write", path=f"never-{i}.txt", content="must not be written")
    plugin = _call("p", PLUGIN_TOOL)
    order = {"process": [bash, grep, write, read], "read-only": [grep, read, bash, write],
             "permission": [write, bash, grep, read],
             "plugin": [plugin, write, bash, grep, read]}
    return order[role]


def _has_call(session: Session, call_id: str) -> bool:
    return any(isinstance(e, ToolCallEvent) and e.call_id == call_id for e in session.events)


def _tree_started(session: Session) -> bool:
    return "tree-started" in "".join(e.text for e in session.events
                                     if isinstance(e, ToolProgressEvent) and e.call_id == "b")


def _expected_codes(role: str, tree_up: bool, plugin_up: bool) -> dict[str, set[str]]:
    if role == "process":
        return {"b": {ABORTED} if tree_up else {ABORTED, ABD}, "g": {ABD}, "w": {ABD},
                "r": {ABD}}
    if role == "read-only":
        # The runtime stops waiting for a read-only call at once: without the host's word
        # the body may have started, so a call still queued in the host is ABORTED too;
        # the Read beside the Grep may also have finished.
        return {"g": {ABORTED, ABD}, "r": {"ok", ABORTED}, "b": {ABD}, "w": {ABD}}
    if role == "plugin":  # running in its server (it said so): the body was invoked
        return {"p": {ABORTED} if plugin_up else {ABORTED, ABD}, "w": {ABD}, "b": {ABD},
                "g": {ABD}, "r": {ABD}}
    return {"w": {ABD}, "b": {ABD}, "g": {ABD}, "r": {ABD}}


async def _new_plugin_session(bench: Bench, workspace: pathlib.Path,
                              script: list[list[dict[str, Any]]]) -> Session:
    """A session with its own MCP server (the harness's sessions have none)."""
    server = McpServerConfig("tools", sys.executable, (str(PLUGIN_SERVER),))
    result: SessionNewResult = await bench.request("session.new", SessionNewParams(
        str(workspace), "auto", ScriptedProviderConfig(script=script), (server,)))
    return bench.sessions.setdefault(result.session_id, Session(result.session_id))


def _server_pid(workspace: pathlib.Path) -> int | None:
    try:
        return int((workspace / "started-politely").read_text())
    except (OSError, ValueError):
        return None  # not started yet, or being written


def _plugin_servers(bench: Bench) -> set[int]:
    """The marked processes running ``PLUGIN_SERVER`` (every plugin session has one)."""
    servers = set()
    for member in bench.members():
        try:
            if str(PLUGIN_SERVER) in psutil.Process(member.pid).cmdline():
                servers.add(member.pid)
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            pass
    return servers


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


async def phase_a(bench: Bench, cfg: LoadConfig, ops: OpsClient | None, out: PhaseA,
                  name: str = "a") -> None:
    workspace = bench.workdir / f"ws-load-{name}"
    workspace.mkdir()
    (workspace / "small.txt").write_text("a small file\n")
    (workspace / "big.txt").write_bytes(b"")
    os.truncate(workspace / "big.txt", GREP_FILE_BYTES)  # sparse: no disk used
    roles = [cfg.roles[i % len(cfg.roles)] for i in range(cfg.sessions)]
    out.sessions = cfg.sessions
    out.roles = dict(Counter(roles))
    sessions: list[Session] = []
    workspaces: list[pathlib.Path] = []  # each session's
    for i, role in enumerate(roles):
        if role == "plugin":  # its own workspace: its server's files are its own
            own = workspace / f"plugin-{i}"
            own.mkdir()
            sessions.append(await _new_plugin_session(bench, own, [_phase_a_step(role, i)]))
            workspaces.append(own)
            continue
        mode = "ask" if role == "permission" else "auto"
        sessions.append(await bench.new_session(workspace, [_phase_a_step(role, i)], mode=mode))
        workspaces.append(workspace)
    by_role = {r: [s for s, role in zip(sessions, roles, strict=True) if role == r]
               for r in ROLES}
    plugin_workspaces = [w for w, role in zip(workspaces, roles, strict=True)
                         if role == "plugin"]
    want_trees = min(len(by_role["process"]), PROCESS_SLOTS)
    want_plugins = min(len(plugin_workspaces), PLUGIN_SLOTS)

    def missing() -> dict[str, int]:
        """What is not in flight yet, by what it is."""
        return {what: n for what, n in {
            "Bash calls": sum(1 for s in by_role["process"] if not _has_call(s, "b")),
            "trees": want_trees - sum(1 for s in by_role["process"] if _tree_started(s)),
            "Grep calls": sum(1 for s in by_role["read-only"] if not _has_call(s, "g")),
            "permission prompts": sum(1 for s in by_role["permission"]
                                      if not s.permission_requests),
            "plugin calls at their server": want_plugins - sum(
                1 for w in plugin_workspaces if _server_pid(w) is not None),
        }.items() if n > 0}

    def ready() -> bool:
        return not missing()

    prompts: dict[str, AgentPromptResult] = {}
    all_prompted = trio.Event()

    async def prompt(session: Session) -> None:
        prompts[session.session_id] = await bench.prompt(session, "load: every class")
        if len(prompts) == len(sessions):
            all_prompted.set()

    answers: dict[str, AgentAbortResult] = {}
    release = trio.Event()
    waiting = [0]
    all_waiting = trio.Event()
    released_at = [0.0]

    async def abort(session: Session) -> None:
        waiting[0] += 1
        if waiting[0] == len(sessions):
            all_waiting.set()
        await release.wait()
        start = now_ms()
        try:
            with trio.fail_after(cfg.abort_timeout):
                answer: AgentAbortResult = await bench.request(
                    "agent.abort", bench.abort_params(session))
        except trio.TooSlowError:
            out.unanswered_aborts += 1
            out.anomalies.append(f"{session.session_id}: agent.abort did not answer within "
                                 f"{cfg.abort_timeout:g} s")
            return
        end = now_ms()
        answers[session.session_id] = answer
        out.rtt_ms.append(end - start)
        out.answered_at_ms.append(end - released_at[0])
        if answer.outcome == "aborted":
            out.settled_ms.append(answer.settled_ms)

    async with trio.open_nursery() as nursery:
        started = time.monotonic()
        for session in sessions:
            nursery.start_soon(prompt, session)
        try:
            await _poll_for(bench, ready, within=cfg.ready_timeout,
                            what="every call in flight")
            trees = sum(1 for s in by_role["process"] if _tree_started(s))
            members = await bench.wait_members(
                lambda m: sum(1 for p in m if p.name == "sleep" and p.status != "zombie")
                >= TREE_SLEEPS * trees, what="the trees' processes")
            out.ready = True
            out.tree_members = len(members)
        except TimeoutError as exc:
            out.anomalies.append(f"not every call was in flight before the stop: {exc}; "
                                 f"missing {missing()}")
        out.ready_s = time.monotonic() - started
        out.trees_running = sum(1 for s in by_role["process"] if _tree_started(s))
        await trio.sleep(GREP_SETTLE)
        if ops is not None:
            snapshot = await ops.sessions()
            for ops_session in snapshot.sessions:
                for call in ops_session.calls:
                    _bump(out.ops_states, call.tool, call.state)
        async with trio.open_nursery() as aborts:
            for session in sessions:
                aborts.start_soon(abort, session)
            await all_waiting.wait()
            released_at[0] = now_ms()
            release.set()
        if out.answered_at_ms:
            out.all_settled_ms = max(out.answered_at_ms)
        # A plugin server lives as long as its session: not a survivor of the stop.
        servers = await trio.to_thread.run_sync(_plugin_servers, bench)
        survivors = [m for m in await trio.to_thread.run_sync(bench.members)
                     if m.pid not in servers]
        out.survivors = [m.describe() for m in survivors]
        with trio.move_on_after(cfg.prompt_timeout):
            await all_prompted.wait()
        nursery.cancel_scope.cancel()

    if survivors:
        later = [m for m in await _wait_gone(bench, servers) if m.pid not in servers]
        out.survivors_later = [m.describe() for m in later]
        kill_all(later)
    await _close_plugin_sessions(bench, by_role["plugin"], plugin_workspaces, servers, out)

    out.unanswered_prompts = len(sessions) - len(prompts)
    for result in prompts.values():
        _count(out.prompt_reasons, result.stop_reason)
    # Late events: the withdrawals, and the host's answers to tools.abort (a read-only
    # stop does not wait for them).
    try:
        await bench.wait_for(lambda: all(
            s.withdrawn for s in by_role["permission"]) and all(
            any(isinstance(e, ToolAbortEvent) for e in s.events) for s in sessions),
            within=5.0, what="withdrawals and tool/abort events")
    except TimeoutError:
        pass  # counted below
    out.permission_requests = sum(len(s.permission_requests) for s in sessions)
    out.withdrawn = sum(len(s.withdrawn) for s in sessions)
    out.writes_ran = sum(1 for i, w in enumerate(workspaces) if (w / f"never-{i}.txt").exists())
    for session, role, own in zip(sessions, roles, workspaces, strict=True):
        answer = answers.get(session.session_id)
        for event in session.events:
            if isinstance(event, ToolAbortEvent):
                _bump(out.host_states, event.tool, event.host_state)
        if answer is None:
            continue
        _count(out.outcomes, answer.outcome)
        if answer.outcome != "aborted":
            out.anomalies.append(f"{session.session_id} ({role}): outcome {answer.outcome!r}")
            continue
        expected = _expected_codes(role, _tree_started(session), _server_pid(own) is not None)
        got = {c.call_id: c.code or "ok" for c in answer.tool_calls}
        for aborted_call in answer.tool_calls:
            _bump(out.codes, aborted_call.tool, aborted_call.code or "ok")
        if set(got) != set(expected) or any(got[c] not in expected[c] for c in got):
            out.anomalies.append(f"{session.session_id} ({role}): codes {got}, expected "
                                 f"{ {c: sorted(v) for c, v in expected.items()} }")
        prompt_answer = prompts.get(session.session_id)
        if prompt_answer is not None and (prompt_answer.stop_reason != "cancelled"
                                          or prompt_answer.turn_id != answer.turn_id):
            out.anomalies.append(f"{session.session_id}: the prompt answered "
                                 f"{prompt_answer.stop_reason!r} for {prompt_answer.turn_id}")
        log = session_log(bench, session)
        problems = transcript_problems(log)
        if not any(isinstance(e, TurnEnd) and e.turn_id == answer.turn_id
                   and e.end.kind == "aborted" for e in log):
            problems.append(f"no turn/end aborted for {answer.turn_id} on disk")
        if problems:
            out.unbalanced.append(f"{session.session_id}: {'; '.join(problems)}")


async def _poll_for(bench: Bench, predicate: Callable[[], bool], within: float,
                    what: str) -> None:
    """Like ``bench.wait_for``, also for what no event announces (a plugin server's file)."""
    try:
        with trio.fail_after(within):
            while not predicate():
                with trio.move_on_after(0.05):
                    await bench.changed.wait()
    except trio.TooSlowError:
        raise TimeoutError(f"waited {within:g} s for {what}") from None


async def _close_plugin_sessions(bench: Bench, sessions: list[Session],
                                 workspaces: list[pathlib.Path], servers: set[int],
                                 out: PhaseA) -> None:
    """Count the plugin calls cancelled at their server; close their sessions, after which
    no server may be left."""
    started = [w for w in workspaces if (w / "started-politely").exists()]
    out.plugin_calls = len(started)
    out.plugin_cancelled = sum(1 for w in started if (w / "cancelled-politely").exists())
    for session in sessions:
        try:
            with trio.fail_after(LEFTOVER_WAIT):
                await bench.request("session.close", SessionCloseParams(session.session_id))
        except (trio.TooSlowError, RemoteError, ConnectionClosed) as exc:
            out.anomalies.append(f"{session.session_id}: session.close failed: {exc!r}")
    deadline = time.monotonic() + LEFTOVER_WAIT
    while True:
        left = sorted(p for p in servers if _alive(p))
        if not left or time.monotonic() > deadline:
            break
        await trio.sleep(0.05)
    out.plugin_servers_left = [str(pid) for pid in left]
    for pid in left:
        psutil.Process(pid).kill()


async def _wait_gone(bench: Bench, ignore: set[int] | frozenset[int] = frozenset()
                     ) -> list[Any]:
    deadline = time.monotonic() + LEFTOVER_WAIT
    while True:
        left = [m for m in await trio.to_thread.run_sync(bench.members) if m.pid not in ignore]
        if not left or time.monotonic() > deadline:
            return left
        await trio.sleep(0.05)


# -- phase B: stops interleaved with executions ------------------------------------------------


def _write_content(n: int) -> str:
    """What the Write of turn ``n`` leaves: ``WRITE_BYTES``, starting ``turn n``."""
    return (f"turn {n}\n" * (WRITE_BYTES // 7 + 1))[:WRITE_BYTES]


def torn_writes(workspace: pathlib.Path) -> tuple[int, list[str]]:
    """(Write targets checked, those holding anything but what one of their Writes meant
    to leave, whole: a Write is atomic even when a stop lands in its body)."""
    torn = []
    paths = sorted(workspace.glob("w*.txt"))
    for path in paths:
        text = path.read_text()
        first = text.split("\n", 1)[0]
        n = int(first[5:]) if first.startswith("turn ") and first[5:].isdigit() else -1
        if n < 0 or path.name != f"w{n % 8}.txt" or text != _write_content(n):
            torn.append(f"{path.name}: {len(text)} bytes starting {text[:20]!r}")
    return len(paths), torn


def _phase_b_script(rng: random.Random, turns: int) -> list[list[dict[str, Any]]]:
    """``turns`` pairs (a tool step, a text step), plus a margin. A turn stopped in its
    first step leaves its text step to the next turn, which then ends at once: a turn
    takes at most two responses, so the script never runs out."""
    templates = [
        lambda n: [_call("c0", "Read", path="small.txt"), _call("c1", "Glob", pattern="*.txt")],
        lambda n: [_call("c0", "Bash", command="true")],
        lambda n: [_call("c0", "Read", path="small.txt"), _call("c1", "Bash", command="true")],
        lambda n: [_call("c0", "Write", path=f"w{n % 8}.txt", content=_write_content(n)),
                   _call("c1", "Read", path="small.txt")],
        lambda n: [_call("c0", "Glob", pattern="*.txt"), _call("c1", "Read", path="small.txt"),
                   _call("c2", "Write", path=f"w{n % 8}.txt", content=_write_content(n)),
                   _call("c3", "Bash", command="true")],
    ]
    script: list[list[dict[str, Any]]] = []
    for n in range(turns + 1):
        step: list[dict[str, Any]] = []
        if rng.random() < 0.5:
            step.append({"sleepMs": rng.randint(1, 10)})
        step += rng.choice(templates)(n)
        text: list[dict[str, Any]] = [{"text": "done"}]
        if rng.random() < 0.3:
            text += [{"sleepMs": rng.randint(1, 5)}, {"text": " and more"}]
        script += [step, text]
    return script


async def _prompt_into(bench: Bench, session: Session, text: str,
                       box: list[AgentPromptResult], done: trio.Event) -> None:
    box.append(await bench.prompt(session, text))
    done.set()


@dataclass
class _Progress:
    total: int
    done: int = 0
    next_sample: int = 0


@dataclass
class _Lane:
    """One phase B session: its quota of stops and its own seeded delays."""

    session: Session
    quota: int
    rng: random.Random
    done: int = 0
    broken: bool = False


async def _stop_once(bench: Bench, cfg: LoadConfig, lane: _Lane, out: PhaseB,
                     aborted_by_session: Counter[str]) -> None:
    """One prompt, a random delay, one abort; both must answer and agree."""
    session, k = lane.session, lane.done
    lane.done += 1
    delay = lane.rng.uniform(0.0, cfg.max_delay_ms) / 1000.0
    prompted: list[AgentPromptResult] = []
    answered = trio.Event()
    answer: AgentAbortResult | None = None
    rtt = 0.0
    async with trio.open_nursery() as nursery:
        nursery.start_soon(_prompt_into, bench, session, f"load {k}", prompted, answered)
        await trio.sleep(delay)
        start = now_ms()
        try:
            with trio.fail_after(cfg.abort_timeout):
                answer = await bench.request("agent.abort", bench.abort_params(session))
            rtt = now_ms() - start
        except trio.TooSlowError:
            out.unanswered_aborts.append(f"{session.session_id} stop {k}: no answer within "
                                         f"{cfg.abort_timeout:g} s")
        with trio.move_on_after(cfg.prompt_timeout):
            await answered.wait()
        nursery.cancel_scope.cancel()
    out.delays_ms.append(delay * 1000.0)
    for event in session.events:
        if isinstance(event, ToolAbortEvent):
            _count(out.host_states, event.host_state)
    session.events.clear()
    result = prompted[0] if prompted else None
    if result is None:
        out.unanswered_prompts.append(f"{session.session_id} stop {k}: agent.prompt did not "
                                      f"answer within {cfg.prompt_timeout:g} s")
    else:
        _count(out.prompt_reasons, result.stop_reason)
    if answer is None or result is None:
        lane.broken = True  # this session cannot be trusted any more; the others go on
        return
    out.stops += 1
    _count(out.outcomes, answer.outcome)
    if answer.outcome == "aborted":
        aborted_by_session[session.session_id] += 1
        out.rtt_aborted_ms.append(rtt)
        out.settled_ms.append(answer.settled_ms)
        for call in answer.tool_calls:
            _bump(out.codes, call.tool, call.code or "ok")
        if result.stop_reason != "cancelled" or result.turn_id != answer.turn_id:
            out.inconsistent.append(f"{session.session_id} stop {k}: abort stopped "
                                    f"{answer.turn_id}, the prompt answered "
                                    f"{result.stop_reason!r} for {result.turn_id}")
    else:
        out.rtt_idle_ms.append(rtt)
        if result.stop_reason != "end_turn":
            out.inconsistent.append(f"{session.session_id} stop {k}: abort answered idle, the "
                                    f"prompt {result.stop_reason!r}")


async def _worker(bench: Bench, cfg: LoadConfig, lanes: list[_Lane], out: PhaseB,
                  progress: _Progress, sampler: Sampler,
                  aborted_by_session: Counter[str]) -> None:
    """Round robin over this worker's sessions until each has had its quota of stops."""
    while True:
        live = [lane for lane in lanes if lane.done < lane.quota and not lane.broken]
        if not live:
            return
        for lane in live:
            await _stop_once(bench, cfg, lane, out, aborted_by_session)
            progress.done += 1
            if progress.done >= progress.next_sample:
                progress.next_sample += cfg.sample_every
                out.samples.append(await sampler.sample(progress.done))


async def phase_b(bench: Bench, cfg: LoadConfig, ops: OpsClient | None, out: PhaseB) -> None:
    count = max(1, min(cfg.b_sessions, cfg.stops))
    workers = max(1, min(cfg.workers, count))
    quotas = [cfg.stops // count + (1 if j < cfg.stops % count else 0) for j in range(count)]
    lanes: list[_Lane] = []
    for j, quota in enumerate(quotas):
        rng = random.Random(cfg.seed * 1_000_003 + j)
        workspace = bench.workdir / f"ws-load-b{j}"
        workspace.mkdir()
        (workspace / "small.txt").write_text("a small file\n")
        session = await bench.new_session(workspace, _phase_b_script(rng, quota))
        lanes.append(_Lane(session, quota, rng))
    out.sessions = count
    out.workers = workers
    sampler = Sampler(bench, ops)
    progress = _Progress(cfg.stops, next_sample=cfg.sample_every)
    out.samples.append(await sampler.sample(0))
    aborted_by_session: Counter[str] = Counter()
    started = time.monotonic()
    async with trio.open_nursery() as nursery:
        for w in range(workers):
            nursery.start_soon(_worker, bench, cfg, lanes[w::workers], out, progress, sampler,
                               aborted_by_session)
    out.duration_s = time.monotonic() - started
    survivors = await trio.to_thread.run_sync(bench.members)
    out.survivors = [m.describe() for m in survivors]
    if survivors:
        kill_all(await _wait_gone(bench))
    await trio.sleep(0.5)  # late tool/abort events of the last stops
    for lane in lanes:
        for event in lane.session.events:
            if isinstance(event, ToolAbortEvent):
                _count(out.host_states, event.host_state)
    if out.samples[-1].stops != progress.done:
        out.samples.append(await sampler.sample(progress.done))
    if ops is not None:
        stats = await ops.stats()
        out.ops_stats = {f: getattr(stats, f) for f in stats.__struct_fields__}
    for j in range(count):
        checked, torn = torn_writes(bench.workdir / f"ws-load-b{j}")
        out.write_targets += checked
        out.torn_writes += torn
    for lane in lanes:
        session = lane.session
        log = session_log(bench, session)
        out.log_events += sum(1 for e in log if not isinstance(e, SessionMeta))
        problems = transcript_problems(log)
        aborted_on_disk = 0
        for event in log:
            if isinstance(event, TurnEnd):
                _count(out.log_turns, event.end.kind)
                aborted_on_disk += event.end.kind == "aborted"
            elif isinstance(event, ToolCallEvent):
                _count(out.log_calls, event.tool)
            elif isinstance(event, ToolResultEvent):
                _count(out.log_codes, event.code or "ok")
        if aborted_on_disk != aborted_by_session[session.session_id]:
            problems.append(f"{aborted_on_disk} turns ended aborted on disk, "
                            f"{aborted_by_session[session.session_id]} aborts answered aborted")
        if problems:
            out.unbalanced.append(f"{session.session_id}: {'; '.join(problems[:5])}"
                                  + (f" (+{len(problems) - 5} more)" if len(problems) > 5
                                     else ""))


# -- the whole run --------------------------------------------------------------------------


def _growth(samples: list[MemSample], attr: str) -> float | None:
    values = [getattr(s, attr) for s in samples if getattr(s, attr) is not None]
    if len(values) < 2:
        return None
    return float(values[-1] - values[0])


def judge(result: LoadResult) -> None:
    """The checks of the run, from its figures."""
    cfg, a, b = result.config, result.phase_a, result.phase_b
    checks = result.checks
    checks.append(Check("A: every call in flight before the stop", a.ready,
                        f"{a.trees_running} trees running ({PROCESS_SLOTS} process slots), "
                        f"{a.permission_requests} permission prompts, in {a.ready_s:.1f} s"))
    aborted = a.outcomes.get("aborted", 0)
    checks.append(Check("A: every `agent.abort` answered `aborted`",
                        aborted == a.sessions and not a.unanswered_aborts,
                        f"{aborted}/{a.sessions} aborted, {a.unanswered_aborts} unanswered "
                        f"within {cfg.abort_timeout:g} s"))
    code_anomalies = [x for x in a.anomalies if "codes" in x or "outcome" in x]
    checks.append(Check("A: every call ended with the code its state calls for",
                        not code_anomalies, f"{len(code_anomalies)} sessions otherwise"))
    cancelled = a.prompt_reasons.get("cancelled", 0)
    checks.append(Check("A: every `agent.prompt` answered `cancelled`",
                        cancelled == a.sessions and not a.unanswered_prompts,
                        f"{cancelled}/{a.sessions}, {a.unanswered_prompts} unanswered"))
    checks.append(Check("A: every permission prompt withdrawn, no Write ran",
                        a.withdrawn == a.permission_requests == a.roles.get("permission", 0)
                        and a.writes_ran == 0,
                        f"{a.withdrawn}/{a.permission_requests} withdrawn, "
                        f"{a.writes_ran} Writes ran"))
    if a.roles.get("plugin", 0):
        checks.append(Check("A: every plugin call cancelled at its server; every server gone "
                            "with its session",
                            a.plugin_cancelled == a.plugin_calls
                            >= min(a.roles["plugin"], PLUGIN_SLOTS)
                            and not a.plugin_servers_left,
                            f"{a.plugin_cancelled}/{a.plugin_calls} cancelled, "
                            f"{len(a.plugin_servers_left)} servers left"))
    checks.append(Check("A: no marked process right after the answers", not a.survivors,
                        f"{len(a.survivors)} ({a.tree_members} seen before the stop)"))
    checks.append(Check("A: every transcript balances", not a.unbalanced,
                        f"{len(a.unbalanced)} of {a.sessions} logs do not"))
    c = result.phase_a_control
    if c is not None:
        ok = (c.ready and c.outcomes.get("aborted", 0) == c.sessions
              and c.prompt_reasons.get("cancelled", 0) == c.sessions
              and c.withdrawn == c.permission_requests and not c.writes_ran
              and c.plugin_cancelled == c.plugin_calls and not c.plugin_servers_left
              and not (c.anomalies or c.unbalanced or c.survivors))
        checks.append(Check("A without Grep: every call in flight, every stop `aborted` with "
                            "its codes, withdrawn, balanced, no survivor", ok,
                            f"{c.outcomes.get('aborted', 0)}/{c.sessions} aborted, "
                            f"{len(c.anomalies) + len(c.unbalanced) + len(c.survivors)} "
                            "anomalies"))
    checks.append(Check(f"B: every `agent.abort` answered within {cfg.abort_timeout:g} s",
                        not b.unanswered_aborts and b.stops == cfg.stops,
                        f"{b.stops:,}/{cfg.stops:,} answered, {len(b.unanswered_aborts)} not"))
    checks.append(Check("B: every `agent.prompt` answered, as its abort says",
                        not b.unanswered_prompts and not b.inconsistent,
                        f"{len(b.unanswered_prompts)} unanswered, {len(b.inconsistent)} "
                        "inconsistent with their abort"))
    checks.append(Check("B: every transcript balances and agrees with the answers",
                        not b.unbalanced, f"{len(b.unbalanced)} of {b.sessions} logs do not"))
    write_codes = b.codes.get("Write", {})
    checks.append(Check("B: every file a Write targeted holds one Write's content, whole",
                        not b.torn_writes and b.write_targets > 0,
                        f"{len(b.torn_writes)} of {b.write_targets} files otherwise; Writes "
                        f"stopped: {write_codes.get(ABORTED, 0)} {ABORTED} (its body had started), "
                        f"{write_codes.get(ABD, 0)} {ABD}"))
    checks.append(Check("B: no marked process after the last stop", not b.survivors,
                        f"{len(b.survivors)}"))
    d_growth, h_growth = _growth(b.samples, "daemon_rss_mb"), _growth(b.samples, "host_rss_mb")
    if d_growth is None or h_growth is None:
        checks.append(Check(f"B: RSS growth ≤ {cfg.rss_bound_mb:g} MB", False,
                            "fewer than two samples"))
    else:
        checks.append(Check(f"B: RSS growth ≤ {cfg.rss_bound_mb:g} MB (daemon and host each)",
                            d_growth <= cfg.rss_bound_mb and h_growth <= cfg.rss_bound_mb,
                            f"daemon {d_growth:+.1f} MB, host {h_growth:+.1f} MB"))
    tombs = [s.tombstones for s in b.samples if s.tombstones is not None]
    if tombs:
        checks.append(Check(f"B: host tombstones bounded (≤ capacity {TOMBSTONE_CAPACITY:,})",
                            max(tombs) <= TOMBSTONE_CAPACITY,
                            f"max {max(tombs)}, last {tombs[-1]}; "
                            f"{b.host_states.get('tombstoned', 0)} created (tool/abort)"))
    else:
        checks.append(Check("B: host tombstones bounded", None, result.ops_note))
    hosts = {s.host_pid for s in b.samples}
    crashes = (b.ops_stats or {}).get("host_crashes", 0)
    checks.append(Check("B: one host throughout (no crash, no restart)",
                        len(hosts) == 1 and None not in hosts and not crashes,
                        f"host pids sampled {sorted(h for h in hosts if h is not None)}"
                        + (f", {crashes} crashes (ops)" if b.ops_stats else "")))
    checks.append(Check("no marked process once the daemon exited", not result.leftovers,
                        f"{len(result.leftovers)}"))


async def run_load(cfg: LoadConfig, workdir: Any) -> LoadResult:
    """Run both phases in one daemon; the daemon's ops socket lives in ``workdir/run``."""
    result = LoadResult(cfg)
    run_dir = workdir / "run"
    run_dir.mkdir(mode=0o700)
    mark = ""
    async with open_bench(workdir, {"XDG_RUNTIME_DIR": str(run_dir)}) as bench:
        mark = bench.mark
        async with AsyncExitStack() as stack:
            ops = await stack.enter_async_context(open_ops(bench, result))
            phases: list[tuple[str, Callable[[], Awaitable[None]]]] = [
                ("phase A", lambda: phase_a(bench, cfg, ops, result.phase_a))]
            if cfg.control:
                control = dataclasses.replace(
                    cfg, roles=tuple(r for r in cfg.roles if r != "read-only"),
                    sessions=sum(1 for i in range(cfg.sessions)
                                 if cfg.roles[i % len(cfg.roles)] != "read-only"))
                control_out = result.phase_a_control = PhaseA()
                phases.append(("phase A without Grep", lambda: phase_a(
                    bench, control, ops, control_out, "a-control")))
            phases.append(("phase B", lambda: phase_b(bench, cfg, ops, result.phase_b)))
            for name, phase in phases:
                try:
                    await phase()
                except Exception as exc:  # noqa: BLE001 - reported, and the run fails
                    result.failures.append(f"{name}: {type(exc).__name__}: {exc}")
    deadline = time.monotonic() + LEFTOVER_WAIT
    left = marked(mark)
    while left and time.monotonic() < deadline:
        await trio.sleep(0.05)
        left = marked(mark)
    kill_all(left)
    result.leftovers = [m.describe() for m in left]
    judge(result)
    return result
