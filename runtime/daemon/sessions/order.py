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

Each session owns its chain (``Session.order``); a session loaded again after a close
takes over its predecessor's, so the requests read meanwhile keep their order.

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
from runtime.link import Effect


class Place:
    """A request's place in its session's chain; a ``trio.TaskStatus[None]``: ``started()``
    takes the request's effect (the link may read on, the next request may take its own)."""

    def __init__(self, order: SessionOrder, effect: Effect) -> None:
        self._order = order
        self._effect = effect
        self.event = trio.Event()

    def started(self, value: None = None) -> None:
        self._effect.take()
        if not self.event.is_set():
            self.event.set()
            self._order._taken(self)


class SessionOrder:
    """One session's chain: the requests on it read so far and not yet in effect."""

    def __init__(self) -> None:
        self._last: Place | None = None
        self._pending = 0
        self._changed = trio.Event()

    @property
    def idle(self) -> bool:
        """No request on the session waits for its effect."""
        return not self._pending

    @asynccontextmanager
    async def place(self, effect: Effect) -> AsyncIterator[Place]:
        """Take the place in the chain of the request whose effect point is ``effect``, and
        wait for the request before it (no checkpoint when there is none pending); its
        effect is taken at ``started()``, at the latest when the block ends."""
        before = self._last
        mine = self._last = Place(self, effect)
        self._pending += 1
        try:
            if before is not None and not before.event.is_set():
                effect.take()  # our place is our effect's: the link reads on
                await before.event.wait()
            yield mine
        finally:
            mine.started()

    def _taken(self, place: Place) -> None:
        self._pending -= 1
        if self._last is place:
            self._last = None
        self._changed.set()
        self._changed = trio.Event()

    async def quiet(self, stopped: AbortSignal) -> None:
        """Return once every request on the session read so far has taken its effect, or
        as soon as ``stopped`` aborts (the turn waiting here is being stopped: the requests
        still pending may be waiting for its end; a stop that never touches the chain,
        ops.abort or shutdown's dispose, wakes it too)."""
        with cancel_on_abort(stopped):
            while self._pending:
                await self._changed.wait()
