"""The ops link: an operator's tool (``quiesce ops``) talking to a running daemon."""

from __future__ import annotations

from typing import Literal

import msgspec

from protocol.messages.common import Struct
from protocol.messages.events import AnnouncedEvent, TokenUsage
from protocol.sandbox import SandboxReport

OpsCallState = Literal["queued", "permission-pending", "running", "aborting", "draining",
                       "hook"]


class OpsCall(Struct, frozen=True):
    call_id: str
    tool: str
    tool_class: str = msgspec.field(name="class")
    state: OpsCallState = "running"
    age_s: float = 0.0
    hook: str | None = None
    """State ``hook``: the configured hook the call is running (``pre_tool_use[0] cmd``)."""


class OpsSession(Struct, frozen=True):
    session_id: str
    workspace: str
    phase: Literal["idle", "maintenance", "running"]
    turn_id: str | None = None
    turn_age_s: float | None = None
    stop_waiting_s: float | None = None  # how long a stop of this turn has been waiting
    stuck: bool = False  # a stop has waited longer than the daemon's threshold
    inbox: int = 0
    calls: tuple[OpsCall, ...] = ()
    usage: TokenUsage | None = None
    """The session's token usage, summed over its ``model/usage`` records (null: none)."""


class OpsUnreadableLog(Struct, frozen=True):
    """A session log in the daemon's data directory that cannot be read: ``session.load``
    fails on it until an operator repairs it (docs/operations.md)."""

    session_id: str
    error: str
    path: str = ""
    workspace: str = ""  # from its first line, if that much can be read


class OpsSessionsResult(Struct, frozen=True):
    pid: int
    sessions: tuple[OpsSession, ...]
    unreadable_logs: tuple[OpsUnreadableLog, ...] = ()


class OpsSessionParams(Struct, frozen=True):
    session_id: str


class OpsForceParams(Struct, frozen=True):
    session_id: str
    call_id: str


class OpsForceResult(Struct, frozen=True):
    forced: bool
    detail: str = ""


class OpsRestartHostResult(Struct, frozen=True):
    old_pid: int | None
    new_pid: int | None


class OpsStatsResult(Struct, frozen=True):
    pid: int
    uptime_s: float
    sessions: int
    turns: int
    stops: int
    stop_latency_ms_median: float | None = None
    stop_latency_ms_p90: float | None = None
    stop_latency_ms_max: float | None = None
    host_pid: int | None = None
    host_restarts: int = 0
    host_crashes: int = 0
    tombstones: int = 0
    calls_in_flight: int = 0
    turns_running: int = 0
    """Turns running now; ``turns`` counts only finished ones."""
    process_isolation: str | None = None  # the live host's: "cgroup" or "process-tree"
    stops_settling: int = 0
    """Stops asked for and not settled yet (``stops`` counts only settled ones)."""
    stops_stuck: int = 0
    """Of those, the ones waiting longer than the daemon's ``--stuck-after``."""
    sandbox: SandboxReport | None = None
    """The live host's sandbox: mechanism, ABI, enforced and degraded guarantees."""
    call_limits: dict[str, str] = msgspec.field(default_factory=dict)
    """The live host's per-call limits and how each is enforced (``host.stats``)."""


class OpsEventParams(Struct, frozen=True):
    session_id: str
    event: AnnouncedEvent
    dropped: int = 0  # events of this tail skipped just before this one (slow reader)


class OpsTailParams(Struct, frozen=True):
    session_id: str | None = None  # only this session's events; absent: every session


class OpsTailResult(Struct, frozen=True):
    events: int = 0  # events sent as ops.event
    dropped: int = 0  # events skipped because the client read too slowly
