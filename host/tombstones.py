"""Tombstones: aborts that reached the host before the call they name.

Keyed by ``(session id, call id, tool name)`` so a delayed abort can never stop
a different tool that reuses the call id. Each lives ``ttl`` seconds; the
registry holds at most ``capacity`` and drops the oldest beyond it.

An entry holds a 16-byte digest of its key, not the key: ids are bounded only by the
frame limit (8 MiB), and ``capacity`` tombstones of such ids would be gigabytes.
"""

from __future__ import annotations

import hashlib
import time
from collections import OrderedDict
from collections.abc import Callable

TombstoneKey = tuple[str, str, str]


def _digest(key: TombstoneKey) -> bytes:
    # Lengths first: no two keys encode alike ("a", "b\0c") vs ("a\0b", "c").
    parts = [part.encode("utf-8", "surrogatepass") for part in key]
    h = hashlib.blake2b(digest_size=16)
    for part in parts:
        h.update(len(part).to_bytes(8, "little"))
        h.update(part)
    return h.digest()


class TombstoneRegistry:
    def __init__(self, *, ttl: float = 60.0, capacity: int = 10_000,
                 clock: Callable[[], float] = time.monotonic) -> None:
        if ttl <= 0 or capacity < 1:
            raise ValueError("ttl must be positive and capacity at least 1")
        self._ttl = ttl
        self._capacity = capacity
        self._clock = clock
        self._entries: OrderedDict[bytes, float] = OrderedDict()  # digest -> expiry
        self.expired = 0
        self.evicted = 0

    def add(self, key: TombstoneKey) -> None:
        self._purge()
        digest = _digest(key)
        self._entries.pop(digest, None)
        self._entries[digest] = self._clock() + self._ttl
        while len(self._entries) > self._capacity:
            self._entries.popitem(last=False)
            self.evicted += 1

    def take(self, key: TombstoneKey) -> bool:
        """Consume the tombstone for ``key``; True if a live one was there."""
        if not self._entries:
            return False  # the common case: no digest to compute
        expiry = self._entries.pop(_digest(key), None)
        if expiry is None:
            return False
        if expiry <= self._clock():
            self.expired += 1
            return False
        return True

    def __contains__(self, key: TombstoneKey) -> bool:
        expiry = self._entries.get(_digest(key))
        return expiry is not None and expiry > self._clock()

    def __len__(self) -> int:
        self._purge()
        return len(self._entries)

    def _purge(self) -> None:
        now = self._clock()
        # Insertion order is expiry order: every entry has the same ttl.
        while self._entries:
            key, expiry = next(iter(self._entries.items()))
            if expiry > now:
                break
            del self._entries[key]
            self.expired += 1
