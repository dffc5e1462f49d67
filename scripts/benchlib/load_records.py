"""The load test's configuration and records: what a run is asked to do (``LoadConfig``,
``FULL``, ``SMOKE``), and the figures and checks each phase fills in (``PhaseA``,
``PhaseB``, ``MemSample``, ``Check``, ``LoadResult``), with the tallies that count into
their tables."""

from __future__ import annotations

import math
import statistics
from dataclasses import asdict, dataclass, field
from typing import Any

import msgspec

from benchlib.load_leftovers import Leftovers
from runtime.daemon.percentiles import percentile

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
    leftovers: Leftovers = field(default_factory=Leftovers)
    """The marked processes the stops left (plugin servers aside: they live as long as
    their sessions)."""
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
    leftovers: Leftovers = field(default_factory=Leftovers)
    """The marked processes left after the last stop's answer."""
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


def tally_pair(table: dict[str, dict[str, int]], key: str, sub: str) -> None:
    """Count one more ``sub`` under ``key`` (tool -> code -> calls, for instance)."""
    row = table.setdefault(key, {})
    row[sub] = row.get(sub, 0) + 1


def tally(table: dict[str, int], key: str, by: int = 1) -> None:
    """Count ``by`` more under ``key``."""
    table[key] = table.get(key, 0) + by
