"""Messages fitted to a link's frame limit: nothing is written over it.

An answer that would be over the limit is replaced by an error answer (the peer would
drop it and wait forever), a notification that would be has its longest strings shortened
(``protocol.bounds.shorten``; the record it announces keeps them whole), and a request
that would be raises :class:`OversizedMessage` in its sender.
"""

from __future__ import annotations

import logging

import msgspec

from protocol.bounds import shorten
from protocol.envelope import IncomingRequest, encode_message, encode_notification, error_response
from protocol.errors import ERROR_MESSAGES, ErrorCode, RpcError
from runtime.link.dispatch import Response, encode_responses

log = logging.getLogger(__name__)


class OversizedMessage(RpcError):
    """A message larger than the link's frame limit: the peer would drop it unanswered."""

    def __init__(self, size: int, limit: int) -> None:
        super().__init__(ErrorCode.INVALID_PARAMS,
                         f"message of {size} bytes exceeds the {limit} byte frame limit",
                         {"size": size, "limit": limit})


def shortened(name: str, method: str, params: msgspec.Struct, size: int,
              max_frame_size: int) -> bytes | None:
    """The notification with its longest strings cut to fit a frame (None: it cannot
    be made to, and is dropped). The record it announces keeps them whole.
    ``size``: the encoded notification's, so its params are not encoded again."""
    overhead = len(encode_notification(method, {}))  # type: ignore[arg-type]
    short = shorten(msgspec.to_builtins(params), max_frame_size - overhead,
                    size - overhead + 2)  # its params: "{}" is in the overhead
    if short is None:
        log.error("%s: %s of %d bytes cannot be shortened to the %d byte frame limit; "
                  "dropped", name, method, size, max_frame_size)
        return None
    log.warning("%s: %s of %d bytes shortened to fit the %d byte frame limit",
                name, method, size, max_frame_size)
    return encode_notification(method, short)


def fitted(name: str, request: IncomingRequest, response: Response, room: int,
           max_frame_size: int) -> bytes:
    """The encoded answer, or an error answer if it would not fit a frame; ``room``: bytes
    the frame needs besides it (a batch's ``[]``)."""
    payload = encode_responses(response)
    if len(payload) + room > max_frame_size:
        # The peer would drop it and wait forever: answer with an error instead.
        log.error("%s: answer to %s is %d bytes, over the frame limit", name,
                  request.method, len(payload))
        payload = encode_message(error_response(
            request.id, int(ErrorCode.INTERNAL), ERROR_MESSAGES[ErrorCode.INTERNAL],
            f"the answer ({len(payload)} bytes) exceeds the {max_frame_size} byte "
            "frame limit"))
    return payload
