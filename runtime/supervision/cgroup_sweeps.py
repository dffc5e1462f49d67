"""The runtime's side of the hosts' cgroups: killing, from outside, what a host left.

A host makes its cgroups under ``<its cgroup>/quiesce-host-<pid>``
(``runtime.proc.cgroups``). The runtime, which knows the layout, kills one call's
cgroups when its host does not answer (``kill_call_cgroup``), a dead host's whole
directory (``kill_host_cgroups``), and at start-up those of hosts that died with an
earlier runtime (``sweep_dead_hosts``).
"""

from __future__ import annotations

import logging
import os

from runtime.proc import escapes
from runtime.proc.cgroups import (
    HOST_PREFIX,
    Cgroup,
    call_cgroup_name,
    host_dir,
    own_cgroup_dir,
    pids_below,
    remove_tree,
    wait_empty,
)

log = logging.getLogger(__name__)


async def _kill_dir(path: str, within: float) -> int:
    """``cgroup.kill`` a whole directory, wait until empty, remove it; how many
    processes it held."""
    held = len(pids_below(path))
    Cgroup(path).kill()
    if not await wait_empty(path, within):
        log.error("cgroup %s did not empty within %.1f s after cgroup.kill", path, within)
    remove_tree(path)
    return held


async def kill_host_cgroups(host_pid: int, *, within: float = 2.0) -> int:
    """After host ``host_pid`` (a child of this process) died: kill and remove every
    cgroup it left. How many processes they held."""
    path = host_dir(host_pid)
    if path is None or not _is_dir(path):
        return 0
    return await _kill_dir(path, within)


async def kill_call_cgroup(host_pid: int, session_id: str, call_id: str, *,
                           within: float = 2.0) -> bool | None:
    """Kill one call's cgroups of host ``host_pid`` (the host does not answer): whether
    they are empty now; ``None`` if that call has no cgroup (no cgroups, or settled)."""
    path = host_dir(host_pid)
    if path is None:
        return None
    name = call_cgroup_name(host_pid, session_id, call_id)
    try:
        with os.scandir(path) as entries:
            mine = [e.path for e in entries if e.name == name or e.name.startswith(name + "-")]
    except OSError:
        return None
    if not mine:
        return None
    empty = True
    for cgroup in mine:
        # The sessions begun in it (the call's root leads one): a process of one of them
        # that wrote itself into another call's cgroup is this call's, and dies with it
        # (``escapes.joined_elsewhere``; the frozen host holds each leader unreaped).
        sessions = [pid for pid in pids_below(cgroup) if escapes.session_of(pid) == pid]
        Cgroup(cgroup).kill()
        empty = await wait_empty(cgroup, within) and empty
        for session in sessions:
            joined = await escapes.joined_elsewhere(path, cgroup, session)
            if joined:
                log.warning("killing %d processes of call %s in other calls' cgroups",
                            len(joined), call_id)
                await escapes.wait_pidfds(escapes.kill_listed(joined), within)
    return empty


async def sweep_dead_hosts(*, within: float = 2.0) -> int:
    """At start-up: kill and remove the cgroups of hosts (of this process's cgroup) that
    no longer exist. How many processes they held."""
    base = own_cgroup_dir()
    if base is None:
        return 0
    try:
        with os.scandir(base) as entries:
            dirs = [(e.path, e.name[len(HOST_PREFIX):]) for e in entries
                    if e.name.startswith(HOST_PREFIX) and e.is_dir(follow_symlinks=False)]
    except OSError:
        return 0
    held = 0
    for path, pid in dirs:
        if pid.isdigit() and not _alive(int(pid)):
            held += await _kill_dir(path, within)
    return held


def _is_dir(path: str) -> bool:
    return os.path.isdir(path)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True

