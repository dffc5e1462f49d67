"""Process trees: find them, and kill them so they stay dead.

A tool process is started in a new session (its pid is its session and group
id) with an attribution marker in its environment. Its *tree* is everything
that can be traced back to it:

- descendants of the root (while the root lives);
- processes in the root's session or process group (``&`` jobs, and orphans
  whose parent died: the session id survives reparenting);
- processes carrying the marker in their environment (a ``setsid`` child, a
  double fork, a ``nohup`` job: they inherit the environment);
- descendants of any of these, and anything seen in an earlier listing.

``kill_tree`` lists the tree *before* signalling, TERMs every process group
and every escaped member (plus CONT, so a stopped member can act on it), keeps
re-listing during the grace period (a member may fork, an orphan may be
reparented to us), KILLs survivors, reaps adopted children by pid (never
``waitpid(-1)``, which would steal the exit status of children trio or
``subprocess`` own), and verifies with a final listing that nothing remains.
The host is a child subreaper (``become_subreaper``), so orphans of a tree are
reparented to it and reaped here rather than lingering under init.

A member that clears its environment *and* leaves the session *and* is
orphaned before any listing sees it cannot be attributed to a call. In a host
(a tree marked ``ENV_MARKER=<our pid>:…``), every kill therefore also takes
the host's *adopted orphans*: direct children it did not start and not in the
session of a live process it started (a tool root or plugin server). Nothing a
process says about itself spares it: a marker (which it may forge) or a command
line like the host's (a look-alike). Every process the host starts is
registered, so such a child can only be an escapee of some tree; it may belong
to another call still running, but it is killed now, since the host cannot tell
whose it is and it must not outlive its own call.

This is the fallback: where the host has cgroups (:mod:`runtime.proc.cgroups`), a tree
is its cgroup, and none of the above is needed. Starting processes so they can
be found is :mod:`host.spawn`.
"""

from __future__ import annotations

import logging
import os
import select
import signal
import time
from collections.abc import Collection
from dataclasses import dataclass

import psutil  # type: ignore[import-untyped, unused-ignore]  # types-psutil not a dev dep
import trio

from runtime.proc.orphans import adopted_orphans, sweeps_orphans
from runtime.proc.proclisting import ENV_MARKER as ENV_MARKER
from runtime.proc.proclisting import Listing, environ_matches, fresh_listing
from runtime.proc.proclisting import Marker as Marker

log = logging.getLogger(__name__)

KILL_TIMEOUT = 2.0
"""How long the KILL phase keeps trying before reporting survivors."""
_RESCAN = 0.05
"""How often a tree that has not died yet (a grace running) is listed again."""


def _alive(proc: psutil.Process) -> bool:
    try:
        return bool(proc.status() != psutil.STATUS_ZOMBIE)
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return False


def find_marked(key: str, value: str | None = None, *,
                prefix: bool = False) -> list[psutil.Process]:
    """Every live process whose environment has ``key`` (equal to, or starting with, ``value``).

    For crash cleanup: after a host died, its marker finds what it left behind.
    Processes we may not inspect (other users) are skipped, not errors.
    """
    me = os.getpid()
    return [p for p in psutil.process_iter()
            if p.pid != me and _alive(p) and environ_matches(p, key, value, prefix)]


@dataclass(frozen=True)
class KillReport:
    """What a kill did: how many processes the tree had, and how they died."""

    found: int
    """Distinct live processes seen in the tree."""
    terminated: int
    """Died during the TERM grace."""
    killed: int
    """Were still alive after the grace and got KILL."""
    survivors: tuple[int, ...]
    """Still alive when the KILL phase gave up (should always be empty)."""
    elapsed: float

    @property
    def clean(self) -> bool:
        return not self.survivors


