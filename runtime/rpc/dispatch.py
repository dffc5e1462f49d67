"""Request dispatch under trio: jsonrpcserver's method lookup and result types, msgspec's
parsing and encoding.

jsonrpcserver 5's ``async_dispatch`` runs ``asyncio.gather`` and fails under trio, and
its params check is arity only. So parsing and params validation are msgspec's
(``protocol.envelope``): a request reaches this module already typed. Method lookup
(``get_method``) and the ``Success``/``Error`` results are jsonrpcserver's, the project's
chosen dispatcher; the response is then built as a msgspec Struct and encoded straight
from the handler's result (no detour through builtins). The shapes are JSON-RPC 2.0's as
jsonrpcserver writes them: an error carries ``data`` (``null`` when absent) and an
unknown method's ``data`` is its name. Concurrency is the caller's nursery.

What jsonrpcserver costs is measured by ``scripts/bench`` (its import is a visible part
of each process's start-up; see docs/benchmarks.md).

This module is the one place per endpoint where exceptions become error
responses: an :class:`RpcError` keeps its catalogue code, anything else is an
``INTERNAL`` error whose traceback goes to the log, never to the peer.
"""

from __future__ import annotations

import logging
import warnings
from collections.abc import Awaitable, Callable
from typing import Any

import msgspec

from protocol.envelope import IncomingRequest
from protocol.errors import ERROR_MESSAGES, ErrorCode, RpcError
from protocol.methods import RequestId

with warnings.catch_warnings():
    # jsonrpcserver reads its bundled schema with a deprecated importlib API.
    warnings.simplefilter("ignore", DeprecationWarning)
    from jsonrpcserver.dispatcher import get_method
    from jsonrpcserver.result import Error, ErrorResult, Success
    from jsonrpcserver.sentinels import NODATA
    from oslash.either import Left

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


async def dispatch_request(methods: dict[str, Handler], request: IncomingRequest
                           ) -> Response:
    """Run the handler of one request; return its JSON-RPC response."""
    found = get_method(methods, request.method)
    if isinstance(found, Left):  # in the link's method table, but this endpoint lacks it
        return _error_response(found._error, request.id)
    handler: Handler = found._value
    try:
        result = Success(await handler(request.params))
    except RpcError as exc:
        result = Error(int(exc.code), exc.message, exc.data)
    except Exception:  # the one mapping of unexpected failures for this endpoint
        log.exception("handler of %s failed", request.method)
        result = Error(int(ErrorCode.INTERNAL), ERROR_MESSAGES[ErrorCode.INTERNAL])
    if isinstance(result, Left):
        return _error_response(result._error, request.id)
    return ResultResponse("2.0", result._value.result, request.id)


def _error_response(error: ErrorResult, request_id: RequestId | None) -> ErrorResponse:
    data = None if error.data is NODATA else error.data
    return ErrorResponse("2.0", ErrorBody(error.code, error.message, data), request_id)


def encode_response(request_id: RequestId | None, value: msgspec.Struct) -> bytes:
    """The success response to ``request_id`` carrying ``value``, encoded."""
    return _encoder.encode(ResultResponse("2.0", value, request_id))


def encode_responses(responses: Response | list[Any]) -> bytes:
    """Encode one response, or a batch (responses and prebuilt error dicts)."""
    return _encoder.encode(responses)
