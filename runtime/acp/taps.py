"""A tap on the ACP input: it sees each request in wire order, before it is dispatched.

The endpoint does not tell handlers their request ids, and it runs a request in a task
of its own while it handles a notification inline. So ``session/prompt`` followed at
once by ``session/cancel`` can reach the cancel before the prompt's handler has started;
and ``$/cancel_request`` names a request only by id. The tap frames and parses the same
bytes with the same sans-IO functions the endpoint uses (``protocol.framing``,
``protocol.envelope.parse_frame``) and reports every request the endpoint will dispatch,
synchronously and in wire order. Bytes pass through untouched; what the tap cannot parse
is the endpoint's to answer.
"""

from __future__ import annotations

from collections.abc import Callable

import trio

from protocol.envelope import Batch, IncomingRequest, parse_frame
from protocol.framing import DEFAULT_MAX_FRAME_SIZE, Frame, FrameDecoder
from protocol.methods import Direction

OnRequest = Callable[[IncomingRequest], None]


def _requests(frame: bytes, direction: Direction) -> list[IncomingRequest]:
    parsed = parse_frame(frame, direction)
    items = parsed.items if isinstance(parsed, Batch) else (parsed,)
    return [item for item in items if isinstance(item, IncomingRequest)]


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
