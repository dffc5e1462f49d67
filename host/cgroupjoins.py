"""Which of the host's cgroups someone else wrote a process into: the cgroups a stop must
look through for processes of its call that joined another call's cgroup.

A root process may write itself into any ``cgroup.procs`` (``runtime.proc.escapes``,
``joined_elsewhere``). Looking through every cgroup of the host at every stop would read
every member of every call (in a wave of 50 stops, twice the wave's time). The kernel
says, though, when a ``cgroup.procs`` is written: an ``inotify`` ``IN_MODIFY`` on it, for
every write (``vfs_write``). The host watches each cgroup's ``cgroup.procs`` once its own
process is in it (``watch``, after the start: its own write is not seen); any event after
that is a foreign write, and that cgroup is a *suspect* for as long as it lives. A stop
looks through the suspects only (``suspects``): usually none, at the cost of one
non-blocking read.

A cgroup whose watch could not be added (the user's ``max_user_watches`` reached) is
always a suspect; without inotify at all, every cgroup is (``None``). Not covered: a
write in the instant between a cgroup's start and its watch (the writer must find the new
cgroup within it); the sandbox (Landlock) refuses such writes where it is on.
"""

from __future__ import annotations

import ctypes
import logging
import os
import struct

log = logging.getLogger(__name__)

_IN_MODIFY = 0x2
_IN_IGNORED = 0x8000
_IN_NONBLOCK = os.O_NONBLOCK
_IN_CLOEXEC = os.O_CLOEXEC
_EVENT = struct.Struct("iIII")  # wd, mask, cookie, len (then len bytes of name)


class JoinWatch:
    """The host's watch over its cgroups' ``cgroup.procs`` (one per process)."""

    def __init__(self) -> None:
        self._fd: int | None = None
        self._libc: ctypes.CDLL | None = None
        self._broken = False
        self._paths: dict[int, str] = {}
        self._tainted: set[str] = set()
        self._unwatched: set[str] = set()

    def _init(self) -> int | None:
        if self._fd is None and not self._broken:
            try:
                self._libc = ctypes.CDLL(None, use_errno=True)
                fd = int(self._libc.inotify_init1(_IN_NONBLOCK | _IN_CLOEXEC))
            except (OSError, AttributeError):
                fd = -1
            if fd < 0:
                self._broken = True
                log.warning("no inotify: every stop looks through all the host's cgroups")
                return None
            self._fd = fd
        return self._fd

    def watch(self, path: str) -> None:
        """Watch the cgroup ``path`` (its process already started in it)."""
        fd = self._init()
        if fd is None or self._libc is None:
            return
        wd = int(self._libc.inotify_add_watch(
            fd, os.fsencode(os.path.join(path, "cgroup.procs")), _IN_MODIFY))
        if wd < 0:
            self._unwatched.add(path)  # looked through at every stop instead
        else:
            self._paths[wd] = path

    def suspects(self, own: str) -> set[str] | None:
        """The cgroups other than ``own`` someone wrote a process into since they were
        watched (and those that could not be watched); ``None``: all of them (no
        inotify)."""
        if self._broken:
            return None
        if self._fd is not None:
            self._drain(self._fd)
        self._unwatched = {path for path in self._unwatched if os.path.isdir(path)}
        return (self._tainted | self._unwatched) - {own}

    def _drain(self, fd: int) -> None:
        while True:
            try:
                data = os.read(fd, 65536)
            except BlockingIOError:
                return
            offset = 0
            while offset + _EVENT.size <= len(data):
                wd, mask, _, length = _EVENT.unpack_from(data, offset)
                offset += _EVENT.size + length
                path = self._paths.get(wd)
                if path is None:
                    continue
                if mask & _IN_IGNORED:  # the cgroup was removed
                    del self._paths[wd]
                    self._tainted.discard(path)
                elif mask & _IN_MODIFY:
                    if path not in self._tainted:
                        log.warning("a process was written into cgroup %s from outside",
                                    path)
                    self._tainted.add(path)


JOINS = JoinWatch()
