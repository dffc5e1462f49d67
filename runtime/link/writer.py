"""A link's single writer: the one task that writes its stream, and the bound on its output.

Two tasks writing one stream raise ``BusyResourceError``, and a cancelled ``send_all``
could tear a frame: so every frame is queued (never blocking, so each keeps its order) and
one task writes them, joining what is queued into one write. Output waiting for a slow
peer can be bounded (``max_queued``): from a quarter of it ``room`` is cleared, and the
endpoint's reader takes no next frame until the writer is down to an eighth; past it the
peer is taken as gone: its output is dropped and the link told (``on_gone``).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable

import trio

from protocol.framing import encode_frame
from runtime.link.correlation import NotSent

log = logging.getLogger(__name__)

WRITE_COALESCE = 65536
"""Queued frames are joined into one write up to about this many bytes."""
MAX_QUEUED = 64 * 1024 * 1024
"""Bytes of output a link with a bound (``max_queued``) may hold for its peer: past it
the peer is gone; from a quarter of it the reader waits (the client link's bound)."""


class Writer:
    """The frames queued for the peer, and the task (``run``) that writes them in order."""

    def __init__(self, name: str, send: trio.abc.SendStream, max_queued: int | None,
                 on_gone: Callable[[], None]) -> None:
        """``max_queued``: bytes of output held for the peer (None: no bound);
        ``on_gone``: called once the peer is taken as gone (its output past the bound)."""
        self.name = name
        self._send = send
        self._on_gone = on_gone
        # Unbounded: a sender never blocks or tears a frame; producers bound their output.
        self._out_send, self._out_receive = trio.open_memory_channel[bytes](math.inf)
        self._max_queued = max_queued
        self.queued = 0  # bytes of output not written yet
        self.room = trio.Event()  # set while the reader need not wait for the writer
        self.room.set()
        self._dropped = False  # the peer left too much unread: its output is discarded
        self._write_scope: trio.CancelScope | None = None
        self.frames_out = 0

    def close(self) -> None:
        """Nothing more is queued: ``run`` returns once what is queued is written."""
        self._out_send.close()

    def enqueue(self, payload: bytes) -> None:
        """Queue a message; raise ``NotSent`` if the writer is gone."""
        frame = encode_frame(payload)
        try:
            self._out_send.send_nowait(frame)
        except (trio.ClosedResourceError, trio.BrokenResourceError):
            # Closed: the link drained and ended; broken: its writer was cancelled.
            raise NotSent(f"{self.name}: link closed") from None
        self._queued(len(frame))

    def enqueue_quietly(self, payload: bytes) -> None:
        """Queue a message; dropped (logged) if the writer is gone."""
        frame = encode_frame(payload)
        try:
            self._out_send.send_nowait(frame)
        except (trio.ClosedResourceError, trio.BrokenResourceError):
            log.debug("%s: message dropped, link closed", self.name)
            return
        self._queued(len(frame))

    def _queued(self, size: int) -> None:
        self.queued += size
        limit = self._max_queued
        if limit is None or self._dropped:
            return
        if self.queued > limit:
            log.error("%s: the peer left %d bytes of output unread (limit %d): taken as "
                      "gone, its output dropped", self.name, self.queued, limit)
            self._dropped = True
            if self._write_scope is not None:
                self._write_scope.cancel()
            self._on_gone()
        elif self.queued > limit // 4 and self.room.is_set():
            self.room = trio.Event()

    def _written(self, size: int) -> None:
        self.queued -= size
        if (self._max_queued is not None and self.queued <= self._max_queued // 8
                and not self.room.is_set()):  # not at a quarter: no pause per frame
            self.room.set()

    async def run(self) -> None:
        """Write every frame queued, in order, until ``close`` (or the peer is gone)."""
        broken = False
        async with self._out_receive:
            async for frame in self._out_receive:
                if broken or self._dropped:
                    self._written(len(frame))
                    continue
                # Every frame already queued goes out in the same write: under load one
                # syscall (and one wake-up of the peer) carries many answers. Frames are
                # whole, so the peer's decoder splits them as before; order is kept.
                frames = [frame]
                size = len(frame)
                while size < WRITE_COALESCE:
                    try:
                        frames.append(self._out_receive.receive_nowait())
                    except (trio.WouldBlock, trio.EndOfChannel):
                        break
                    size += len(frames[-1])
                try:
                    with trio.CancelScope() as self._write_scope:  # cancelled: dropped
                        await self._send.send_all(
                            frame if len(frames) == 1 else b"".join(frames))
                    if not self._write_scope.cancelled_caught:
                        self.frames_out += len(frames)
                except (trio.BrokenResourceError, trio.ClosedResourceError):
                    log.info("%s: peer stopped reading; dropping further output", self.name)
                    broken = True
                finally:
                    self._write_scope = None
                self._written(size)
