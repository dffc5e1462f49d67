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

jsonrpcserver is loaded without its package ``__init__`` (``jsonrpcserver_load``): only
the three submodules used, not its asyncio dispatcher, jsonschema validation or HTTP
server. ``scripts/bench`` measures the import (see docs/benchmarks.md).

This module is the one place per endpoint where a request's exceptions become error
responses: an :class:`RpcError` keeps its catalogue code (also when a handler's nursery
wraps it, alone, in an exception group), anything else is an ``INTERNAL`` error whose
traceback goes to the log, never to the peer. (A notification's handler failing is
logged and dropped by the endpoint: there is nobody to answer.)

The effect point of a request (when the link's reader may read on) is the handler's
declaration's (``runtime.link.effects``): this module runs the handler as declared and
takes the effect at the latest when the handler answers.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any, cast

import msgspec

from protocol.envelope import IncomingRequest
from protocol.errors import ERROR_MESSAGES, ErrorCode, RpcError
from protocol.methods import RequestId
from runtime.link.effects import Effect, Handler, call_handler
from runtime.link.jsonrpcserver_load import (
    NODATA,
    Error,
    ErrorResult,
    Left,
    Success,
    get_method,
)

log = logging.getLogger(__name__)

InstantHandler = Callable[[Any], "msgspec.Struct | msgspec.Raw | None"]
"""A request's answer at once, in the reader (no task), or ``None``: the request's
``Handler`` then runs as usual. It must not block, and takes its effect as it answers."""
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


async def dispatch_request(methods: dict[str, Handler], request: IncomingRequest,
                           effect: Effect | None = None) -> Response:
    """Run the handler of one request as it was declared; return its JSON-RPC response.
    ``effect`` (the link reader's) is taken at the latest when the handler returns."""
    if effect is None:
        effect = Effect()  # nobody waits for it (a caller outside a link)
    response = await _dispatch(methods, request, effect)
    effect.take()
    return response


async def _dispatch(methods: dict[str, Handler], request: IncomingRequest,
                    effect: Effect) -> Response:
    found = get_method(cast("dict[str, Any]", methods), request.method)
    if isinstance(found, Left):  # in the link's method table, but this endpoint lacks it
        return _error_response(found._error, request.id)
    handler: Handler = found._value
    try:
        result = Success(await call_handler(handler, request.params, effect))
    except Exception as exc:  # noqa: BLE001 - the one mapping (_failure logs it)
        result = _failure(exc, request.method)
    return _response(result, request.id)


def dispatch_now(methods: dict[str, InstantHandler], request: IncomingRequest
                 ) -> Response | None:
    """The response of ``request``'s instant handler, or ``None`` if it has none or it
    declined (the request is then dispatched as usual, ``dispatch_request``)."""
    found = get_method(methods, request.method)
    if isinstance(found, Left):
        return None
    handler: InstantHandler = found._value
    try:
        value = handler(request.params)
        if value is None:
            return None
        result = Success(value)
    except Exception as exc:  # noqa: BLE001 - the same mapping as _dispatch's
        result = _failure(exc, request.method)
    return _response(result, request.id)


def _failure(exc: Exception, method: str) -> Any:
    rpc_error = _rpc_error_of(exc)
    if rpc_error is None:
        log.exception("handler of %s failed", method)
        return Error(int(ErrorCode.INTERNAL), ERROR_MESSAGES[ErrorCode.INTERNAL])
    return Error(int(rpc_error.code), rpc_error.message, rpc_error.data)


def _response(result: Any, request_id: RequestId | None) -> Response:
    if isinstance(result, Left):
        return _error_response(result._error, request_id)
    return ResultResponse("2.0", result._value.result, request_id)


def _rpc_error_of(exc: BaseException) -> RpcError | None:
    """The catalogue error a failure stands for: an ``RpcError``, also when it is the one
    error of a (nested) exception group, as a handler's nursery raises it."""
    while isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
        exc = exc.exceptions[0]
    return exc if isinstance(exc, RpcError) else None


def _error_response(error: ErrorResult, request_id: RequestId | None) -> ErrorResponse:
    data = None if error.data is NODATA else error.data
    return ErrorResponse("2.0", ErrorBody(error.code, error.message, data), request_id)


def encode_response(request_id: RequestId | None, value: msgspec.Struct) -> bytes:
    """The success response to ``request_id`` carrying ``value``, encoded."""
    return _encoder.encode(ResultResponse("2.0", value, request_id))


def encode_responses(responses: Response | list[Any]) -> bytes:
    """Encode one response, or a batch (responses and prebuilt error dicts)."""
    return _encoder.encode(responses)
