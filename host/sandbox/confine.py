"""Confining a child between fork and exec: no new privileges, (as root) an empty
capability bounding set, then the Landlock domain of a ruleset built in the parent.

``Confinement`` is what ``host.spawn_start`` is handed: a ruleset descriptor (a
duplicate the spawn owns and closes) or ``None`` (no Landlock: only no-new-privs and the
capability drop). ``in_child`` runs in the forked child after it joined its cgroup: only
resolved libc calls, no allocation that could deadlock.
"""

from __future__ import annotations

import ctypes
import functools
import os
from collections.abc import Callable
from dataclasses import dataclass

from host.sandbox import landlock
from runtime.proc import libc, netns

PR_SET_NO_NEW_PRIVS = 38
PR_CAPBSET_DROP = 24
PR_CAP_AMBIENT = 47
PR_CAP_AMBIENT_CLEAR_ALL = 4


@functools.cache
def _last_cap() -> int:
    try:
        with open("/proc/sys/kernel/cap_last_cap") as file:
            return int(file.read())
    except (OSError, ValueError):
        return 40


@dataclass
class Confinement:
    ruleset: int | None
    """A Landlock ruleset's descriptor owned by this spawn, or ``None``."""
    netns: int | None = None
    """A network namespace to join (``runtime.proc.netns``), owned by this spawn."""

    def close(self) -> None:
        for fd in (self.ruleset, self.netns):
            if fd is not None:
                os.close(fd)
        self.ruleset = self.netns = None


class ConfineError(OSError):
    """The child could not be confined: it does not run (fail closed)."""


ChildStep = tuple[Callable[..., int], int, "int | None", "int | None"]


def child_step(confinement: Confinement) -> ChildStep:
    """What ``in_child`` needs, resolved in the parent: prctl, the cap range, the fds."""
    return (libc.prctl(), _last_cap() if os.geteuid() == 0 else -1, confinement.ruleset,
            confinement.netns)


def in_child(call: Callable[..., int], last_cap: int, ruleset: int | None,
             netns_fd: int | None = None) -> None:
    """Confine the calling (forked) process; raises ``ConfineError`` (the spawn fails).
    ``call`` is libc's ``prctl``, resolved in the parent."""
    if netns_fd is not None:  # while it still has CAP_SYS_ADMIN
        err = netns.join(netns_fd)
        if err:
            raise ConfineError(err, f"setns(network): {os.strerror(err)}")
    if call(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        raise ConfineError(ctypes.get_errno(), "prctl(PR_SET_NO_NEW_PRIVS)")
    if last_cap >= 0:  # root: nothing the command execs can hold a capability
        call(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0)
        for cap in range(last_cap + 1):
            if call(PR_CAPBSET_DROP, cap, 0, 0, 0) != 0:
                raise ConfineError(ctypes.get_errno(), f"prctl(PR_CAPBSET_DROP, {cap})")
    if ruleset is not None:
        err = landlock.restrict_self(ruleset)
        if err:
            raise ConfineError(err, f"landlock_restrict_self: {os.strerror(err)}")

