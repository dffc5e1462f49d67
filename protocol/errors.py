"""The one error catalogue of both links: numeric code and name for every error.

JSON-RPC's standard codes keep their numbers; quiesce's own codes live in the
implementation-defined server range. Tool results carry the *name* (``code``
field of a tool error); JSON-RPC error responses carry the *number*.
"""

from __future__ import annotations

import enum
from typing import Any


class ErrorCode(enum.IntEnum):
    # JSON-RPC 2.0 standard codes.
    PARSE_ERROR = -32700
    INVALID_REQUEST = -32600
    METHOD_NOT_FOUND = -32601
    INVALID_PARAMS = -32602
    INTERNAL = -32603
    # The cancellation code of LSP and ACP's ``$/cancel_request``.
    REQUEST_CANCELLED = -32800
    # quiesce codes (implementation-defined server error range).
    PROTOCOL_MISMATCH = -32001
    NOT_INITIALIZED = -32002
    NOT_FOUND = -32003
    BUSY = -32004
    TOOL_DENIED = -32010
    TOOL_TIMEOUT = -32011
    TOOL_FAILED = -32012
    ABORTED = -32013
    ABORTED_BEFORE_DISPATCH = -32014
    PATH_OUTSIDE_WORKSPACE = -32015
    HOST_OVERLOADED = -32016
    HOST_CRASHED = -32017
    PERMISSION_WITHDRAWN = -32018
    SHUTTING_DOWN = -32019
    SANDBOX_UNAVAILABLE = -32030


ERROR_MESSAGES: dict[ErrorCode, str] = {
    ErrorCode.PARSE_ERROR: "Parse error",
    ErrorCode.INVALID_REQUEST: "Invalid request",
    ErrorCode.METHOD_NOT_FOUND: "Method not found",
    ErrorCode.INVALID_PARAMS: "Invalid params",
    ErrorCode.INTERNAL: "Internal error",
    ErrorCode.REQUEST_CANCELLED: "Request cancelled",
    ErrorCode.PROTOCOL_MISMATCH: "Protocol version mismatch",
    ErrorCode.NOT_INITIALIZED: "Not initialized",
    ErrorCode.NOT_FOUND: "Not found",
    ErrorCode.BUSY: "Busy",
    ErrorCode.TOOL_DENIED: "Tool call denied",
    ErrorCode.TOOL_TIMEOUT: "Tool call timed out",
    ErrorCode.TOOL_FAILED: "Tool call failed",
    ErrorCode.ABORTED: "Tool call aborted",
    ErrorCode.ABORTED_BEFORE_DISPATCH: "Tool call aborted before dispatch",
    ErrorCode.PATH_OUTSIDE_WORKSPACE: "Path outside workspace",
    ErrorCode.HOST_OVERLOADED: "Host overloaded",
    ErrorCode.HOST_CRASHED: "Host crashed",
    ErrorCode.PERMISSION_WITHDRAWN: "Permission request withdrawn",
    ErrorCode.SHUTTING_DOWN: "Shutting down",
    ErrorCode.SANDBOX_UNAVAILABLE: "Sandbox required but unavailable",
}


class RpcError(Exception):
    """An error with a catalogue code; endpoints map it to a JSON-RPC error response."""

    def __init__(self, code: ErrorCode, message: str | None = None, data: Any = None) -> None:
        self.code = code
        self.message = message if message is not None else ERROR_MESSAGES[code]
        self.data = data
        super().__init__(f"{code.name}: {self.message}")


class RemoteError(RpcError):
    """An error response received from the peer for one of our requests."""

    def __init__(self, code: int, message: str, data: Any = None) -> None:
        try:
            known = ErrorCode(code)
        except ValueError:
            known = ErrorCode.INTERNAL
        super().__init__(known, message, data)
        self.raw_code = code
