"""Requests on one session take effect in wire order, also around loads and closes.

The link takes each request's effect before it reads the next frame; a ``session.load``
or ``session.close`` holds the session's lock (``SessionStore.lock``, a FIFO ``trio.Lock``)
for its whole length, so a request on that session read after one must wait for it.
Waiting must not hold up the link: such a request marks its effect first (its place in
the lock's queue is its effect's place) and then passes through the lock. Nothing waits
when nothing holds the lock; and behind a close that is still settling, with no load
queued after it, nothing waits either: the session is closing (a prompt is refused, an
abort joins the close's stop).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from protocol.errors import RpcError
from runtime.rpc import effect_taken
from runtime.sessions import Session, SessionStore


class SessionOrder:
    def __init__(self, sessions: SessionStore) -> None:
        self._sessions = sessions
        self._loads_queued: dict[str, int] = {}  # loads waiting for the session's lock

    def loaded(self, session_id: str, *, closing: bool = False) -> Session | None:
        """The loaded session if it is closing (``closing``) or not closing, else None."""
        try:
            session = self._sessions.get(session_id)
        except RpcError:
            return None
        return session if session.closing == closing else None

    async def wait_turn(self, session_id: str) -> None:
        """Wait for the loads and closes of the session read before this request; no
        checkpoint when there is nothing to wait for."""
        try:
            self._sessions.path_of(session_id)  # a malformed id makes no lock
        except RpcError:
            return  # (and names no session: the caller answers NOT_FOUND)
        if self.loaded(session_id, closing=True) is not None and \
                not self._loads_queued.get(session_id):
            return
        lock = self._sessions.lock(session_id)
        if lock.locked():
            effect_taken()
            async with lock:
                pass

    @asynccontextmanager
    async def holding(self, session_id: str, *, load: bool = False) -> AsyncIterator[None]:
        """Hold the session's lock (a load or a close), marking the effect first if that
        means waiting for it."""
        lock = self._sessions.lock(session_id)
        if lock.locked():
            effect_taken()
        if load:
            self._loads_queued[session_id] = self._loads_queued.get(session_id, 0) + 1
        try:
            await lock.acquire()
        finally:
            if load:
                self._loads_queued[session_id] -= 1
                if not self._loads_queued[session_id]:
                    del self._loads_queued[session_id]
        try:
            yield
        finally:
            lock.release()
