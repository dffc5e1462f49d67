"""Our children: the ones this process started, and the orphans the kernel hands it.

A host (and the runtime) is a child subreaper (``become_subreaper``): an orphaned
descendant is reparented to it, not to init. Every process it starts is registered
(``started_pids``, under ``spawn_lock`` while it is being started), so any other direct
child is an orphan it adopted: the escapee of some tree (``runtime.proc.proctree``), to
kill and reap. Reaping is by pid, never ``waitpid(-1)``, which would steal the exit
status of children trio or ``subprocess`` own.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
import os
import sys
import threading
from collections.abc import Collection

import psutil  # type: ignore[import-untyped, unused-ignore]  # types-psutil not a dev dep

from runtime.proc.libc import prctl

log = logging.getLogger(__name__)

PR_SET_PDEATHSIG = 1
PR_SET_CHILD_SUBREAPER = 36
spawn_lock = threading.Lock()
"""Held by the spawner around ``Popen`` and by a scan while it picks adopted orphans, so a
child being started is never taken for an orphan."""
started_pids: set[int] = set()
"""Pids of the processes we started and have not reaped yet: never orphans."""


_sweeping_orphans: list[bool] = [False]
"""Whether this process starts every child it has itself, so that any other child is an
orphan it adopted (``become_subreaper(sweep_orphans=True)``): a host (its tree kills also
take its adopted orphans) or the runtime (it kills them after a host's death). A process
with children it did not start through here (a test runner) must not."""


def become_subreaper(*, sweep_orphans: bool = False) -> bool:
    """Make this process the reaper of its orphaned descendants (Linux only);
    ``sweep_orphans``: it starts every child it has itself (``_sweeping_orphans``)."""
    _sweeping_orphans[0] = sweep_orphans
    if not sys.platform.startswith("linux"):
        log.info("child subreaper unsupported on %s; orphans go to init", sys.platform)
        return False
    if prctl()(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        err = ctypes.get_errno()
        log.warning("prctl(PR_SET_CHILD_SUBREAPER) failed: %s", os.strerror(err))
        return False
    return True


def adopted_orphans(children: list[int], procs: dict[int, psutil.Process],
                     prefix: str) -> list[int]:
    """Our direct children that we did not start and cannot attribute (module docstring).

    Nothing a process says about itself spares it: not a marker in its environment (it
    may be forged), not a command line like ours (a look-alike ``python -m host``). A
    child still being started is registered (the spawner holds the lock); one in the
    session of a live tool root or plugin server belongs to that still running tree (a
    session cannot be joined, only left).
    """
    orphans = []
    with spawn_lock:
        started = set(started_pids)
        for pid in children:
            if pid in started:
                continue
            try:
                if os.getsid(pid) in started:  # in a tool root's or plugin's session
                    continue
            except OSError:
                continue
            orphans.append(pid)
    return orphans


def reap_members(pids: Collection[int]) -> None:
    """Reap those of ``pids`` that are dead adopted children of ours (members of a killed
    tree); in a process that starts every child itself, every dead adopted orphan
    (``reap_orphan_zombies``). Never a child ``subprocess`` or the spawner owns."""
    adopted = set(adopted_children())
    started = set(started_pids)
    for pid in pids:
        if pid in adopted and pid not in started:
            try:
                os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:
                continue
    if _sweeping_orphans[0]:
        reap_orphan_zombies()


def reap_orphan_zombies() -> int:
    """In a process that starts every child itself (a host): reap every zombie child it
    did not start (an adopted orphan that died). How many. Reads only our own adopted
    children (``adopted_children``), never the whole process table."""
    reaped = 0
    started = set(started_pids)
    for pid in adopted_children():
        if pid in started:
            continue
        try:
            with open(f"/proc/{pid}/stat", "rb") as f:
                state = f.read().rsplit(b")", 1)[1].split()[0]
            if state != b"Z":
                continue
            if os.waitpid(pid, os.WNOHANG)[0]:
                reaped += 1
        except (OSError, IndexError):
            continue
    return reaped


def adopted_children() -> list[int]:
    """The children of our main thread: where the kernel reparents an orphan (to the
    subreaper's first live thread, its leader). Tool processes are children of the spawner
    thread (``host.spawn``), so a child being started is never among them, and no lock
    against the spawner is needed (nor a read of every thread's children)."""
    try:
        with open(f"/proc/self/task/{os.getpid()}/children", "rb") as f:
            return [int(pid) for pid in f.read().split()]
    except OSError:
        return []


def sweeps_orphans() -> bool:
    """Whether this process declared it starts every child itself (``become_subreaper``)."""
    return _sweeping_orphans[0]
