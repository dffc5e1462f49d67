"""The requests one side of a link sent, by id, until their answers come back.

Each request this side sends gets an id (a counter's, or the caller's) and a waiter; the
reader hands each answer to ``Correlation.resolve``, which wakes its waiter (an answer to
a request nobody waits for any more is dropped). When the link closes, every waiter gets
:class:`ConnectionClosed`: nobody may wait for an answer forever.
"""

from __future__ import annotations

import itertools
import logging
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import msgspec
import trio

from protocol.envelope import IncomingResponse
from protocol.errors import RemoteError
from protocol.methods import RequestId

log = logging.getLogger(__name__)


class ConnectionClosed(Exception):
    """The link closed before the peer answered."""


class NotSent(ConnectionClosed):
    """The link was already closed: the request never left this process."""


@dataclass
class PendingAnswer:
    """The waiter of one request: set ``done`` once its result or error is in."""

    done: trio.Event = field(default_factory=trio.Event)
    result: msgspec.Raw | None = None
    error: RemoteError | ConnectionClosed | None = None


class Correlation:
    """The requests sent and not answered yet (``pending``), and the ids of the next."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.ids: Iterator[int] = itertools.count(1)
        self.pending: dict[RequestId, PendingAnswer] = {}

    def expect(self, request_id: RequestId) -> PendingAnswer:
        """Wait for the answer to ``request_id`` (sent, or about to be)."""
        pending = PendingAnswer()
        self.pending[request_id] = pending
        return pending

    def forget(self, request_id: RequestId) -> None:
        """Nobody will wait for the answer: drop it when it comes."""
        self.pending.pop(request_id, None)

    def resolve(self, response: IncomingResponse) -> None:
        """Hand an answer to its request's waiter (dropped if it has none)."""
        pending = self.pending.pop(response.id, None)
        if pending is None:
            log.debug("%s: dropped answer to forgotten request %r", self.name, response.id)
            return
        if response.error is not None:
            err = response.error
            pending.error = RemoteError(err.code, err.message, err.data)
        else:
            pending.result = response.result
        pending.done.set()

    def close(self) -> None:
        """The link closed: every waiter gets ``ConnectionClosed``."""
        for pending in self.pending.values():
            pending.error = ConnectionClosed(f"{self.name}: link closed")
            pending.done.set()
        self.pending.clear()


class SentRequest:
    """A request already queued on a link; :meth:`result` waits for its answer."""

    def __init__(self, correlation: Correlation, request_id: RequestId,
                 pending: PendingAnswer, decoder: msgspec.json.Decoder[Any]) -> None:
        self._correlation = correlation
        self.request_id = request_id
        self._pending = pending
        self._decoder = decoder

    async def result(self) -> Any:
        """The typed result; raise RemoteError on an error. A cancelled caller forgets the
        request (a late answer is dropped)."""
        try:
            await self._pending.done.wait()
        finally:
            self._correlation.forget(self.request_id)
        if self._pending.error is not None:
            raise self._pending.error
        assert self._pending.result is not None
        return self._decoder.decode(self._pending.result)

    def forget(self) -> None:
        """Nobody will wait for the answer: drop it when it comes."""
        self._correlation.forget(self.request_id)
