"""Hosts that were killed but could not exit, reaped when they finally do.

A SIGKILLed process exits only once each of its threads leaves the kernel: a thread in
uninterruptible sleep (a read from a FUSE or network file system that never answers)
holds the whole process, for as long as that read lasts. The supervisor does not wait
for such a host (``runtime/supervision/link.py``: ``KILL_EXIT_TIMEOUT``): it counts it as dead
and lets a successor serve. The old host is not forgotten: it stays a child of the
runtime, listed here (never taken for an orphan to kill), and is reaped by its pidfd the
moment it exits, while the runtime lives. A runtime that exits first says which host it
leaves unreaped.
"""

from __future__ import annotations

import logging

import trio

from runtime.supervision.link import HostLink

log = logging.getLogger(__name__)


class LateReaper:
    """The killed hosts not yet exited, each awaited in the background."""

    def __init__(self) -> None:
        self._lingering: dict[int, HostLink] = {}

    @property
    def pids(self) -> frozenset[int]:
        """The hosts killed but not yet exited (still the runtime's children)."""
        return frozenset(self._lingering)

    def watch(self, nursery: trio.Nursery, link: HostLink) -> None:
        """Reap ``link``'s host, however late, in ``nursery``."""
        pid = link.pid
        if pid is None or pid in self._lingering:
            return
        self._lingering[pid] = link
        log.error("host %d was killed but cannot exit (a thread of it stuck in the kernel, "
                  "e.g. a read from a file system that does not answer): going on without "
                  "it; it is reaped when it exits", pid)
        nursery.start_soon(self._reap, pid, link)

    async def _reap(self, pid: int, link: HostLink) -> None:
        since = trio.current_time()
        try:
            code = await link.reap()
        except trio.Cancelled:
            log.error("host %d still has not exited (%.0f s after it was killed): the "
                      "runtime leaves it unreaped", pid, trio.current_time() - since)
            raise
        finally:
            self._lingering.pop(pid, None)
        log.warning("host %d exited at last (%s), %.1f s after it was given up: reaped",
                    pid, code, trio.current_time() - since)