class _Tree:
    """The membership rules of one tree, and the memory of members seen so far."""

    def __init__(self, root_pid: int | None, marker: Marker | None, *, value_prefix: bool,
                 reap_root: bool, orphans_of: str | None = None) -> None:
        self.root_pid = root_pid
        self.marker = marker
        self.value_prefix = value_prefix
        self.reap_root = reap_root
        self.orphans_of = orphans_of
        """A host's marker prefix: its adopted orphans are members too (module docstring)."""
        self.known: dict[int, psutil.Process] = {}
        self.sessions: set[int] = set() if root_pid is None else {root_pid}
        self._excluded_sessions = {os.getsid(0), 0, 1}
        self.root_proc: psutil.Process | None = None
        if root_pid is not None:
            try:
                self.root_proc = psutil.Process(root_pid)
            except psutil.NoSuchProcess:
                self.root_proc = None

    def scan(self, listing: Listing) -> dict[int, psutil.Process]:
        """Every current member (live or zombie) in ``listing``, added to ``known``."""
        me = os.getpid()
        procs, children = listing.procs, listing.children
        members: dict[int, psutil.Process] = {}
        for pid, proc in procs.items():
            if pid == me:
                continue
            if self._is_seed(pid, proc, listing):
                members[pid] = proc
        if self.orphans_of is not None:
            for pid in adopted_orphans(children.get(me, []), procs, self.orphans_of):
                members[pid] = procs[pid]
        stack = list(members)
        while stack:
            for child in children.get(stack.pop(), ()):
                if child not in members and child != me:
                    members[child] = procs[child]
                    stack.append(child)
        self.known.update(members)
        for pid in members:
            sid = listing.sids.get(pid)
            if sid is not None:
                self.sessions.add(sid)
        self.sessions -= self._excluded_sessions
        return members

    def _is_seed(self, pid: int, proc: psutil.Process, listing: Listing) -> bool:
        if pid == self.root_pid:
            return self.root_proc is not None and proc == self.root_proc
        known = self.known.get(pid)
        if known is not None and known == proc:
            return True
        sid = listing.sids.get(pid)
        if sid is None:
            return False
        if sid in self.sessions:
            return True
        if self.marker is not None:
            return listing.marker_matches(pid, proc, self.marker, self.value_prefix)
        return False

    def reap(self, proc: psutil.Process) -> None:
        """Reap a dead member that is our (adopted) child; never the caller's root."""
        if proc.pid == self.root_pid and not self.reap_root:
            return
        try:
            if proc.ppid() != os.getpid():
                return
            os.waitpid(proc.pid, os.WNOHANG)
        except (psutil.NoSuchProcess, ChildProcessError):
            pass


def _signal(proc: psutil.Process, sig: signal.Signals) -> None:
    try:
        proc.send_signal(sig)  # psutil refuses a reused pid
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        pass


def _signal_groups(procs: list[psutil.Process], sig: signal.Signals) -> None:
    mine = os.getpgrp()
    groups: set[int] = set()
    for proc in procs:
        try:
            groups.add(os.getpgid(proc.pid))
        except OSError:
            continue
    for group in groups - {mine, 0, 1}:
        try:
            os.killpg(group, sig)
        except (ProcessLookupError, PermissionError):
            pass


class _Tracked:
    """The live members of a tree being killed, each with a pidfd: their exits are waited
    for (the pidfd turns readable), not polled."""

    def __init__(self, tree: _Tree) -> None:
        self.tree = tree
        self.live: dict[int, tuple[psutil.Process, int]] = {}
        self.found: set[int] = set()

    def add(self, members: dict[int, psutil.Process]) -> None:
        for pid, proc in members.items():
            if pid in self.live:
                continue
            try:
                pidfd = os.pidfd_open(pid)
            except OSError:
                continue
            # The pidfd names whatever has that pid now: it must be the process listed.
            if not _alive(proc) or not proc.is_running():
                os.close(pidfd)
                self.tree.reap(proc)
                continue
            self.live[pid] = (proc, pidfd)
            self.found.add(pid)

    def drop_exited(self) -> None:
        for pid, (proc, pidfd) in list(self.live.items()):
            if select.select([pidfd], [], [], 0)[0]:
                del self.live[pid]
                trio.lowlevel.notify_closing(pidfd)
                os.close(pidfd)
                self.tree.reap(proc)

    async def wait_all(self, deadline: float) -> None:
        """Until every live member exited, or ``deadline`` (``trio.current_time``)."""
        with trio.move_on_at(deadline):
            for _, pidfd in list(self.live.values()):
                await trio.lowlevel.wait_readable(pidfd)
        self.drop_exited()

    def close(self) -> None:
        for _, pidfd in self.live.values():
            trio.lowlevel.notify_closing(pidfd)
            os.close(pidfd)
        self.live.clear()


async def _kill(tree: _Tree, grace: float, kill_timeout: float) -> KillReport:
    started = time.monotonic()
    tracked = _Tracked(tree)
    try:
        return await _kill_tracked(tree, tracked, started, grace, kill_timeout)
    finally:
        tracked.close()


