"""Requests on one session take effect in wire order, also when one of them must wait.

The link takes each request's effect before it reads the next frame. A few cannot take
theirs at once: a ``session.load`` or ``session.close`` behind another one of the same
session (they hold the session's lock for their whole length), and so whatever follows
them on that session. Such a request must not hold up the link: it marks its effect
point at once (its place in the session's *chain* is its effect's place) and takes its
effect once the request before it on the session has taken its own. The chain is one
event per request: a request waits for its predecessor's event only, so a request behind
a close waits until the close's stop has started, not until the close has finished (an
abort joins that stop, a prompt is refused). Nothing waits when nothing is pending.

A turn's first step waits until its session's chain is quiet (every request read before
has taken its effect), unless the turn is already being stopped: a stop written right
behind a prompt that had to queue still stops it before it runs a tool.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

import trio

from runtime.daemon.sessions.store import SessionStore
from runtime.link import effect_taken

STOPPING_POLL = 0.02
"""How often (s) a turn waiting for its session's chain re-checks whether it is stopped."""


class Place:
    """A request's place in its session's chain; a ``trio.TaskStatus[None]``: ``started()``
    says its effect is taken (the link may read on, the next request may take its own)."""

    def __init__(self, order: SessionOrder, session_id: str) -> None:
        self._order = order
        self._session_id = session_id
        self.event = trio.Event()

    def started(self, value: None = None) -> None:
        effect_taken()
        if not self.event.is_set():
            self.event.set()
            self._order._taken(self._session_id, self)


class SessionOrder:
    def __init__(self, sessions: SessionStore) -> None:
        self._sessions = sessions
        self._last: dict[str, Place] = {}
        self._pending: dict[str, int] = {}
        self._changed = trio.Event()

    @asynccontextmanager
    async def place(self, session_id: str) -> AsyncIterator[Place]:
        """Take this request's place in the session's chain and wait for the request
        before it (no checkpoint when there is none pending); its effect is taken at
        ``started()``, at the latest when the block ends."""
        before = self._last.get(session_id)
        mine = Place(self, session_id)
        self._last[session_id] = mine
        self._pending[session_id] = self._pending.get(session_id, 0) + 1
        try:
            if before is not None and not before.event.is_set():
                effect_taken()  # our place is our effect's: the link reads on
                await before.event.wait()
            yield mine
        finally:
            mine.started()

    def _taken(self, session_id: str, place: Place) -> None:
        self._pending[session_id] -= 1
        if not self._pending[session_id]:
            del self._pending[session_id]
        if self._last.get(session_id) is place:
            del self._last[session_id]
        self._changed.set()
        self._changed = trio.Event()

    async def quiet(self, session_id: str, stopping: Callable[[], bool]) -> None:
        """Return once every request on the session read so far has taken its effect, or
        soon after ``stopping()`` (the turn waiting here is being stopped: the requests
        still pending may be waiting for its end), at the latest :data:`STOPPING_POLL`
        later (it is re-checked on every change of the chain and at that interval)."""
        while self._pending.get(session_id) and not stopping():
            # A stop that does not touch the chain (ops.abort, shutdown's dispose) is
            # seen within a poll: the chain changing is not the only way out.
            with trio.move_on_after(STOPPING_POLL):
                await self._changed.wait()

    def lock_now_or_mark(self, session_id: str) -> trio.Lock:
        """The session's load/close lock; if it is held, the request that is about to
        wait for it marks its effect point first (the link reads on)."""
        lock = self._sessions.lock(session_id)
        if lock.locked():
            effect_taken()
        return lock
