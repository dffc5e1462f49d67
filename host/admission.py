"""Admission: bounded concurrency per tool class and per session, and a bounded queue.

A call is admitted when its class and its session both have a free slot, and
takes the two together: a call waiting for one never holds the other. (Taking
the session slot first let Bash calls queued for the process class use up their
session's slots and starve its Reads; taking the class slot first would let one
session's queue hold slots every other session needs.)

A call beyond the queue bound is refused (``Overloaded``, ``HOST_OVERLOADED`` on
the wire) instead of waiting; a call waiting for a slot is cancelled like any
other wait, so a stop reaches it (the caller maps that to
``ABORTED_BEFORE_DISPATCH``). ``tools.abort`` never passes through admission.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

import trio

from protocol.toolclass import ToolClass


class Overloaded(Exception):
    pass


DEFAULT_PER_CLASS: Mapping[ToolClass, int] = {
    ToolClass.READ_ONLY: 32, ToolClass.PROCESS: 8, ToolClass.MUTATING: 8,
    ToolClass.PLUGIN: 16, ToolClass.LOCAL: 16,
}


@dataclass(frozen=True)
class AdmissionLimits:
    # Classes not named keep their default limit.
    per_class: Mapping[ToolClass, int] = field(default_factory=dict)
    per_session: int = 32
    max_waiting: int = 256


class Admission:
    def __init__(self, limits: AdmissionLimits | None = None) -> None:
        self.limits = limits or AdmissionLimits()
        self._class_limit = {cls: self.limits.per_class.get(cls, DEFAULT_PER_CLASS[cls])
                             for cls in ToolClass}
        self._class_running = dict.fromkeys(ToolClass, 0)
        self._session_running: dict[str, int] = {}
        self._released = trio.lowlevel.ParkingLot()  # waiters re-check on every release
        self.waiting = 0
        self.running = 0

    def _free(self, session_id: str, tool_class: ToolClass) -> bool:
        return (self._class_running[tool_class] < self._class_limit[tool_class]
                and self._session_running.get(session_id, 0) < self.limits.per_session)

    async def acquire(self, session_id: str, tool_class: ToolClass) -> None:
        """Take a class slot and a session slot together (waiting, abandonably, for both to
        be free); give them back with :meth:`release`. A free slot is taken without a
        checkpoint: the hot path of a call that never waits."""
        if not self._free(session_id, tool_class):
            if self.waiting >= self.limits.max_waiting:
                raise Overloaded(f"{self.waiting} calls already wait for admission")
            self.waiting += 1
            try:
                while not self._free(session_id, tool_class):
                    await self._released.park()
            finally:
                self.waiting -= 1
        self._class_running[tool_class] += 1
        self._session_running[session_id] = self._session_running.get(session_id, 0) + 1
        self.running += 1

    def release(self, session_id: str, tool_class: ToolClass) -> None:
        self.running -= 1
        self._class_running[tool_class] -= 1
        left = self._session_running[session_id] - 1
        if left:
            self._session_running[session_id] = left
        else:
            del self._session_running[session_id]
        if self.waiting:
            self._released.unpark_all()

    @asynccontextmanager
    async def slot(self, session_id: str, tool_class: ToolClass) -> AsyncIterator[None]:
        await self.acquire(session_id, tool_class)
        try:
            yield
        finally:
            self.release(session_id, tool_class)
