"""Listings of the process table shared by the trees stopped in one wave.

The fallback (:mod:`runtime.proc.proctree`) finds a tree by ancestry, session and marker
in a listing of every process. Stopping 50 trees at once must not list the table 50 times
(each listing reads every process's environment): ``fresh_listing`` gives every caller a
listing begun after it asked, one listing serving all who asked meanwhile (``Coalesced``).
"""

from __future__ import annotations

import os
from collections import defaultdict
from dataclasses import dataclass

import psutil  # type: ignore[import-untyped, unused-ignore]  # types-psutil not a dev dep
import trio

from runtime.proc.coalesced import Coalesced

ENV_MARKER = "QUIESCE_HOST_CALL"
"""In the environment of every process a host starts: ``<host pid>:<session>:<call>``."""

Marker = tuple[str, str]
"""An environment variable name and value that attributes a process to a call."""


def environ_matches(proc: psutil.Process, key: str, value: str | None, prefix: bool) -> bool:
    try:
        found: str | None = proc.environ().get(key)
    except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
        return False
    if found is None:
        return False
    if value is None:
        return True
    return found.startswith(value) if prefix else found == value


@dataclass
class Listing:
    """One snapshot of the process table, shared by every tree that asked for one: each
    process with its parent, session and marker (read once per listing, not per tree)."""

    procs: dict[int, psutil.Process]
    children: defaultdict[int, list[int]]
    sids: dict[int, int]
    markers: dict[int, str | None]
    """``ENV_MARKER`` of every process (``None``: none, or not readable)."""

    @classmethod
    def take(cls) -> Listing:
        """Blocking (a thread's work)."""
        children: defaultdict[int, list[int]] = defaultdict(list)
        procs: dict[int, psutil.Process] = {}
        sids: dict[int, int] = {}
        markers: dict[int, str | None] = {}
        me = os.getpid()
        for proc in psutil.process_iter(["ppid"]):
            pid = proc.pid
            ppid = proc.info.get("ppid")
            procs[pid] = proc
            if isinstance(ppid, int):
                children[ppid].append(pid)
            try:
                sids[pid] = os.getsid(pid)
            except OSError:
                continue
            if pid != me:
                try:
                    markers[pid] = proc.environ().get(ENV_MARKER)
                except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
                    markers[pid] = None
        return cls(procs, children, sids, markers)

    def marker_matches(self, pid: int, proc: psutil.Process, marker: Marker,
                       prefix: bool) -> bool:
        key, value = marker
        if key != ENV_MARKER:
            return environ_matches(proc, key, value, prefix)
        found = self.markers.get(pid)
        if found is None:
            return False
        return found.startswith(value) if prefix else found == value


_LISTINGS = Coalesced()


async def fresh_listing() -> Listing:
    """A listing of the process table begun after the call (in a thread), shared by every
    tree stopped in the same wave (50 trees stopped at once list a few times, not 200)."""
    listing: Listing = await _LISTINGS.run(lambda: trio.to_thread.run_sync(Listing.take))
    return listing
