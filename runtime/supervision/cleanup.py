"""What a dead host left behind, killed: the tool processes carrying its marker, and the
orphans it left to the runtime (a child subreaper); at start-up, those of hosts that died
with an earlier runtime."""

from __future__ import annotations

import logging

import psutil

from runtime.proc.orphans import sweeps_orphans
from runtime.proc.proctree import (
    ENV_MARKER,
    find_marked,
    kill_adopted_children,
    kill_marked,
)
from runtime.supervision import cgroup_sweeps

log = logging.getLogger(__name__)

SURVIVOR_KILL_GRACE = 0.5


async def kill_survivors(host_pid: int | None, *, spare: set[int]) -> None:
    """Kill every tool process the dead host ``host_pid`` left (by its marker) and, if
    the runtime sweeps orphans, every child adopted since but ``spare`` (a host not yet
    adopted): no successor runs yet, so each is the dead host's escapee."""
    if host_pid is None:
        return
    report = await kill_marked(ENV_MARKER, f"{host_pid}:", prefix=True,
                               grace=SURVIVOR_KILL_GRACE)
    if report.found:
        log.warning("killed %d processes left by host %s", report.found, host_pid)
    if sweeps_orphans():
        # An escapee without the marker (it cleared its environment and left its
        # session) was the dead host's orphan, and is now ours.
        found = await kill_adopted_children(spare=spare, grace=SURVIVOR_KILL_GRACE)
        if found:
            log.warning("killed %d unmarked processes orphaned by host %s", found,
                        host_pid)


async def kill_orphans_of_dead_hosts() -> int:
    """At start-up: tool processes whose host is gone (a runtime and host killed
    together, e.g. by a signal to their process group) are killed: by their host's
    cgroups (``quiesce-host-<pid>`` of a dead pid, beneath ours), and by marker."""
    pids: set[str] = set()
    for proc in find_marked(ENV_MARKER, "", prefix=True):
        try:
            value = proc.environ().get(ENV_MARKER, "")
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
        host_pid = value.split(":", 1)[0]
        if host_pid.isdigit() and not psutil.pid_exists(int(host_pid)):
            pids.add(host_pid)
    killed = await cgroup_sweeps.sweep_dead_hosts()
    for host_pid in pids:
        report = await kill_marked(ENV_MARKER, f"{host_pid}:", prefix=True,
                                   grace=SURVIVOR_KILL_GRACE)
        killed += report.found
    if killed:
        log.warning("killed %d tool processes left by dead hosts", killed)
    return killed
