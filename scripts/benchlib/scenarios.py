"""The bench's scenario table: every row ``scripts/bench`` can run, by key (the floors are
cheap and get more repetitions), and the ratios its report draws between them."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from benchlib import compaction, logwrite
from benchlib.floors import (
    floor_bash_turn,
    floor_bash_turn_sandboxed,
    floor_fsync,
    floor_host_tool,
    floor_noop_turn,
    floor_process_scan,
    floor_session_list,
)
from benchlib.harness import Bench
from benchlib.isolation import loop_lag
from benchlib.stats import Series
from benchlib.stop import (
    stop_permission_siblings,
    stop_read_only,
    stop_term_honouring,
    stop_term_honouring_sandboxed,
    stop_term_ignoring,
)
from benchlib.stop_many import stop_many_trees, stop_many_trees_fallback
from benchlib.streamlag import stream_lag

Scenario = Callable[[Bench, int, int], Awaitable[Series]]
"""A scenario: ``(bench, repetitions, warm-up repetitions) -> samples``."""


@dataclass(frozen=True)
class Spec:
    run: Scenario
    floor: bool
    """Floors are cheap and get more repetitions."""


SCENARIOS: dict[str, Spec] = {
    "floor-session-list": Spec(floor_session_list, True),
    "floor-host-tool": Spec(floor_host_tool, True),
    "floor-noop-turn": Spec(floor_noop_turn, True),
    "floor-bash-turn": Spec(floor_bash_turn, True),
    "floor-bash-turn-sandboxed": Spec(floor_bash_turn_sandboxed, True),
    "floor-process-scan": Spec(floor_process_scan, True),
    "floor-fsync": Spec(floor_fsync, True),
    "floor-log-append": Spec(logwrite.floor_log_append, True),
    "floor-log-cut": Spec(logwrite.floor_log_cut, True),
    "floor-log-recover": Spec(logwrite.floor_log_recover, True),
    "floor-compaction": Spec(compaction.floor_compaction, True),
    "stop-read-only": Spec(stop_read_only, False),
    "stop-tree-term": Spec(stop_term_honouring, False),
    "stop-tree-term-sandboxed": Spec(stop_term_honouring_sandboxed, False),
    "stop-tree-ignoring": Spec(stop_term_ignoring, False),
    "stop-undispatched": Spec(stop_permission_siblings, False),
    "stop-50-trees": Spec(stop_many_trees, False),
    "stop-50-trees-fallback": Spec(stop_many_trees_fallback, False),
    "stop-loop-lag": Spec(loop_lag, False),
    "stream-loop-lag": Spec(stream_lag, False),
}

RATIOS: list[tuple[str, str, str]] = [
    # (numerator, denominator, what it says)
    ("stop-read-only", "floor-session-list", "read-only stop vs. a bare client round trip"),
    ("stop-read-only", "floor-noop-turn", "read-only stop vs. a completed no-op turn"),
    ("stop-tree-term", "floor-noop-turn", "tree stop vs. a completed no-op turn"),
    ("stop-tree-term", "floor-bash-turn", "tree stop vs. a completed Bash `true` turn"),
    ("stop-tree-term", "floor-process-scan", "tree stop vs. one process-table scan"),
    ("floor-bash-turn-sandboxed", "floor-bash-turn",
     "a sandboxed Bash `true` turn vs. an unsandboxed one (goal: within 10% or 1 ms)"),
    ("stop-tree-term-sandboxed", "stop-tree-term",
     "a sandboxed tree stop vs. an unsandboxed one (goal: within 10% or 1 ms)"),
    ("stop-50-trees", "stop-tree-term", "50 trees stopped at once vs. one tree"),
    ("stop-50-trees-fallback", "stop-50-trees",
     "50 trees at once without cgroups vs. with them"),
    ("stop-undispatched", "floor-noop-turn", "undispatched stop vs. a completed no-op turn"),
    ("stop-undispatched", "floor-fsync", "undispatched stop vs. one append + fsync"),
    ("floor-noop-turn", "floor-fsync", "no-op turn vs. one append + fsync"),
    ("floor-log-append", "floor-fsync", "the log's append + sync vs. a raw append + fsync"),
    ("floor-log-cut", "floor-log-append", "a failed append cut back vs. the log's append + sync"),
    ("floor-log-recover", "floor-log-append",
     "a failed append cut back, then appended and synced vs. the log's append + sync"),
    ("floor-noop-turn", "floor-session-list", "no-op turn vs. a bare client round trip"),
    ("floor-host-tool", "floor-session-list", "host tool round trip vs. a bare round trip"),
    ("floor-compaction", "floor-noop-turn", "a compaction (instant model) vs. a no-op turn"),
]
