"""Blocking work that many tasks ask for at once, done once for all of them
(``Coalesced``): the process table's listing (``proclisting``), a host's cgroups listed by
session (``escapes``)."""

from __future__ import annotations

from typing import Any

import trio


class Coalesced:
    """Blocking work many tasks ask for at once, done once for all of them: a caller gets
    the result of a run that *began after it asked* (a run in progress began earlier, so it
    waits for the next, which serves every caller that asked meanwhile)."""

    def __init__(self) -> None:
        self._lock: trio.Lock | None = None
        self._token: object = None
        self._asked = 0
        self._covered = 0
        self._result: Any = None

    async def run(self, work: Any) -> Any:
        """``await work()``'s result, shared with the callers it covers."""
        token = trio.lowlevel.current_trio_token()
        if self._lock is None or self._token is not token:  # a new trio run (tests)
            self._lock, self._token, self._asked, self._covered = trio.Lock(), token, 0, 0
        self._asked += 1
        mine = self._asked
        async with self._lock:
            if self._covered < mine:
                covers = self._asked
                self._result = await work()
                self._covered = covers
            return self._result
