"""Request dispatch under trio: the handler of one request, and its response.

Parsing and params validation are msgspec's (``protocol.envelope``): a request
reaches this module already typed. What is left is method lookup, the
result/error response shapes of JSON-RPC 2.0 and the one mapping of failures;
concurrency is the caller's nursery.

jsonrpcserver's pure helpers did the lookup and shapes before. They are not
imported any more: its import (jsonschema, asyncio, http.server) cost each
process ~60 ms of start-up, and its ``Success``/``to_serializable_one`` path
turned every result into builtins before encoding. The response shapes are
kept byte for byte (``jsonrpc``, ``result``/``error``, ``id``; an error always
carries ``data``, ``null`` when absent, and an unknown method's ``data`` is its
name), and results are encoded straight from their Structs.

This module is the one place per endpoint where exceptions become error
responses: an :class:`RpcError` keeps its catalogue code, anything else is an
``INTERNAL`` error whose traceback goes to the log, never to the peer.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import msgspec

from protocol.envelope import IncomingRequest
from protocol.errors import ERROR_MESSAGES, ErrorCode, RpcError
from protocol.methods import RequestId

log = logging.getLogger(__name__)

Handler = Callable[[Any], Awaitable[msgspec.Struct]]
NotificationHandler = Callable[[Any], None]


class ResultResponse(msgspec.Struct, frozen=True):
    """A success; fields in the order jsonrpcserver wrote them."""

    jsonrpc: str
    result: Any
    id: RequestId | None


class ErrorBody(msgspec.Struct, frozen=True):
    code: int
    message: str
    data: Any = None


class ErrorResponse(msgspec.Struct, frozen=True):
    jsonrpc: str
    error: ErrorBody
    id: RequestId | None


Response = ResultResponse | ErrorResponse

_encoder = msgspec.json.Encoder()


async def dispatch_request(methods: Mapping[str, Handler], request: IncomingRequest
                           ) -> Response:
    """Run the handler of one request; return its JSON-RPC response."""
    handler = methods.get(request.method)
    if handler is None:  # in the link's method table, but this endpoint lacks it
        return ErrorResponse("2.0", ErrorBody(int(ErrorCode.METHOD_NOT_FOUND),
                                              ERROR_MESSAGES[ErrorCode.METHOD_NOT_FOUND],
                                              request.method), request.id)
    try:
        value = await handler(request.params)
    except RpcError as exc:
        return ErrorResponse("2.0", ErrorBody(int(exc.code), exc.message, exc.data), request.id)
    except Exception:  # the one mapping of unexpected failures for this endpoint
        log.exception("handler of %s failed", request.method)
        return ErrorResponse("2.0", ErrorBody(int(ErrorCode.INTERNAL),
                                              ERROR_MESSAGES[ErrorCode.INTERNAL]), request.id)
    return ResultResponse("2.0", value, request.id)


def encode_response(request_id: RequestId | None, value: msgspec.Struct) -> bytes:
    """The success response to ``request_id`` carrying ``value``, encoded."""
    return _encoder.encode(ResultResponse("2.0", value, request_id))


def encode_responses(responses: Response | list[Any]) -> bytes:
    """Encode one response, or a batch (responses and prebuilt error dicts)."""
    return _encoder.encode(responses)
