"""Admission: bounded concurrency per tool class and per session, and a bounded queue.

A call beyond the queue bound is refused (``HOST_OVERLOADED``) instead of
waiting; a call waiting for a slot is cancelled like any other wait, so a stop
reaches it (the caller maps that to ``ABORTED_BEFORE_DISPATCH``). ``tools.abort``
never passes through admission.
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
        self._class_slots = {
            cls: trio.Semaphore(self.limits.per_class.get(cls, DEFAULT_PER_CLASS[cls]))
            for cls in ToolClass
        }
        self._session_slots: dict[str, trio.Semaphore] = {}
        self.waiting = 0
        self.running = 0

    @asynccontextmanager
    async def slot(self, session_id: str, tool_class: ToolClass) -> AsyncIterator[None]:
        class_slots = self._class_slots[tool_class]
        session_slots = self._session_slots.setdefault(
            session_id, trio.Semaphore(self.limits.per_session))
        if self.waiting >= self.limits.max_waiting and (
                class_slots.value == 0 or session_slots.value == 0):
            raise Overloaded(f"{self.waiting} calls already wait for admission")
        self.waiting += 1
        try:
            await session_slots.acquire()
            try:
                await class_slots.acquire()
            except BaseException:
                session_slots.release()
                raise
        finally:
            self.waiting -= 1
        self.running += 1
        try:
            yield
        finally:
            self.running -= 1
            class_slots.release()
            session_slots.release()
