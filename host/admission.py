"""Admission: bounded concurrency per tool class and per session, and a bounded queue.

A call is admitted when its class and its session both have a free slot, and
takes the two together: a call waiting for one never holds the other. (Taking
the session slot first let Bash calls queued for the process class use up their
session's slots and starve its Reads; taking the class slot first would let one
session's queue hold slots every other session needs.)

Searches (Grep and Glob: each a ripgrep process walking a tree) have a third, smaller
bound per session (``per_session_searches``): one session's burst of searches runs a
few at a time instead of taking the host's event loop and the machine's CPUs from every
other session (the goal: other sessions' calls stay within 2x of their idle latency
while one session runs 25 hostile searches). More searches at once than the machine has
CPUs finish no sooner anyway.

A call beyond the queue bound is refused (``Overloaded``, ``HOST_OVERLOADED`` on
the wire) instead of waiting; a call waiting for a slot is cancelled like any
other wait, so a stop reaches it (the caller maps that to
``ABORTED_BEFORE_DISPATCH``). ``tools.abort`` never passes through admission.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager

import trio

from protocol.hostconfig import (
    AdmissionLimits as AdmissionLimits,  # the settings, parsed with the host's
)
from protocol.toolclass import ToolClass


class Overloaded(Exception):
    pass


DEFAULT_PER_CLASS: Mapping[ToolClass, int] = {
    ToolClass.READ_ONLY: 32, ToolClass.PROCESS: 8, ToolClass.MUTATING: 8,
    ToolClass.PLUGIN: 16, ToolClass.LOCAL: 16,
}


class Admission:
    def __init__(self, limits: AdmissionLimits | None = None) -> None:
        self.limits = limits or AdmissionLimits()
        self._class_limit = {cls: self.limits.per_class.get(cls, DEFAULT_PER_CLASS[cls])
                             for cls in ToolClass}
        self._class_running = dict.fromkeys(ToolClass, 0)
        self._session_running: dict[str, int] = {}
        self._session_searching: dict[str, int] = {}
        self._released = trio.lowlevel.ParkingLot()  # waiters re-check on every release
        self.waiting = 0
        self.running = 0

    def _free(self, session_id: str, tool_class: ToolClass, search: bool) -> bool:
        return (self._class_running[tool_class] < self._class_limit[tool_class]
                and self._session_running.get(session_id, 0) < self.limits.per_session
                and (not search or self._session_searching.get(session_id, 0)
                     < self.limits.per_session_searches))

    def free_now(self, session_id: str, tool_class: ToolClass, search: bool = False) -> bool:
        """Whether a call could be admitted at once without passing anyone waiting: one
        that then runs to its end without a checkpoint (``Executor.execute_now``) holds no
        slot, since nothing else runs meanwhile."""
        return not self.waiting and self._free(session_id, tool_class, search)

    async def acquire(self, session_id: str, tool_class: ToolClass,
                      search: bool = False) -> None:
        """Take a class slot and a session slot together (and, for a ``search``, a search
        slot of the session), waiting abandonably for all to be free; give them back with
        :meth:`release`. A free slot is taken without a checkpoint: the hot path of a call
        that never waits."""
        if not self._free(session_id, tool_class, search):
            if self.waiting >= self.limits.max_waiting:
                raise Overloaded(f"{self.waiting} calls already wait for admission")
            self.waiting += 1
            try:
                while not self._free(session_id, tool_class, search):
                    await self._released.park()
            finally:
                self.waiting -= 1
        self._class_running[tool_class] += 1
        _count(self._session_running, session_id, 1)
        if search:
            _count(self._session_searching, session_id, 1)
        self.running += 1

    def release(self, session_id: str, tool_class: ToolClass, search: bool = False) -> None:
        self.running -= 1
        self._class_running[tool_class] -= 1
        _count(self._session_running, session_id, -1)
        if search:
            _count(self._session_searching, session_id, -1)
        if self.waiting:
            self._released.unpark_all()

    @asynccontextmanager
    async def slot(self, session_id: str, tool_class: ToolClass,
                   search: bool = False) -> AsyncIterator[None]:
        await self.acquire(session_id, tool_class, search)
        try:
            yield
        finally:
            self.release(session_id, tool_class, search)


def _count(counts: dict[str, int], key: str, by: int) -> None:
    """Add ``by`` to ``counts[key]``; a count back at zero is dropped (no entry per session
    that ever ran a call)."""
    left = counts.get(key, 0) + by
    if left:
        counts[key] = left
    else:
        del counts[key]