async def _kill_tracked(tree: _Tree, tracked: _Tracked, started: float, grace: float,
                        kill_timeout: float) -> KillReport:
    termed: set[int] = set()
    killed: set[int] = set()
    now = trio.current_time()
    phase_end = now + grace
    sig = signal.SIGTERM
    tracked.add(tree.scan(await fresh_listing()))
    last_listing = trio.current_time()
    verified = True  # no member exited since the last listing
    while True:
        if not tracked.live:
            if verified:
                break
            # Verify with a listing begun now: a member may have forked, an orphan may
            # have moved under us meanwhile.
            tracked.add(tree.scan(await fresh_listing()))
            last_listing, verified = trio.current_time(), True
            continue
        sent = termed if sig is signal.SIGTERM else killed
        fresh = [proc for pid, (proc, _) in tracked.live.items() if pid not in sent]
        if fresh:
            _signal_groups(fresh, sig)
            for proc in fresh:
                _signal(proc, sig)
                if sig is signal.SIGTERM:
                    _signal(proc, signal.SIGCONT)
            sent.update(p.pid for p in fresh)
        now = trio.current_time()
        if now >= phase_end:
            if sig is signal.SIGKILL:
                break
            sig, phase_end = signal.SIGKILL, now + kill_timeout
            continue
        await tracked.wait_all(min(phase_end, last_listing + _RESCAN))
        verified = False
        if tracked.live and trio.current_time() - last_listing >= _RESCAN:
            tracked.add(tree.scan(await fresh_listing()))  # during a long grace
            last_listing, verified = trio.current_time(), True
    if tracked.live:  # let the last KILLs land before calling anything a survivor
        await tracked.wait_all(trio.current_time() + 0.05)
    survivors = tuple(sorted(tracked.live))
    found = tracked.found
    report = KillReport(found=len(found), terminated=len(found - killed), killed=len(killed),
                        survivors=survivors, elapsed=time.monotonic() - started)
    if survivors:
        log.error("process tree %s: %d survivors after KILL: %s", tree.root_pid,
                  len(survivors), survivors)
    elif report.found:
        log.info("process tree %s: %d processes, %d needed KILL, %.3f s", tree.root_pid,
                 report.found, report.killed, report.elapsed)
    return report


async def kill_tree(root_pid: int, *, grace: float, marker: Marker | None = None,
                    reap_root: bool = False, kill_timeout: float = KILL_TIMEOUT) -> KillReport:
    """TERM the tree of ``root_pid``, KILL what survives ``grace``, reap, verify.

    Runs shielded with its own deadline (``grace + kill_timeout`` plus slack),
    so a cancelled caller still gets a dead tree. ``reap_root`` is for a root
    nobody else will wait for; a root owned by ``subprocess`` is left to it.
    """
    prefix = f"{os.getpid()}:"
    ours = (sweeps_orphans() and marker is not None and marker[0] == ENV_MARKER
            and marker[1].startswith(prefix))
    tree = _Tree(root_pid, marker, value_prefix=False, reap_root=reap_root,
                 orphans_of=prefix if ours else None)
    return await _shielded_kill(tree, grace, kill_timeout)


async def kill_marked(key: str, value: str, *, prefix: bool = False, grace: float,
                      kill_timeout: float = KILL_TIMEOUT) -> KillReport:
    """Kill every process carrying a marker (and its descendants): crash cleanup."""
    tree = _Tree(None, (key, value), value_prefix=prefix, reap_root=True)
    return await _shielded_kill(tree, grace, kill_timeout)


async def kill_adopted_children(*, spare: Collection[int], grace: float) -> int:
    """Kill the trees of our direct children but ``spare``: for a process that starts no
    child of its own but those (the runtime: its hosts), every other child is an orphan
    it adopted as a subreaper, e.g. a tool process that cleared its environment and left
    its session, orphaned by a dead host. How many processes were found."""
    found = 0
    for child in psutil.Process().children():
        if child.pid not in spare:
            found += (await kill_tree(child.pid, grace=grace, reap_root=True)).found
    return found


async def _shielded_kill(tree: _Tree, grace: float, kill_timeout: float) -> KillReport:
    started = time.monotonic()
    with trio.CancelScope(shield=True) as scope:
        scope.deadline = trio.current_time() + grace + kill_timeout + 5.0
        return await _kill(tree, grace, kill_timeout)
    # Only a listing that never finishes gets here; say so rather than hang.
    left = tuple(sorted(p.pid for p in tree.known.values() if _alive(p)))
    log.error("process tree %s: kill overran its deadline; alive: %s", tree.root_pid, left)
    return KillReport(found=len(tree.known), terminated=0, killed=0, survivors=left,
                      elapsed=time.monotonic() - started)
