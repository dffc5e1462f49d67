"""Request dispatch through jsonrpcserver's pure helpers, under trio.

jsonrpcserver 5's ``async_dispatch`` runs ``asyncio.gather`` and fails under
trio, and its params check is arity only. So parsing and params validation are
msgspec's (``protocol.envelope``); method lookup, the Success/Error result types
and the response shapes are jsonrpcserver's; concurrency is the caller's nursery.

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

with warnings.catch_warnings():
    # jsonrpcserver reads its bundled schema with a deprecated importlib API.
    warnings.simplefilter("ignore", DeprecationWarning)
    from jsonrpcserver.dispatcher import get_method, to_response
    from jsonrpcserver.request import Request
    from jsonrpcserver.response import to_serializable_one
    from jsonrpcserver.result import Error, Success
    from oslash.either import Left

log = logging.getLogger(__name__)

Handler = Callable[[Any], Awaitable[msgspec.Struct]]
NotificationHandler = Callable[[Any], None]

_to_builtins = msgspec.to_builtins


async def dispatch_request(methods: dict[str, Handler], request: IncomingRequest) -> Any:
    """Run the handler of one request; return the serializable JSON-RPC response."""
    found = get_method(methods, request.method)
    envelope = Request(request.method, [], request.id)
    if isinstance(found, Left):  # in the link's method table, but this endpoint lacks it
        return to_serializable_one(to_response(envelope, found))
    handler: Handler = found._value
    try:
        value = await handler(request.params)
        result = Success(_to_builtins(value))
    except RpcError as exc:
        result = Error(int(exc.code), exc.message, exc.data)
    except Exception:  # the one mapping of unexpected failures for this endpoint
        log.exception("handler of %s failed", request.method)
        result = Error(int(ErrorCode.INTERNAL), ERROR_MESSAGES[ErrorCode.INTERNAL])
    return to_serializable_one(to_response(envelope, result))
