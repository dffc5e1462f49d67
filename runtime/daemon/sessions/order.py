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
behind a prompt that had to queue still stops it before it runs a tool. It wakes when the
chain changes or the turn's stop begins, never on a timer.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import trio

from runtime.agent.registry.signal import AbortSignal, cancel_on_abort
from runtime.daemon.sessions.store import SessionStore
from runtime.link import Effect


class Place:
    """A request's place in its session's chain; a ``trio.TaskStatus[None]``: ``started()``
    takes the request's effect (the link may read on, the next request may take its own)."""

    def __init__(self, order: SessionOrder, session_id: str, effect: Effect) -> None:
        self._order = order
        self._session_id = session_id
        self._effect = effect
        self.event = trio.Event()

    def started(self, value: None = None) -> None:
        self._effect.take()
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
    async def place(self, session_id: str, effect: Effect) -> AsyncIterator[Place]:
        """Take the place in the session's chain of the request whose effect point is
        ``effect``, and wait for the request before it (no checkpoint when there is none
        pending); its effect is taken at ``started()``, at the latest when the block ends."""
        before = self._last.get(session_id)
        mine = Place(self, session_id, effect)
        self._last[session_id] = mine
        self._pending[session_id] = self._pending.get(session_id, 0) + 1
        try:
            if before is not None and not before.event.is_set():
                effect.take()  # our place is our effect's: the link reads on
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

    async def quiet(self, session_id: str, stopped: AbortSignal) -> None:
        """Return once every request on the session read so far has taken its effect, or
        as soon as ``stopped`` aborts (the turn waiting here is being stopped: the requests
        still pending may be waiting for its end; a stop that never touches the chain,
        ops.abort or shutdown's dispose, wakes it too)."""
        with cancel_on_abort(stopped):
            while self._pending.get(session_id):
                await self._changed.wait()

    def lock_now_or_mark(self, session_id: str, effect: Effect) -> trio.Lock:
        """The session's load/close lock; if it is held, the request that is about to
        wait for it takes its ``effect`` first (the link reads on)."""
        lock = self._sessions.lock(session_id)
        if lock.locked():
            effect.take()
        return lock
