"""A tap on the ACP input: it sees each request and notification in wire order, as soon
as its bytes are read, before the endpoint handles any of them.

The endpoint takes requests in wire order (a ``session/prompt`` reaches the native
link before a later frame is handled), but ``$/cancel_request`` names a request only
by id, which the endpoint does not tell handlers; and a ``session/cancel`` read in the
same chunk as its prompt should stop that prompt before it reaches the agent at all.
The tap frames and parses the same bytes with the same sans-IO functions the endpoint
uses (``protocol.framing``, ``protocol.envelope.parse_frame``) and reports every
request and notification the endpoint will handle, synchronously and in wire order.
Bytes pass through untouched; what the tap cannot parse is the endpoint's to answer.
"""

from __future__ import annotations

from collections.abc import Callable

import trio

from protocol.envelope import Batch, IncomingNotification, IncomingRequest, parse_frame
from protocol.framing import DEFAULT_MAX_FRAME_SIZE, Frame, FrameDecoder
from protocol.methods import Direction

OnRequest = Callable[[IncomingRequest | IncomingNotification], None]


def _requests(frame: bytes, direction: Direction
              ) -> list[IncomingRequest | IncomingNotification]:
    parsed = parse_frame(frame, direction)
    items = parsed.items if isinstance(parsed, Batch) else (parsed,)
    return [item for item in items if isinstance(item, IncomingRequest | IncomingNotification)]


class ReceiveTap(trio.abc.ReceiveStream):
    """Reports the requests the peer sends, before the endpoint reads them."""

    def __init__(self, inner: trio.abc.ReceiveStream, direction: Direction,
                 on_request: OnRequest, max_frame_size: int = DEFAULT_MAX_FRAME_SIZE) -> None:
        self._inner = inner
        self._direction = direction
        self._on_request = on_request
        self._decoder = FrameDecoder(max_frame_size)

    async def receive_some(self, max_bytes: int | None = None) -> bytes | bytearray:
        data = await self._inner.receive_some(max_bytes)
        for event in self._decoder.feed(data):
            if isinstance(event, Frame):
                for request in _requests(event.data, self._direction):
                    self._on_request(request)
        return data

    async def aclose(self) -> None:
        await self._inner.aclose()
