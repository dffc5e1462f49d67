"""Processes that left the host's cgroups: found among candidates the host names, killed
on pidfds.

A process running as root may write itself into any cgroup's ``cgroup.procs`` (root passes
the permission check on the common ancestor). ``host.spawn`` names the candidates once a
call's cgroup is empty (the call's root and the host's adopted orphans); ``escapees``
lists those outside the host's directory with their subtrees, ``joined_elsewhere`` those
of the call's session that joined another call's cgroup, ``kill_listed`` KILLs them
(each checked to still be the process listed) and ``wait_pidfds`` waits for their exits.
Standard library and trio only, as :mod:`runtime.proc.cgroups`.
"""

from __future__ import annotations

import os
import select
import signal

import trio

from runtime.proc.cgroups import own_cgroup_dir
from runtime.proc.coalesced import Coalesced


def _children(pid: int | str) -> list[int]:
    """The children of every thread of ``pid``."""
    pids: list[int] = []
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return pids
    for tid in tasks:
        try:
            with open(f"/proc/{pid}/task/{tid}/children", "rb") as f:
                pids += [int(child) for child in f.read().split()]
        except OSError:
            continue
    return pids


def _stat(pid: int) -> tuple[bytes, int] | None:
    """A process's state letter and parent, or ``None`` if it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            fields = f.read().rsplit(b")", 1)[1].split()
        return fields[0], int(fields[1])
    except (OSError, IndexError, ValueError):
        return None


def _ppid(pid: int) -> int | None:
    stat = _stat(pid)
    return None if stat is None else stat[1]


def escapees(base: str, candidates: list[int]) -> list[tuple[int, int]]:
    """``(pid, parent)`` of each of ``candidates`` (children of ours) that is in no cgroup
    below ``base`` (the host's directory; a process in ``base`` itself wrote itself there),
    with the whole subtree below it. Blocking; reads only
    those processes and their descendants."""
    me = os.getpid()
    found: list[tuple[int, int]] = []
    for pid in candidates:
        stat = _stat(pid)
        where = own_cgroup_dir(pid)
        if stat is None or stat[0] == b"Z" or where is None:
            continue  # gone, or exited (a zombie has no children and runs nothing)
        if where.startswith(base + "/"):  # in a call's cgroup (base itself holds none)
            continue
        stack = [(pid, me)]
        while stack:
            member, parent = stack.pop()
            found.append((member, parent))
            stack += [(child, member) for child in _children(member)]
    return found


def session_of(pid: int) -> int | None:
    """A process's session id, or ``None`` if it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return int(f.read().rsplit(b")", 1)[1].split()[3])
    except (OSError, IndexError, ValueError):
        return None


def _cgroup_dirs(path: str, skip: str) -> list[str]:
    """``path`` and every cgroup below it, but ``skip`` and its own."""
    if path == skip:
        return []
    found = [path]
    try:
        with os.scandir(path) as entries:
            subdirs = [e.path for e in entries if e.is_dir(follow_symlinks=False)]
    except OSError:
        return found
    for sub in subdirs:
        found += _cgroup_dirs(sub, skip)
    return found


Sessions = dict[int, list[tuple[int, int]]]
"""Session id → ``(pid, parent)`` of each process of that session in a host's cgroups."""


def _sessions(base: str, within: set[str] | None = None) -> Sessions:
    """Every process in a cgroup below ``base`` (the host's directory), or only in the
    cgroups ``within`` (and those below them), by session. Blocking: the member lists of
    those cgroups, and each member's ``stat``."""
    found: Sessions = {}
    dirs = (_cgroup_dirs(base, "") if within is None
            else [d for path in sorted(within) for d in _cgroup_dirs(path, "")])
    for path in dirs:
        try:
            with open(os.path.join(path, "cgroup.procs"), "rb") as f:
                members = [int(pid) for pid in f.read().split()]
        except (OSError, ValueError):
            continue
        for pid in members:
            try:
                with open(f"/proc/{pid}/stat", "rb") as f:
                    fields = f.read().rsplit(b")", 1)[1].split()
                found.setdefault(int(fields[3]), []).append((pid, int(fields[1])))
            except (OSError, IndexError, ValueError):
                continue
    return found


_LISTINGS: dict[str, Coalesced] = {}
"""One listing of a host's cgroups by session, taken on a thread and shared by every
stop that asked before it began (200 calls stopped at once list a few times, not 200:
each listing reads every member of every call)."""


async def joined_elsewhere(base: str, own: str, session: int,
                           within: set[str] | None = None) -> list[tuple[int, int]]:
    """``(pid, parent)`` of each process of the call whose session is ``session`` (its
    root's pid, a session leader the host holds unreaped, so no other process can have
    that session) that is in a cgroup below ``base`` other than the call's own (``own``,
    empty by now): one that wrote itself into another live call's ``cgroup.procs``, with
    its subtree. Which call a process belongs to is the host's record (the session its
    call's root began), not the cgroup it joined. The listing is shared by the stops of a
    wave (``Coalesced``); with ``within`` (the cgroups someone wrote a process into,
    ``host.cgroupjoins``, usually none or few) only those are read, at once."""
    if within is not None:
        listing = _sessions(base, within)
    else:
        if base not in _LISTINGS:
            _LISTINGS.clear()  # one host's directory at a time, in practice
            _LISTINGS[base] = Coalesced()
        listing = await _LISTINGS[base].run(
            lambda: trio.to_thread.run_sync(_sessions, base))
    found: list[tuple[int, int]] = []
    stack = [(pid, parent) for pid, parent in listing.get(session, [])
             if own_cgroup_dir(pid) != own]
    while stack:
        member, parent = stack.pop()
        found.append((member, parent))
        stack += [(child, member) for child in _children(member)]
    return found


def kill_listed(found: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """KILL each ``(pid, parent)`` still that process (its parent unchanged since it was
    listed, checked on a pidfd); ``(pid, pidfd)`` of those signalled (``wait_pidfds``)."""
    signalled: list[tuple[int, int]] = []
    for pid, parent in found:
        try:
            pidfd = os.pidfd_open(pid)
        except OSError:
            continue
        # An orphan is reparented to us (a subreaper): that is still the process listed.
        if _ppid(pid) not in (parent, os.getpid()):
            os.close(pidfd)
            continue
        try:
            signal.pidfd_send_signal(pidfd, signal.SIGKILL)
        except OSError:
            os.close(pidfd)
            continue
        signalled.append((pid, pidfd))
    return signalled


async def wait_pidfds(signalled: list[tuple[int, int]], within: float) -> tuple[int, ...]:
    """Until every ``(pid, pidfd)``'s process exited (its pidfd is readable), at most
    ``within``; closes the pidfds. The pids still alive."""
    try:
        with trio.move_on_after(within):
            for _, fd in signalled:
                await trio.lowlevel.wait_readable(fd)
        return tuple(pid for pid, fd in signalled if not select.select([fd], [], [], 0)[0])
    finally:
        for _, fd in signalled:
            trio.lowlevel.notify_closing(fd)
            os.close(fd)
